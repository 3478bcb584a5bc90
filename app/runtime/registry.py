"""Names an agent spec may use: agent kinds and tools (built in, or from entry points).

Operators add kinds through the ``agentstation.agents`` entry point group (a callable
``build(spec, ctx) -> agent``) and tools through ``agentstation.tools`` (a ``BaseAction``
subclass or factory called with the tool's ``config``). API input never names an import path.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Protocol

from agents.schema import AgentMessage
from app.errors import ValidationFailed
from app.outbound import OutboundPolicy, OutboundRefused
from app.schemas.agents import AgentSpec

log = logging.getLogger(__name__)


class ServableAgent(Protocol):
    """What the runner needs from an agent (``agents.AsyncAgent`` provides it)."""

    def stream(
        self, message: Any, session_id: Any = 0, **kwargs: Any
    ) -> AsyncIterator[AgentMessage]:
        """Chunks of the reply; the last one is the END message."""
        ...

    def state_dict(self, session_id: Any = 0) -> dict[str, Any]:
        """The session's memory, keyed by dotted path."""
        ...

    def load_state_dict(self, state: dict[str, Any], session_id: Any = 0) -> None:
        """Replace the session's memory."""
        ...


@dataclass
class BuildContext:
    """What builders may use: model LLMs by name, the kernel pool, the sandbox timeout."""

    llms: dict[str, Any]
    kernel_pool: Any | None = None
    name: str | None = None  # the agent definition's name (the reply's sender)
    registry: Registry | None = None


AgentBuilder = Callable[[AgentSpec, BuildContext], ServableAgent]
ToolFactory = Callable[..., Any]


@dataclass
class AgentKind:
    """A registered agent kind.

    ``shared``: one built agent may serve concurrent stateless requests, each under its own
    session id (lagent's design: memory per session id, and nothing else in the agent, its
    LLM, aggregator or output parser kept per call). Kinds from entry points are not shared
    unless they say so; a tool agent (executors, kernels) is built per request.
    """

    name: str
    build: AgentBuilder
    supports_tools: bool = True
    shared: bool = False
    needs_model: bool = True  # False: its agents' specs name the models (``task``)
    check: Callable[[AgentSpec, str], None] | None = None  # kind-specific 422s


