"""Tasks: agents take turns until an explicit termination rule fires (langroid's idea).

``Task(writer, critic, done="APPROVED", max_turns=6)`` passes each reply to the next agent,
cycling, and stops at the first reply the rule accepts, or after ``max_turns`` replies. The
reply that ended it says why in ``extra_info['stop_reason']`` (``done`` or ``max_turns``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents.agent import Agent, AsyncAgent
from agents.compose import _SequentialCore
from agents.memory import SessionId
from agents.schema import AgentMessage

DoneRule = Callable[[AgentMessage], bool] | str


class _TaskCore(_SequentialCore):
    def __init__(
        self, *agents: Any, done: DoneRule | None = None, max_turns: int = 10, **kwargs: Any
    ) -> None:
        super().__init__(*agents, **kwargs)
        if max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        self.done = done
        self.max_turns = max_turns

    def is_done(self, message: AgentMessage) -> bool:
        """Whether ``message`` ends the task (a string rule: it appears in the content)."""
        if self.done is None:
            return False
        if isinstance(self.done, str):
            return self.done in str(message.content)
        return bool(self.done(message))

    async def forward(
        self, *message: AgentMessage, session_id: SessionId = 0, **kwargs: Any
    ) -> Any:
        """Turns until the rule fires or ``max_turns`` replies were made; streams them all."""
        stages = [agent for _, agent in self.named_agents()]
        inputs: tuple[Any, ...] = message
        for turn in range(self.max_turns):
            reply: AgentMessage | None = None
            async for chunk in stages[turn % len(stages)]._stream(
                *inputs, session_id=session_id, **kwargs
            ):
                if reply is not None:
                    yield reply
                reply = chunk
            assert reply is not None
            finished = self.is_done(reply)
            if finished or turn == self.max_turns - 1:
                info = dict(reply.extra_info or {}) if isinstance(reply.extra_info, dict) else {}
                info["stop_reason"] = "done" if finished else "max_turns"
                yield reply.model_copy(update={"extra_info": info})
                return
            yield reply
            inputs = (reply,)


class Task(_TaskCore, Agent):
    """Sync task: ``Task(a, b, done="DONE")(msg)``."""


class AsyncTask(_TaskCore, AsyncAgent):
    """Async task: ``await AsyncTask(a, b, done=rule)(msg)``."""


__all__ = ["AsyncTask", "DoneRule", "Task"]
