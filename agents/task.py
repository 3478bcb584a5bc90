"""Tasks (langroid's ``Task``): an agent's responders take turns until a rule ends the run.

``Task(agent, name=..., ...)`` wraps an agent. Its responders are the agent's tools (for a
``ToolAgent``), its model, an optional human (``interactive=True`` or ``user=callable``) and
sub-tasks (``add_sub_task``), whose results come back as messages. ``run(msg, turns=N)`` /
``await run_async(...)`` return a ``TaskResult`` whose ``status`` says why the run ended;
``stream(msg)`` streams every participant's messages. A task is an ``AsyncAgent`` too
(``await task(msg)`` is the run's last message), so it nests in lagent-style programs and
serves over the gateway like any agent. ``run_batch`` runs it over many inputs.
"""

from __future__ import annotations

import asyncio
import copy
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Sequence
from typing import Any, ClassVar, ParamSpec, TypeVar

from agents.agent import AsyncAgent, BaseAgent
from agents.chat_document import plain_message
from agents.llms.base import usage_scope
from agents.memory import SessionId
from agents.schema import AgentMessage, AgentStatusCode
from agents.task_result import TaskResult, result_of
from agents.task_run import RunLimits, TaskRun
from agents.task_types import Budget, Entity, StatusCode, TaskConfig
from agents.tool_message import RESULT_TOOLS

DoneRule = Callable[[AgentMessage], bool] | str
UserResponder = Callable[[AgentMessage | None], str | Awaitable[str | None] | None]
_P = ParamSpec("_P")
_R = TypeVar("_R")