@dataclass
class Registry:
    """Kinds and tools by name."""

    kinds: dict[str, AgentKind] = field(default_factory=dict)
    tools: dict[str, ToolFactory] = field(default_factory=dict)
    outbound: OutboundPolicy = field(default_factory=OutboundPolicy)  # remote URLs allowed
    remote_key_prefix: str = "AGENTSTATION_REMOTE_KEY_"  # api_key_env must start with it

    def add_kind(
        self,
        name: str,
        build: AgentBuilder,
        supports_tools: bool = True,
        shared: bool = False,
        needs_model: bool = True,
        check: Callable[[AgentSpec, str], None] | None = None,
    ) -> None:
        """Register an agent kind (``shared``: see ``AgentKind``)."""
        self.kinds[name] = AgentKind(name, build, supports_tools, shared, needs_model, check)

    def add_tool(self, name: str, factory: ToolFactory) -> None:
        """Register a tool."""
        self.tools[name] = factory

    def validate(self, spec: AgentSpec, models: list[str], prefix: str = "spec") -> None:
        """422 naming the first unknown kind, model or tool of ``spec`` (and its sub-agents)."""
        if spec.remote is not None:
            self._validate_remote(spec, prefix)
            return
        if spec.api_key_env is not None:
            raise ValidationFailed(
                "api_key_env is for a remote agent (with 'remote')",
                param=f"{prefix}.api_key_env",
                code="not_supported",
            )
        kind = self.kinds.get(spec.kind)
        if kind is None:
            raise ValidationFailed(
                f"unknown agent kind {spec.kind!r}; registered: {sorted(self.kinds)}",
                param=f"{prefix}.kind",
                code="unknown_kind",
            )
        if kind.check is not None:
            kind.check(spec, prefix)
        if spec.model is None:
            if kind.needs_model:
                raise ValidationFailed(
                    "a model is required", param=f"{prefix}.model", code="missing_field"
                )
        elif spec.model not in models:
            raise ValidationFailed(
                f"unknown model {spec.model!r}; configured: {sorted(models)}",
                param=f"{prefix}.model",
                code="unknown_model",
            )
        if spec.tools and not kind.supports_tools:
            raise ValidationFailed(
                f"kind {spec.kind!r} takes no tools; use 'tool_agent'",
                param=f"{prefix}.tools",
                code="tools_not_supported",
            )
        for i, tool in enumerate(spec.tools):
            if tool.name not in self.tools:
                raise ValidationFailed(
                    f"unknown tool {tool.name!r}; registered: {sorted(self.tools)}",
                    param=f"{prefix}.tools[{i}].name",
                    code="unknown_tool",
                )
            self._check_tool_config(tool.name, tool.config, f"{prefix}.tools[{i}].config")
            if tool.name == "mcp" and isinstance(tool.config.get("url"), str):
                self._check_url(tool.config["url"], f"{prefix}.tools[{i}].config.url")
        for name in spec.sub_agents:
            if not name or "." in name:
                raise ValidationFailed(
                    "a sub-agent's key must be non-empty and contain no '.'",
                    param=f"{prefix}.sub_agents",
                    code="invalid_name",
                )
        for param, child in spec.children(prefix):
            if isinstance(child, AgentSpec):  # names are checked against the tenant's agents
                self.validate(child, models, param)

    def _validate_remote(self, spec: AgentSpec, prefix: str) -> None:
        """A remote agent: a key variable with the prefix and an allowed URL (syntax and
        listed or literal addresses; ``check_remotes`` resolves host names)."""
        env = spec.api_key_env
        if env is not None and not env.startswith(self.remote_key_prefix):
            raise ValidationFailed(
                f"api_key_env must name a variable starting with {self.remote_key_prefix!r}",
                param=f"{prefix}.api_key_env",
                code="invalid_value",
            )
        self._check_url(spec.remote or "", f"{prefix}.remote")

    def check_remotes(self, spec: AgentSpec, prefix: str = "spec") -> None:
        """422 ``url_not_allowed`` naming the first remote agent of ``spec`` (or an inline
        agent in it) whose URL the outbound policy refuses now, its host name resolved (call
        off the event loop: it resolves names). An agent is checked so when it is stored or
        updated; a run checks again when it connects (DNS may change meanwhile)."""
        if spec.remote is not None:
            try:
                self.outbound.check(spec.remote)
            except OutboundRefused as exc:
                raise ValidationFailed(
                    str(exc), param=f"{prefix}.remote", code="url_not_allowed"
                ) from None
        for param, child in spec.children(prefix):
            if isinstance(child, AgentSpec):
                self.check_remotes(child, param)

    def _check_url(self, url: str, param: str) -> None:
        """422 ``url_not_allowed`` unless the URL passes the outbound policy (syntax, listed,
        or not a literal private address; host names are resolved again when connecting)."""
        try:
            host, port = self.outbound.check_syntax(url)
            if not self.outbound.listed(host, port):
                _refuse_literal_private(host)
        except OutboundRefused as exc:
            raise ValidationFailed(str(exc), param=param, code="url_not_allowed") from None

    def _check_tool_config(self, name: str, config: dict[str, Any], param: str) -> None:
        """Build the tool once (tools start nothing in their constructor) to check its config."""
        try:
            self.tools[name](**_tool_kwargs(name, config))
        except (TypeError, ValueError) as exc:
            raise ValidationFailed(
                f"bad config for tool {name!r}: {exc}", param=param, code="invalid_tool_config"
            ) from exc

    def build(self, spec: AgentSpec, ctx: BuildContext) -> ServableAgent:
        """A fresh agent object for ``spec``."""
        ctx.registry = self
        if spec.remote is not None:
            return self.build_remote(spec, ctx)
        return self.kinds[spec.kind].build(spec, ctx)

    def build_remote(self, spec: AgentSpec, ctx: BuildContext) -> ServableAgent:
        """A ``RemoteAgent`` for a spec with ``remote`` (its key read from the environment)."""
        import os

        from agents.remote import RemoteAgent

        key = os.environ.get(spec.api_key_env) if spec.api_key_env else None
        return RemoteAgent(
            spec.remote or "", name=ctx.name, api_key=key, url_check=self.outbound.check
        )

    def shared(self, spec: AgentSpec) -> bool:
        """Whether one agent built for ``spec`` may serve concurrent stateless requests."""
        kind = self.kinds.get(spec.kind)
        return kind is not None and kind.shared

    def build_tools(self, spec: AgentSpec, ctx: BuildContext) -> list[Any]:
        """The spec's tool objects."""
        tools: list[Any] = []
        for ref in spec.tools:
            config = _tool_kwargs(ref.name, ref.config)
            if ref.name.startswith("IPython") and ctx.kernel_pool is not None:
                config["pool"] = ctx.kernel_pool  # the gateway's pool, never one from input
            if ref.name == "mcp":  # the service's policies, never values from input
                config["url_check"] = self.outbound.check
                config["launch"] = _stdio_launcher(ctx.kernel_pool)
            tools.append(self.tools[ref.name](**config))
        return tools

    def load_entry_points(self) -> None:
        """Add kinds and tools that installed packages declare."""
        for ep in entry_points(group="agentstation.agents"):
            try:
                self.add_kind(ep.name, ep.load())
            except Exception:
                log.exception("agent kind entry point %s failed to load", ep.name)
        for ep in entry_points(group="agentstation.tools"):
            try:
                self.add_tool(ep.name, ep.load())
            except Exception:
                log.exception("tool entry point %s failed to load", ep.name)


def _stdio_launcher(pool: Any) -> Any:
    """How ``mcp`` tools start stdio servers: in the session's sandbox, or not at all."""
    if pool is not None:
        return pool.stdio_launch

    async def refuse(session: str, argv: list[str]) -> Any:
        raise RuntimeError("stdio MCP servers need the sandbox, which is disabled here")

    return refuse


def _refuse_literal_private(host: str) -> None:
    import ipaddress

    if host == "localhost" or host.endswith(".localhost"):
        raise OutboundRefused(f"{host!r} is this machine; list it in AGENTSTATION_OUTBOUND_ALLOW")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return  # a host name: resolved and checked when connecting
    if not address.is_global:
        raise OutboundRefused(
            f"{host!r} is a non-public address; list it in AGENTSTATION_OUTBOUND_ALLOW"
        )


def _tool_kwargs(name: str, config: dict[str, Any]) -> dict[str, Any]:
    """Constructor arguments from a spec's tool config (``timeout_s`` is the kernel timeout)."""
    kwargs = {k: v for k, v in config.items() if k not in ("pool", "url_check", "launch")}
    if name.startswith("IPython") and "timeout_s" in kwargs:
        kwargs["timeout"] = kwargs.pop("timeout_s")
    return kwargs
