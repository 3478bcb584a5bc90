"""What ``Task.run`` returns: langroid's result message, with the run's account beside it.

A ``TaskResult`` is a ``ChatDocument`` (so an ``AgentMessage``) as langroid's ``Task.run``
answers one: ``content`` (the result, langroid's ``DONE`` removed), ``metadata.sender`` the
user entity, ``metadata.sender_name`` the task's name, ``metadata.status``, and
``tool_messages`` (the ``ToolMessage`` call the final message holds, e.g. with
``TaskConfig(done_if_tool=True)``). It can be passed on as another task's input. Beside those:
``status``, ``messages`` (every message of the run), ``turns``, ``usage``, ``cost``, ``error``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from agents.chat_document import ChatDocMetaData, ChatDocument, tool_messages_of
from agents.llms.base import Usage
from agents.schema import AgentMessage
from agents.task_types import Entity, StatusCode


class TaskResult(ChatDocument):
    """The outcome of ``Task.run``: why it ended, the final content, every message."""

    content: Any = None
    status: StatusCode = StatusCode.DONE
    message: AgentMessage | None = None  # the run's last message, as streamed
    messages: list[AgentMessage] = Field(default_factory=list)
    turns: int = 0
    usage: Usage = Field(default_factory=Usage)
    cost: float = 0.0
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        """True when the task ended by a done rule."""
        return self.status == StatusCode.DONE


def result_of(
    messages: list[AgentMessage], agent: Any = None, results: Sequence[tuple[str, Any]] = ()
) -> TaskResult:
    """A ``TaskResult`` from a run's END messages (the last one carries the status);
    ``agent``: the task's agent, whose ``ToolMessage`` tools fill ``tool_messages``;
    ``results``: the run's ``ResultTool``s with the text each ended its task with (the one
    that ended this run is the result's tool)."""
    last = messages[-1]
    info = last.extra_info if isinstance(last.extra_info, dict) else {}
    usage = Usage(**{k: v for k, v in (info.get("usage") or {}).items() if k != "total_tokens"})
    status = StatusCode(info.get("status", StatusCode.DONE.value))
    name = str(info.get("task") or last.sender)
    content = last.content if last.content != "" else None
    tools = tool_messages_of(agent, last) if agent is not None else []
    if status == StatusCode.DONE:
        tools = [tool for text, tool in results if text == content][-1:] or tools
    return TaskResult(
        content=content,
        sender=name,
        formatted=last.formatted,
        extra_info=last.extra_info,
        metadata=ChatDocMetaData(
            sender=Entity.USER,
            sender_name=name,
            status=status,
            usage=usage,
            agent_id=str(getattr(agent, "name", "")),
        ),
        tool_messages=tools,
        content_any=content,
        status=status,
        message=last,
        messages=messages,
        turns=int(info.get("turns", 0)),
        usage=usage,
        cost=float(info.get("cost", 0.0)),
    )


__all__ = ["TaskResult", "result_of"]
