"""Built-in agent kinds (``agent``, ``tool_agent``, ``task``) and tools, built from a spec.

Sub-agents are used: an ``agent`` with ``sub_agents`` is a round-robin review (its answer goes
to each sub-agent in turn, which answers back, then it answers last); a ``tool_agent``'s
sub-agents are tools the model calls by their key; a ``task`` runs ``agents.Task``.
Named sub-agents arrive here resolved (``app.services.agent_refs``).
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from app.errors import ValidationFailed
from app.outbound import OutboundPolicy
from app.runtime.registry import BuildContext, Registry, ServableAgent
from app.schemas.agents import AgentSpec, DoneSpec

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
    if not spec.sub_agents:
        return _with_gen_params(agent, spec)
    from agents.task import Task
    from agents.task_types import TaskConfig

    # A review round: the answer goes to each sub-agent in turn and back; the agent ends it.
    subs = [Task(_member(sub, ctx, key), single_round=True) for key, sub in _subs(spec)]
    task = Task(
        agent,
        name=ctx.name,
        sub_tasks=subs,
        round_robin=True,
        max_turns=1 + 2 * len(subs),
        gen_params=spec.gen_params.to_kwargs(),
        restart=False,  # a session's turns share the memory
        # A review round is not a langroid program: "DONE" in an answer is just text.
        config=TaskConfig(
            recognize_string_signals=False, inf_loop_cycle_len=4, inf_loop_wait_factor=3
        ),
    )
    task.agentstation_gen_params = {}  # the spec's: gen_params
    result: ServableAgent = task
    return result


def build_model_agent(spec: AgentSpec, ctx: BuildContext) -> ServableAgent:
    """``kind: model``: the model as it is, on OpenAI chat messages with the caller's function
    tools (``agents.chat_agent.ChatAgent``; what the Responses API runs for a raw model)."""
    from agents.chat_agent import ChatAgent

    return _with_gen_params(ChatAgent(_llm(spec, ctx), ctx.name, spec.system_prompt), spec)


def build_tool_agent(spec: AgentSpec, ctx: BuildContext) -> ServableAgent:
    """``kind: tool_agent``: the model calls tools until it answers (at most ``max_turn``)."""
    from agents.agent_tool import AgentTool
    from agents.tool_agent import AsyncToolAgent

    assert ctx.registry is not None
    members = [(key, _member(sub, ctx, key)) for key, sub in _subs(spec)]
    tools = ctx.registry.build_tools(spec, ctx) + [AgentTool(a, key) for key, a in members]
    executor: Any = tools or None
    waits = spec.approval_tools()
    if tools and waits is not None:  # calls of these tools wait for a person (approvals.md)
        from agents.actions.approval import RequireApproval
        from agents.actions.executor import AsyncActionExecutor

        policy = RequireApproval("all" if waits == ["*"] else waits)
        executor = AsyncActionExecutor(tools, approval=policy)
    agent = AsyncToolAgent(
        llm=_llm(spec, ctx),
        template=spec.system_prompt,
        executor=executor,
        output_format=_output_format(spec),  # None: the JSON tool-call default
        max_turn=spec.max_turn,
        name=ctx.name,
    )
    for key, member in members:  # their memories are the session's too (``critic.memory``)
        agent.__dict__["_registries"]["agent"][key] = member
    return _with_gen_params(agent, spec)


def build_task(spec: AgentSpec, ctx: BuildContext) -> ServableAgent:
    """``kind: task``: ``agents.Task`` over ``agent`` with ``sub_tasks`` and the rules."""
    from agents.task import Task
    from agents.task_types import Budget

    assert isinstance(spec.agent, AgentSpec)  # check_task; names were resolved
    name = ctx.name or "task"
    main = _member(spec.agent, ctx, name)
    if spec.done is not None and spec.done.tool:
        from agents.tool_message import DoneTool

        main.enable_message(DoneTool)
    budget = None
    if spec.run_budget is not None:
        budget = Budget(**spec.run_budget.model_dump())
    task = Task(
        main, name=name, max_turns=spec.max_turns, max_stalled_steps=spec.max_stalled_steps or 3,
        budget=budget, gen_params=getattr(main, "agentstation_gen_params", {}),
        restart=False,  # a session's turns share the memory
        **_done_rules(spec.done),
    )  # fmt: skip
    for i, sub in enumerate(spec.sub_tasks or []):
        assert isinstance(sub.agent, AgentSpec)
        key = sub.name or f"sub{i}"
        member = _member(sub.agent, ctx, key)
        task.add_sub_task(
            Task(
                member, name=key, single_round=sub.single_round, max_turns=sub.max_turns,
                gen_params=getattr(member, "agentstation_gen_params", {}),
                **_done_rules(sub.done),
            )
        )  # fmt: skip
    task.agentstation_gen_params = {}  # members carry their own
    result: ServableAgent = task
    return result


def _done_rules(done: DoneSpec | None) -> dict[str, Any]:
    if done is None:
        return {}
    return {
        "done": done.contains,
        "done_if_response": done.if_response,
        "done_if_no_response": done.if_no_response,
    }


TASK_FIELDS = ("agent", "sub_tasks", "done", "max_turns", "max_stalled_steps", "run_budget")
PROXY_FIELDS = ("human_input_mode", "max_consecutive_auto_reply")


def build_user_proxy(spec: AgentSpec, ctx: BuildContext) -> ServableAgent:
    """``kind: user_proxy``: Byzer-Agent's UserProxyAgent (the person) and ``agent``; when the
    mode asks the person, the run waits for them (``human_input``, resumed over REST)."""
    from agents.conversable import AgentDirectory, ConversableAgent
    from agents.user_proxy import WAIT, Conversation, UserProxyAgent

    assert isinstance(spec.agent, AgentSpec)  # check_user_proxy; names were resolved
    directory = AgentDirectory()
    limit = spec.max_consecutive_auto_reply
    mode = spec.human_input_mode or "ALWAYS"
    user = UserProxyAgent(
        "user", directory=directory, human_input_mode=mode, human_input=WAIT,
        max_consecutive_auto_reply=10 if limit is None else limit,
    )  # fmt: skip
    peer = ConversableAgent(
        "assistant", agent=_member(spec.agent, ctx, "assistant"), directory=directory
    )
    conversation = Conversation(user, peer, name=ctx.name or "assistant")
    conversation.agentstation_gen_params = {}
    result: ServableAgent = conversation
    return result


def _kind_of_field(field: str) -> str:
    return "task" if field in TASK_FIELDS else "user_proxy"


def check_user_proxy(spec: AgentSpec, prefix: str) -> None:
    """A user proxy talks to one agent (``agent``); task fields and approval are not its."""
    check_approval(spec, prefix)
    if spec.agent is None:
        raise ValidationFailed(
            "a user_proxy needs an agent to talk to (a stored agent's name or a spec)",
            param=f"{prefix}.agent",
            code="missing_field",
        )
    for field in TASK_FIELDS[1:]:
        if getattr(spec, field) is not None:
            raise ValidationFailed(
                f"{field!r} is for kind 'task' (this is 'user_proxy')",
                param=f"{prefix}.{field}",
                code="not_supported",
            )


def check_approval(spec: AgentSpec, prefix: str) -> None:
    """Approval pauses a ``tool_agent`` run; other kinds have no tool loop to stop."""
    if spec.approval_tools() is not None and "." in prefix:
        raise ValidationFailed(
            "approval is for the agent a session talks to, not a participant inside it",
            param=f"{prefix}.approval" if spec.approval is not None else f"{prefix}.tools",
            code="not_supported",
        )
    if spec.approval is not None and spec.kind != "tool_agent":
        raise ValidationFailed(
            f"'approval' is for kind 'tool_agent' (this is {spec.kind!r})",
            param=f"{prefix}.approval",
            code="not_supported",
        )


def check_single(spec: AgentSpec, prefix: str) -> None:
    """``agent`` / ``tool_agent``: the task fields are a mistake, not something to ignore."""
    check_approval(spec, prefix)
    for field in (*TASK_FIELDS, *PROXY_FIELDS):
        if getattr(spec, field) is not None:
            raise ValidationFailed(
                f"{field!r} is for kind {_kind_of_field(field)!r} (this is {spec.kind!r})",
                param=f"{prefix}.{field}",
                code="not_supported",
            )


def check_task(spec: AgentSpec, prefix: str) -> None:
    """422s of a ``task`` spec beyond its schema."""
    check_approval(spec, prefix)
    for field in PROXY_FIELDS:
        if getattr(spec, field) is not None:
            raise ValidationFailed(
                f"{field!r} is for kind 'user_proxy' (this is 'task')",
                param=f"{prefix}.{field}",
                code="not_supported",
            )
    if spec.agent is None:
        raise ValidationFailed(
            "a task needs an agent (a stored agent's name or a spec)",
            param=f"{prefix}.agent",
            code="missing_field",
        )
    names = [t.name or (t.agent if isinstance(t.agent, str) else f"sub{i}")
             for i, t in enumerate(spec.sub_tasks or [])]  # fmt: skip
    names = [n.replace(".", "_") for n in names]
    if len(set(names)) < len(names):
        raise ValidationFailed(
            "sub-task names must be unique (set `name`)", param=f"{prefix}.sub_tasks",
            code="duplicate_name",
        )  # fmt: skip
    known = {"llm", "agent", "user", *names}
    for field in ("if_response", "if_no_response"):
        for who in getattr(spec.done, field, None) or []:
            if who not in known:
                raise ValidationFailed(
                    f"unknown responder {who!r}; one of {sorted(known)}",
                    param=f"{prefix}.done.{field}",
                    code="unknown_responder",
                )


def _subs(spec: AgentSpec) -> list[tuple[str, AgentSpec]]:
    subs = []
    for key, sub in spec.sub_agents.items():
        if not isinstance(sub, AgentSpec):
            raise ValueError(f"sub-agent {key!r} was not resolved")
        subs.append((key, sub))
    return subs


def _member(spec: AgentSpec | str, ctx: BuildContext, name: str) -> Any:
    """A participant built like any agent, under ``name``."""
    if not isinstance(spec, AgentSpec):
        raise ValueError(f"agent {spec!r} was not resolved")
    assert ctx.registry is not None
    member_ctx = BuildContext(llms=ctx.llms, kernel_pool=ctx.kernel_pool, name=name)
    return ctx.registry.build(spec, member_ctx)


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
    registry.add_kind("agent", build_agent, supports_tools=False, shared=True, check=check_single)
    registry.add_kind("tool_agent", build_tool_agent, check=check_single)
    # A raw model on chat messages and the caller's function tools (docs/responses.md).
    registry.add_kind(
        "model", build_model_agent, supports_tools=False, shared=True, check=check_single
    )
    registry.add_kind("task", build_task, supports_tools=False, needs_model=False, check=check_task)
    registry.add_kind(
        "user_proxy", build_user_proxy, supports_tools=False, needs_model=False,
        check=check_user_proxy,
    )  # fmt: skip
    for name, (module, cls) in BUILTIN_TOOLS.items():
        registry.add_tool(name, _lazy_tool(module, cls))
    try:
        builtins = importlib.import_module("agents.actions.builtins")
    except ImportError:
        log.warning("agents.actions.builtins is not available")
        return
    for name in getattr(builtins, "__all__", []):
        registry.add_tool(name, _lazy_tool("agents.actions.builtins", name))


def default_registry(outbound: OutboundPolicy | None = None) -> Registry:
    """Built-in kinds and tools plus entry points (``outbound``: the allowed remote URLs)."""
    registry = Registry(outbound=outbound or OutboundPolicy())
    register_builtins(registry)
    registry.load_entry_points()
    return registry
