"""Built-in agent kinds (``agent``, ``tool_agent``) and tools, built from a spec."""

from __future__ import annotations

import importlib
import logging
from typing import Any

from app.runtime.registry import BuildContext, Registry, ServableAgent
from app.schemas.agents import AgentSpec

log = logging.getLogger(__name__)


def _llm(spec: AgentSpec, ctx: BuildContext) -> Any:
    assert spec.model is not None  # validated before building
    llm = ctx.llms[spec.model]
    return llm


def _output_format(spec: AgentSpec) -> Any:
    fmt = spec.output_format
    if fmt is None:
        return None
    parsers = importlib.import_module("agents.parsers")
    if fmt.type == "tool":
        return parsers.ToolParser(tool_type=fmt.tool_type, begin=fmt.begin, end=fmt.end)
    if fmt.type == "json":
        return parsers.JSONParser()
    if fmt.type == "native":
        native = importlib.import_module("agents.native")
        return native.NativeToolFormat(tool_choice=fmt.tool_choice)
    return parsers.StrParser()


def _aggregator(spec: AgentSpec) -> Any:
    module = importlib.import_module("agents.aggregator")
    if spec.aggregator == "tool":
        return module.ToolAggregator()
    return module.DefaultAggregator()


def build_agent(spec: AgentSpec, ctx: BuildContext) -> ServableAgent:
    """``kind: agent``: one LLM call per message."""
    from agents.agent import AsyncAgent

    agent = AsyncAgent(
        llm=_llm(spec, ctx),
        template=spec.system_prompt,
        output_format=_output_format(spec),
        aggregator=_aggregator(spec),
        name=ctx.name,
    )
    return _with_gen_params(agent, spec)


def build_tool_agent(spec: AgentSpec, ctx: BuildContext) -> ServableAgent:
    """``kind: tool_agent``: the model calls tools until it answers (at most ``max_turn``)."""
    from agents.tool_agent import AsyncToolAgent

    assert ctx.registry is not None
    agent = AsyncToolAgent(
        llm=_llm(spec, ctx),
        template=spec.system_prompt,
        executor=ctx.registry.build_tools(spec, ctx) or None,
        output_format=_output_format(spec),  # None: the JSON tool-call default
        max_turn=spec.max_turn,
        name=ctx.name,
    )
    return _with_gen_params(agent, spec)


def _with_gen_params(agent: Any, spec: AgentSpec) -> ServableAgent:
    # Spec gen_params apply to every call; a run's own gen_params override them per call.
    agent.agentstation_gen_params = spec.gen_params.to_kwargs()
    result: ServableAgent = agent
    return result


def _lazy_tool(module: str, name: str) -> Any:
    def factory(**config: Any) -> Any:
        return getattr(importlib.import_module(module), name)(**config)

    factory.__name__ = name
    return factory


# The gateway runs async agents: the Async twins answer to the same tool names.
BUILTIN_TOOLS = {
    "IPythonInteractive": ("agents.actions.ipython", "AsyncIPythonInteractive"),
    "IPythonInterpreter": ("agents.actions.ipython", "AsyncIPythonInterpreter"),
    "mcp": ("agents.actions.mcp", "MCPToolkit"),  # an MCP server's tools (docs/interop.md)
}


def register_builtins(registry: Registry) -> None:
    """The kinds and tools every installation has."""
    # One model call per message, no tools and no hooks: its memory is its only per-session
    # state, so stateless requests share one built object (AppState.stateless_agent).
    registry.add_kind("agent", build_agent, supports_tools=False, shared=True)
    registry.add_kind("tool_agent", build_tool_agent)
    for name, (module, cls) in BUILTIN_TOOLS.items():
        registry.add_tool(name, _lazy_tool(module, cls))
    try:
        builtins = importlib.import_module("agents.actions.builtins")
    except ImportError:
        log.warning("agents.actions.builtins is not available")
        return
    for name in getattr(builtins, "__all__", []):
        registry.add_tool(name, _lazy_tool("agents.actions.builtins", name))
