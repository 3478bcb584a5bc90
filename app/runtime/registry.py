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


@dataclass
class Registry:
    """Kinds and tools by name."""

    kinds: dict[str, AgentKind] = field(default_factory=dict)
    tools: dict[str, ToolFactory] = field(default_factory=dict)

    def add_kind(
        self, name: str, build: AgentBuilder, supports_tools: bool = True, shared: bool = False
    ) -> None:
        """Register an agent kind (``shared``: see ``AgentKind``)."""
        self.kinds[name] = AgentKind(name, build, supports_tools, shared)

    def add_tool(self, name: str, factory: ToolFactory) -> None:
        """Register a tool."""
        self.tools[name] = factory

    def validate(self, spec: AgentSpec, models: list[str], prefix: str = "spec") -> None:
        """422 naming the first unknown kind, model or tool of ``spec`` (and its sub-agents)."""
        kind = self.kinds.get(spec.kind)
        if kind is None:
            raise ValidationFailed(
                f"unknown agent kind {spec.kind!r}; registered: {sorted(self.kinds)}",
                param=f"{prefix}.kind",
                code="unknown_kind",
            )
        if spec.model not in models:
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
        for name, sub in spec.sub_agents.items():
            self.validate(sub, models, f"{prefix}.sub_agents.{name}")

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
        return self.kinds[spec.kind].build(spec, ctx)

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


def _tool_kwargs(name: str, config: dict[str, Any]) -> dict[str, Any]:
    """Constructor arguments from a spec's tool config (``timeout_s`` is the kernel timeout)."""
    kwargs = {k: v for k, v in config.items() if k != "pool"}
    if name.startswith("IPython") and "timeout_s" in kwargs:
        kwargs["timeout"] = kwargs.pop("timeout_s")
    return kwargs


def default_registry() -> Registry:
    """Built-in kinds and tools plus entry points."""
    from app.runtime import builders

    registry = Registry()
    builders.register_builtins(registry)
    registry.load_entry_points()
    return registry
