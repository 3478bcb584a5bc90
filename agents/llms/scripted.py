"""ScriptedLLM: a model that replays a script, for tests and demos (fails loudly past it)."""

from __future__ import annotations

import asyncio
import copy
import re
import threading
from collections.abc import AsyncIterator, Sequence
from typing import Any

from agents.llms.base import AsyncBaseLLM, BaseLLM, LLMDelta, Messages, Usage

# A dict reply is a native tool-call turn: {"content": ..., "tool_calls": [{"name", "arguments"}]}.
Reply = str | dict[str, Any] | BaseException | type[BaseException]
_PIECES = re.compile(r"^\s+|\S+\s*")


class ScriptExhaustedError(AssertionError):
    """A ScriptedLLM was called more times than it has replies."""


def split_words(text: str) -> list[str]:
    """Stream pieces: each word with the whitespace after it (leading whitespace first)."""
    return _PIECES.findall(text)


def count_words(messages: Messages) -> int:
    """Words in the messages' text content (the scripted model's notion of tokens)."""
    return sum(len(str(m.get("content") or "").split()) for m in messages)


class _ScriptCore(AsyncBaseLLM):
    def __init__(
        self,
        replies: Sequence[Reply] | None = None,
        chunk_delay_s: float = 0.0,
        cycle: bool = False,
        **gen_params: Any,
    ) -> None:
        super().__init__(**gen_params)
        self.replies: list[Reply] | None = None if replies is None else list(replies)
        self.chunk_delay_s = chunk_delay_s
        self.cycle = cycle
        self.calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()  # the sync twin may run calls on helper threads

    def _next_reply(self, messages: Messages, params: dict[str, Any]) -> Reply:
        with self._lock:
            index = len(self.calls)
            self.calls.append({"messages": copy.deepcopy(messages), "params": params})
        if self.replies is None:
            users = [m for m in messages if m.get("role") == "user"]
            return str(users[-1].get("content", "")) if users else ""
        if self.cycle and self.replies:
            return self.replies[index % len(self.replies)]
        if index >= len(self.replies):
            raise ScriptExhaustedError(
                f"{type(self).__name__} got call #{index + 1} but has only "
                f"{len(self.replies)} replies; last message: {messages[-1:]!r}"
            )
        return self.replies[index]

    async def _astream(self, messages: Messages, **params: Any) -> AsyncIterator[LLMDelta]:
        reply = self._next_reply(messages, params)
        if isinstance(reply, BaseException) or (
            isinstance(reply, type) and issubclass(reply, BaseException)
        ):
            raise reply
        calls = reply.get("tool_calls") if isinstance(reply, dict) else None
        if isinstance(reply, dict):
            reply = str(reply.get("content") or "")
        pieces = split_words(reply)
        for i, piece in enumerate(pieces):
            if self.chunk_delay_s and i:
                await asyncio.sleep(self.chunk_delay_s)
            yield LLMDelta(text=piece)
        if calls:  # as a backend with a tool-call parser reports them
            yield LLMDelta(extra={"tool_calls": copy.deepcopy(list(calls))})
        usage = Usage(prompt_tokens=count_words(messages), completion_tokens=len(reply.split()))
        yield LLMDelta(finish_reason="stop", usage=usage)


class ScriptedLLM(_ScriptCore):
    """Replays ``replies`` in order, streamed word by word; records ``.calls``.

    ``replies=None`` echoes the last user message. An exception in the script is raised by
    its call. A dict reply ``{"content": ..., "tool_calls": [...]}`` is a native tool-call
    turn (the calls arrive in ``LLMDelta.extra``). A call past the script raises
    ``ScriptExhaustedError`` unless ``cycle=True``.
    Usage counts words: the prompt's and the reply's.
    """


class SyncScriptedLLM(_ScriptCore, BaseLLM):
    """ScriptedLLM with lagent's sync ``chat`` / ``stream_chat`` (same script semantics)."""
