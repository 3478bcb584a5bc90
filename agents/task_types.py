"""What a ``Task`` run reports: status codes, responder names, budgets (the result: task_result)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from agents.llms.base import Usage


class StatusCode(StrEnum):
    """Why a task run ended (langroid's names)."""

    DONE = "DONE"  # a done rule fired (done tool, done_if_*, the done predicate, single round)
    MAX_TURNS = "MAX_TURNS"  # the task's ``max_turns`` steps were taken
    FIXED_TURNS = "FIXED_TURNS"  # the run's own ``turns`` steps were taken (langroid's)
    STALLED = "STALLED"  # ``max_stalled_steps`` steps in a row had no response
    INF_LOOP = "INF_LOOP"  # the same cycle of messages kept repeating
    BUDGET = "BUDGET"  # the token or cost budget was spent
    MAX_COST = "MAX_COST"  # ``run(max_cost=...)`` was exceeded
    MAX_TOKENS = "MAX_TOKENS"  # ``run(max_tokens=...)`` was exceeded
    KILL = "KILL"  # ``task.kill()`` was called
    USER_QUIT = "USER_QUIT"  # the human responder typed q / quit / x / exit
    ERROR = "ERROR"  # the run raised (``run_batch`` reports it per item)


# langroid's string signals (langroid.utils.constants), recognized in replies unless
# ``TaskConfig(recognize_string_signals=False)``.
NO_ANSWER = "DO-NOT-KNOW"  # "I have no answer": another responder may answer instead
DONE = "DONE"  # the task is done; the result is the reply without the word
PASS = "__PASS__"  # pass the pending message on to the next responder
PASS_TO = PASS + ":"  # ``__PASS__:name``: pass it to ``name``
SEND_TO = "__SEND__:"  # ``__SEND__:name text``: send ``text`` to ``name``
AT = "|@|"  # the recommended ``TaskConfig.addressing_prefix``


@dataclass
class TaskConfig:
    """langroid's ``TaskConfig``: a task's settings beyond its constructor's.

    ``inf_loop_cycle_len`` (0: no loop detection) is the longest repeating cycle of messages
    looked for, and ``inf_loop_wait_factor`` how many times it must repeat (at least 2);
    ``restart_as_subtask``: reset the agent's memory on every run as a sub-task too;
    ``addressing_prefix`` (e.g. ``"@"`` or ``AT``): ``@name text`` in a reply sends ``text``
    to ``name``; ``recognize_string_signals``: ``DONE``, ``PASS``, ``SEND_TO``, ``NO_ANSWER``
    in replies act; ``done_if_tool``: the task is done when the model calls a tool.
    """

    inf_loop_cycle_len: int = 10
    inf_loop_dominance_factor: float = 1.5  # accepted for langroid programs; not used
    inf_loop_wait_factor: int = 5
    restart_as_subtask: bool = False
    addressing_prefix: str = ""
    recognize_string_signals: bool = True
    done_if_tool: bool = False


class Entity:
    """Responder names for ``done_if_response`` / ``done_if_no_response`` (and sub-task names)."""

    LLM = "llm"  # the agent's model (or, for an agent without tools, the agent itself)
    AGENT = "agent"  # the agent's tools: they answer the model's tool calls
    USER = "user"  # the human responder
    SYSTEM = "system"  # langroid's system entity (a system message's sender)


@dataclass(frozen=True)
class Budget:
    """Token and cost limits of one task run (sub-tasks' usage counts in their parents')."""

    max_tokens: int | None = None
    max_cost: float | None = None
    prompt_cost_per_1k: float = 0.0
    completion_cost_per_1k: float = 0.0

    def cost(self, usage: Usage) -> float:
        """The cost of ``usage`` at this budget's prices."""
        return (
            usage.prompt_tokens * self.prompt_cost_per_1k
            + usage.completion_tokens * self.completion_cost_per_1k
        ) / 1000

    def exceeded(self, usage: Usage) -> bool:
        """Whether ``usage`` is past a limit."""
        if self.max_tokens is not None and usage.total_tokens > self.max_tokens:
            return True
        return self.max_cost is not None and self.cost(usage) > self.max_cost


def repeating_cycle(history: Sequence[Hashable], repeats: int, max_len: int) -> int:
    """The length of a cycle that fills the last ``len * repeats`` items of ``history`` (0: none).

    ``a b a b a b`` has a cycle of length 2 repeated 3 times; ``a a a`` one of length 1.
    """
    for length in range(1, max_len + 1):
        span = length * repeats
        if len(history) < span:
            break
        tail = list(history[-span:])
        cycle = tail[:length]
        if all(tail[i] == cycle[i % length] for i in range(span)):
            return length
    return 0


def result_info(
    task: str, status: StatusCode, turns: int, usage: Usage, cost: float
) -> dict[str, Any]:
    """The ``extra_info`` of a run's last message (JSON-ready)."""
    return {
        "task": task,
        "status": status.value,
        "turns": turns,
        "usage": usage.to_dict(),
        "cost": round(cost, 6),
    }


__all__ = [
    "AT",
    "DONE",
    "NO_ANSWER",
    "PASS",
    "PASS_TO",
    "SEND_TO",
    "Budget",
    "Entity",
    "StatusCode",
    "TaskConfig",
    "repeating_cycle",
    "result_info",
]
