"""The ``scripted`` backend: replies replayed in order and cycled, or an echo (demos, tests)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

from agents.llms.base import AsyncBaseLLM, LLMDelta, Messages, Usage

_PIECE = re.compile(r"\s*\S+\s*|\s+")


def split_words(text: str) -> list[str]:
    """Pieces of ``text``: each word with its following whitespace (leading space kept)."""
    return _PIECE.findall(text)


def count_words(messages: Messages) -> int:
    """Prompt size in words (the scripted backend's token unit)."""
    return sum(len(str(m.get("content") or "").split()) for m in messages)


class ScriptedModelLLM(AsyncBaseLLM):
    """Streams configured replies word by word; usage counts words."""

    def __init__(
        self, replies: list[str] | None = None, chunk_delay_s: float = 0.0, **gen_params: Any
    ) -> None:
        super().__init__(**gen_params)
        self.replies = list(replies or [])
        self.chunk_delay_s = chunk_delay_s
        self._next = 0

    def next_reply(self, messages: Messages) -> str:
        """The next scripted reply, or the last user message when no replies are configured."""
        if not self.replies:
            users = [m for m in messages if m.get("role") == "user"]
            return str(users[-1].get("content") or "") if users else ""
        reply = self.replies[self._next % len(self.replies)]
        self._next += 1
        return reply

    async def _astream(self, messages: Messages, **params: Any) -> AsyncIterator[LLMDelta]:
        pieces = split_words(self.next_reply(messages))
        limit = params.get("max_new_tokens")
        finish = "stop"
        if isinstance(limit, int) and 0 < limit < len(pieces):
            pieces, finish = pieces[:limit], "length"
        for i, piece in enumerate(pieces):
            if i and self.chunk_delay_s:
                await asyncio.sleep(self.chunk_delay_s)
            yield LLMDelta(text=piece)
        usage = Usage(prompt_tokens=count_words(messages), completion_tokens=len(pieces))
        yield LLMDelta(finish_reason=finish, usage=usage)
