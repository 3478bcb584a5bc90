"""``ChatAgent``: a model as it is, on OpenAI chat messages, with the caller's function tools.

Its memory holds ``AgentMessage``s whose ``formatted`` may carry OpenAI chat messages
(``{"chat": [{"role": ..., ...}, ...]}``): a request's input items (system, developer, user and
assistant messages, the client's earlier function calls and their outputs) are stored as one
such message, and each reply keeps its assistant message (with ``tool_calls`` when the model
called the caller's functions). ``ChatAggregator`` renders them back as they were, so the next
model call sees exactly the conversation an OpenAI client would have sent.

Per call (``agent.stream(msg, session_id=..., **kwargs)``): ``tools``, ``tool_choice``,
``parallel_tool_calls``, ``response_format`` and the sampling fields go to the LLM (a server's
per-turn instructions reach the model through ``agents.llms.base.instructions_scope``). The
model's function calls are not executed: the reply carries them (``formatted["tool_calls"]``)
and the caller sends their outputs back in a later message.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from agents.agent import AsyncAgent
from agents.aggregator import DefaultAggregator, Messages
from agents.memory import Memory, SessionId
from agents.native import merge_tool_calls
from agents.schema import AgentMessage, AgentStatusCode

CHAT_KEY = "chat"  # ``formatted[CHAT_KEY]``: the OpenAI chat messages a message stands for


def chat_message(
    sender: str, content: Any, messages: list[dict[str, Any]], **extra: Any
) -> AgentMessage:
    """A memory entry standing for OpenAI chat ``messages`` (``content``: its text, for
    readers that do not know the format)."""
    return AgentMessage(sender=sender, content=content, formatted={CHAT_KEY: messages, **extra})


class ChatAggregator(DefaultAggregator):
    """Entries with chat messages become those messages; others as ``DefaultAggregator``."""

    def _render(
        self, out: Messages, messages: Sequence[AgentMessage], name: str, parser: Any
    ) -> None:
        for message in messages:
            formatted = message.formatted
            if isinstance(formatted, dict) and isinstance(formatted.get(CHAT_KEY), list):
                out.extend(map(dict, formatted[CHAT_KEY]))  # copies, no generator step each
            elif message.sender == name:
                out.append({"role": "assistant", "content": str(message.content)})
            else:
                content = message.content
                out.append(
                    {
                        "role": "user",
                        "content": content if isinstance(content, str) else str(content),
                    }
                )


class ChatAgent(AsyncAgent):
    """One model call per message on the caller's chat messages and tools (module docstring)."""

    def __init__(self, llm: Any, name: str | None = None, template: Any = None) -> None:
        super().__init__(llm=llm, template=template, aggregator=ChatAggregator(), name=name)

    async def forward(
        self,
        *message: AgentMessage,
        session_id: SessionId = 0,
        **kwargs: Any,
    ) -> AsyncIterator[AgentMessage]:
        assert self.llm is not None
        history = self.memory.get(session_id) if self.memory is not None else None
        if history is None:
            history = Memory()
            history.add(list(message))
        formatted = self.aggregator.aggregate(history, self.name, None, self.template)
        text = ""
        calls: list[dict[str, Any]] = []
        async for delta in self.llm.astream(formatted, **kwargs):
            if delta.extra:  # (most deltas carry none: no lookup per token)
                calls += delta.extra.get("tool_calls") or []
            if delta.text:
                text += delta.text
                yield AgentMessage(
                    sender=self.name, content=text, stream_state=AgentStatusCode.STREAM_ING
                )
        yield reply_message(self.name, text, calls, kwargs.get("parallel_tool_calls") is not False)


def reply_message(
    sender: str, text: str, calls: list[dict[str, Any]], parallel: bool = True
) -> AgentMessage:
    """A model's reply as a memory entry: its assistant chat message (``tool_calls`` when the
    model called functions: backend entries merged, the first only unless ``parallel``)."""
    tool_calls = tool_call_entries(calls, parallel)
    assistant: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        assistant = {"role": "assistant", "content": text or None, "tool_calls": tool_calls}
    return chat_message(sender, text, [assistant], tool_calls=tool_calls)


def tool_call_entries(calls: list[dict[str, Any]], parallel: bool = True) -> list[dict[str, Any]]:
    """A reply's OpenAI ``tool_calls`` entries from the backend's call entries (merged; the
    first only unless ``parallel``)."""
    entries = [_call_entry(c) for c in merge_tool_calls(calls)] if calls else []
    return entries if parallel else entries[:1]


def _call_entry(call: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI ``tool_calls`` entry (arguments a JSON string) from a merged call."""
    args = call.get("arguments")
    text = args if isinstance(args, str) else json.dumps(args or {}, ensure_ascii=False)
    call_id = call.get("id") or f"call_{uuid.uuid4().hex[:24]}"
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": call["name"], "arguments": text},
    }


__all__ = [
    "CHAT_KEY",
    "ChatAgent",
    "ChatAggregator",
    "chat_message",
    "reply_message",
    "tool_call_entries",
]