class Task(AsyncAgent):
    """An agent and its responders, run in steps until a termination rule fires.

    ``Task(writer, critic, done="APPROVED")`` (more than one agent) is shorthand: the other
    agents become single-round sub-tasks named after them.
    """

    def __init__(
        self,
        agent: BaseAgent,
        *more_agents: BaseAgent,
        name: str | None = None,
        system_message: str | None = None,
        interactive: bool = False,
        user: UserResponder | None = None,
        single_round: bool = False,
        done: DoneRule | None = None,
        done_if_response: Iterable[str] = (),
        done_if_no_response: Iterable[str] = (),
        max_turns: int | None = None,
        max_stalled_steps: int = 3,
        budget: Budget | None = None,
        loop_repeats: int = 3,
        max_cycle_len: int = 4,
        sub_tasks: Iterable[Task] = (),
        round_robin: bool = False,
        gen_params: dict[str, Any] | None = None,
        llm_delegate: bool = False,
        restart: bool = True,
        erase_substeps: bool = False,
        allow_null_result: bool = False,
        config: TaskConfig | None = None,
        default_human_response: str | None = None,
    ) -> None:
        if not isinstance(agent, BaseAgent):
            raise TypeError(f"{type(agent).__name__} is not an agent")
        if max_turns is not None and max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        if config is not None:  # langroid's loop settings
            max_cycle_len = config.inf_loop_cycle_len
            loop_repeats = max(2, config.inf_loop_wait_factor)
        if max_stalled_steps < 1 or loop_repeats < 2 or max_cycle_len < (0 if config else 1):
            raise ValueError("max_stalled_steps, max_cycle_len >= 1 and loop_repeats >= 2")
        super().__init__(memory=None, name=name or agent.name)
        if "." in self.name:
            raise ValueError(f"task names can't contain '.', got {self.name!r}")
        self.agent = agent
        if system_message is not None:
            agent.template = system_message
        self.interactive = interactive
        if user is None and default_human_response is not None:  # langroid's: the person's
            user = _constant(default_human_response)  # answer, without asking anyone
        self.user = user
        self.single_round = single_round
        self.done = done
        self.done_if_response = set(done_if_response)
        self.done_if_no_response = set(done_if_no_response)
        self.max_turns = max_turns
        self.max_stalled_steps = max_stalled_steps
        self.budget = budget
        self.loop_repeats = loop_repeats
        self.max_cycle_len = max_cycle_len
        self.round_robin = round_robin  # sub-tasks take turns (else the first that answers)
        self.gen_params = dict(gen_params or {})  # with every model call of this task
        self.llm_delegate = llm_delegate  # the model leads (single_round: its answer is asked)
        self.restart = restart  # a top-level run starts with the agent's memory reset
        self.erase_substeps = erase_substeps  # forget the exchanges with sub-tasks at the end
        self.allow_null_result = allow_null_result  # a step without answer: NO_ANSWER instead
        self.config = config if config is not None else TaskConfig()
        self.sub_tasks: dict[str, Task] = {}
        self._killed = False
        for other in more_agents:
            self.add_sub_task(Task(other, single_round=True))
        for sub in sub_tasks:
            self.add_sub_task(sub)

    # -- configuration -------------------------------------------------------------------------
    @property
    def tool_loop(self) -> bool:
        """Whether the agent's tools and model are separate responders (a ``ToolAgent``)."""
        return hasattr(self.agent, "model_turn") and hasattr(self.agent, "run_tool")

    def wants_tool(self, message: AgentMessage) -> bool:
        """Whether ``message`` is a tool call this task's agent can answer."""
        check = getattr(self.agent, "wants_tool", None)
        return bool(self.tool_loop and check is not None and check(message))

    def add_sub_task(self, task: Task | Sequence[Task]) -> None:
        """Add sub-tasks (responders tried after the agent and the human, in order)."""
        for sub in [task] if isinstance(task, Task) else list(task):
            if not isinstance(sub, Task):
                raise TypeError(f"sub-tasks must be Tasks, got {type(sub).__name__}")
            if sub.name in self.sub_tasks or sub.name in (Entity.LLM, Entity.AGENT, Entity.USER):
                raise ValueError(f"a responder named {sub.name!r} already exists")
            self.sub_tasks[sub.name] = sub
            self.__dict__["_registries"]["agent"][sub.name] = sub

    def is_done(self, message: AgentMessage) -> bool:
        """Whether the done rule accepts ``message`` (a string rule: it is in the content)."""
        if self.done is None:
            return False
        if isinstance(self.done, str):
            return self.done in str(message.content)
        return bool(self.done(message))

    def clone(self, suffix: str | int = "") -> Task:
        """A copy with its own kill switch and cloned sub-tasks, sharing the same agents."""
        twin = copy.copy(self)
        twin.__dict__["_registries"] = {"agent": {"agent": self.agent}, "llm": {}, "executor": {}}
        twin.sub_tasks = {}
        twin._killed = False
        twin._hooks = dict(self._hooks)
        if suffix != "":
            twin.name = f"{self.name}-{suffix}"
        for sub in self.sub_tasks.values():
            twin.add_sub_task(sub.clone())
        return twin

    # -- control -------------------------------------------------------------------------------
    @property
    def killed(self) -> bool:
        """Whether ``kill()`` was called during the current run."""
        return self._killed

    def kill(self) -> None:
        """Stop the running run (and its sub-tasks) at the next chunk: it ends with ``KILL``."""
        self._killed = True
        for sub in self.sub_tasks.values():
            sub.kill()

    #: Sessions whose runs were killed by ``kill_session`` (cleared when a run of it starts).
    _killed_sessions: ClassVar[set[Any]] = set()

    @classmethod
    def kill_session(cls, session_id: SessionId = "") -> None:
        """langroid's ``Task.kill_session``: every task running in ``session_id`` ends with
        ``KILL`` at its next chunk."""
        cls._killed_sessions.add(session_id)

    @classmethod
    def session_killed(cls, session_id: SessionId) -> bool:
        """Whether ``kill_session(session_id)`` was called since a run of it started."""
        return session_id in cls._killed_sessions

    def _revive(self) -> None:
        self._killed = False
        for sub in self.sub_tasks.values():
            sub._revive()

    # -- running -------------------------------------------------------------------------------
    async def _stream(
        self, *message: Any, session_id: SessionId = 0, **kwargs: Any
    ) -> AsyncIterator[AgentMessage]:
        """A run; a top-level one first resets the agent's memory of the session (``restart``,
        or ``config.restart_as_subtask`` for a sub-task's) and clears ``kill_session``."""
        caller = kwargs.get("caller")
        if kwargs.pop("allow_restart", True) and (
            (self.restart and caller is None)
            or (self.config.restart_as_subtask and caller is not None)
        ):
            self.agent.reset(session_id)
        if caller is None:
            Task._killed_sessions.discard(session_id)
        async for chunk in super()._stream(*message, session_id=session_id, **kwargs):
            yield chunk

    async def forward(
        self,
        *message: AgentMessage,
        session_id: SessionId = 0,
        turns: int | None = None,
        caller: Task | None = None,
        max_cost: float = 0,
        max_tokens: int = 0,
        **kwargs: Any,
    ) -> Any:
        """Steps until a rule fires; streams every message, the last carrying the status."""
        self._revive()
        limits = RunLimits(max_cost=max_cost, max_tokens=max_tokens)
        if max_cost > 0 and not limits.priced(self):
            raise ValueError(
                "max_cost needs prices: Budget(prompt_cost_per_1k=..., completion_cost_per_1k=...)"
                " on the task, or chat_cost_per_1k_tokens on its model"
            )
        turns = None if turns is not None and turns <= 0 else turns  # langroid: -1 = no limit
        with usage_scope() as usage:
            run = TaskRun(self, session_id, turns, usage, kwargs, caller, limits)
            async for chunk in run.steps(plain_message(message[-1]) if message else None):
                yield chunk

    async def run_async(
        self,
        message: AgentMessage | str | None = None,
        turns: int | None = -1,
        caller: Task | None = None,
        max_cost: float = 0,
        max_tokens: int = 0,
        session_id: SessionId = 0,
        allow_restart: bool = True,
        **kwargs: Any,
    ) -> TaskResult:
        """Run to the end; the result says why it ended and holds every message.

        langroid's arguments: ``turns`` (-1: no limit but ``max_turns``), ``max_cost`` and
        ``max_tokens`` (0: none; the run ends ``MAX_COST`` / ``MAX_TOKENS`` once its usage,
        sub-tasks' included, is past them), ``allow_restart``. Other keyword arguments go to
        the model calls."""
        messages: list[AgentMessage] = []
        inputs = [] if message is None else [message]
        results = RESULT_TOOLS.get()
        token = RESULT_TOOLS.set([]) if results is None else None  # the top-level run's
        stream = self._stream(
            *inputs, session_id=session_id, turns=turns, caller=caller, max_cost=max_cost,
            max_tokens=max_tokens, allow_restart=allow_restart, **kwargs,
        )  # fmt: skip
        try:
            async for chunk in stream:
                if chunk.stream_state == AgentStatusCode.END:
                    messages.append(chunk)
            return result_of(messages, self.agent, RESULT_TOOLS.get() or [])
        finally:
            if token is not None:
                RESULT_TOOLS.reset(token)

    def run(
        self,
        message: AgentMessage | str | None = None,
        turns: int | None = -1,
        caller: Task | None = None,
        max_cost: float = 0,
        max_tokens: int = 0,
        session_id: SessionId = 0,
        allow_restart: bool = True,
        **kwargs: Any,
    ) -> TaskResult:
        """``run_async`` from sync code."""
        from agents.utils import run_sync

        return run_sync(
            self.run_async(
                message, turns, caller, max_cost, max_tokens, session_id, allow_restart, **kwargs
            )
        )


async def run_batch_async(
    task: Task,
    inputs: Sequence[AgentMessage | str | None],
    concurrency: int = 4,
    turns: int | None = None,
    session_prefix: str = "batch",
) -> list[TaskResult]:
    """Run clones of ``task`` over ``inputs``, at most ``concurrency`` at once.

    Each input runs in its own session (agents keep one memory per session, so runs never see
    each other's messages; the sessions are reset afterwards). Results come in input order; an
    input whose run raised gets ``status=ERROR`` with the exception in ``error``.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    gate = asyncio.Semaphore(concurrency)

    async def one(index: int, item: AgentMessage | str | None) -> TaskResult:
        clone = task.clone(index)
        session = f"{session_prefix}-{index}"
        async with gate:
            try:
                return await clone.run_async(item, turns=turns, session_id=session)
            except Exception as exc:  # one bad input never sinks the batch
                return TaskResult(status=StatusCode.ERROR, error=exc)
            finally:
                clone.reset(session, recursive=True)

    return list(await asyncio.gather(*(one(i, x) for i, x in enumerate(inputs))))


def run_batch(
    task: Task,
    inputs: Sequence[AgentMessage | str | None],
    concurrency: int = 4,
    turns: int | None = None,
) -> list[TaskResult]:
    """``run_batch_async`` from sync code."""
    from agents.utils import run_sync

    return run_sync(run_batch_async(task, inputs, concurrency=concurrency, turns=turns))


_NO_RESULT = (StatusCode.STALLED, StatusCode.MAX_TURNS, StatusCode.INF_LOOP, StatusCode.ERROR)


async def run_batch_tasks_async(
    task: Task,
    items: Sequence[Any],
    input_map: Callable[[Any], AgentMessage | str] = str,
    output_map: Callable[[TaskResult | None], Any] = lambda x: x,
    stop_on_first_result: bool = False,
    sequential: bool = True,
    batch_size: int | None = None,
    turns: int = -1,
    max_cost: float = 0.0,
    max_tokens: int = 0,
) -> list[Any]:
    """langroid's ``run_batch_tasks``: a clone of ``task`` per item (each in its own session),
    ``input_map(item)`` its message, ``output_map(result)`` its entry (the result is None
    when the run ended without one: STALLED, MAX_TURNS, INF_LOOP). ``sequential``: one at a
    time (langroid's default), else ``batch_size`` at once (None: all). An exception
    propagates. ``stop_on_first_result``: once an entry is not None, the rest are None."""
    inputs = [input_map(item) for item in items]
    out: list[Any] = [None] * len(inputs)
    size = 1 if sequential else (batch_size or max(1, len(inputs)))

    async def one(index: int) -> Any:
        clone, session = task.clone(index), f"batch-{index}"
        try:
            result = await clone.run_async(
                inputs[index], turns=turns, max_cost=max_cost, max_tokens=max_tokens,
                session_id=session,
            )  # fmt: skip
        finally:
            clone.reset(session, recursive=True)
            clone.agent.reset(session)
        return output_map(None if result.status in _NO_RESULT else result)

    for start in range(0, len(inputs), size):
        chunk = range(start, min(start + size, len(inputs)))
        for index, value in zip(chunk, await asyncio.gather(*(one(i) for i in chunk)), strict=True):
            out[index] = value
        if stop_on_first_result and any(v is not None for v in out):
            first = next(i for i, v in enumerate(out) if v is not None)
            return [v if i == first else None for i, v in enumerate(out)]
    return out


def _sync_front(fn: Callable[_P, Coroutine[Any, Any, _R]], name: str, doc: str) -> Callable[_P, _R]:
    """``fn`` (a coroutine function) as a function of the same parameters for sync code."""

    @functools.wraps(fn)
    def front(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        from agents.utils import run_sync

        return run_sync(fn(*args, **kwargs))

    front.__name__ = front.__qualname__ = name
    front.__doc__ = doc
    return front


run_batch_tasks = _sync_front(
    run_batch_tasks_async,
    "run_batch_tasks",
    """``run_batch_tasks_async`` from sync code (langroid's ``run_batch_tasks``).""",
)


def _constant(answer: str) -> UserResponder:
    def respond(message: AgentMessage | None) -> str:
        return answer

    return respond


#: The async and sync fronts are one class (``run`` is sync, ``run_async`` / ``await task()``).
AsyncTask = Task

__all__ = [
    "AsyncTask",
    "Budget",
    "DoneRule",
    "Entity",
    "StatusCode",
    "Task",
    "TaskResult",
    "run_batch",
    "run_batch_async",
    "run_batch_tasks",
    "run_batch_tasks_async",
]
