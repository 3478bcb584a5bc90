"""An agent's answer as pieces (text deltas, then its end) and their OpenAI shapes: a whole
``chat.completion`` or ``chat.completion.chunk`` objects (the chunks through ``ChunkEncoder``)."""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from agents.llms.base import Usage
from app.models.encoded import ChunkEncoder


@dataclass(slots=True)
class Piece:
    """Text for the client, or the end of the answer."""

    text: str = ""
    final: bool = False
    usage: Usage = field(default_factory=Usage)
    finish_reason: str = "stop"
    answer: str = ""  # the final message's whole text (non-streaming responses)
    # A run waiting for approval: its pending calls as OpenAI ``tool_calls`` (finish_reason
    # "tool_calls"); the client answers them with ``role: "tool"`` messages.
    tool_calls: list[dict[str, Any]] | None = None


# Completion ids: 32 hex digits, a random 64-bit prefix per process then a counter (unique
# across replicas by the prefix; an identifier, not a secret: no random draw per request).
_completion_ids = itertools.count(random.getrandbits(64) << 64)


def completion_id() -> str:
    """``chatcmpl-`` and 32 hex digits, new in this process and (by its prefix) elsewhere."""
    return f"chatcmpl-{next(_completion_ids) & (1 << 128) - 1:032x}"


def completion(
    model: str,
    text: str,
    usage: Usage,
    finish: str = "stop",
    tool_calls: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A whole chat.completion object (with ``tool_calls``: a run waiting for approval)."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message = {"role": "assistant", "content": text or None, "tool_calls": tool_calls}
    return {
        "id": completion_id(),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": usage.to_dict(),
    }


async def chunks(
    model: str, pieces: AsyncIterator[Piece], include_usage: bool
) -> AsyncIterator[dict[str, Any]]:
    """chat.completion.chunk objects: role in the first delta only, usage last if asked."""
    base = {
        "id": completion_id(),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }
    if include_usage:
        base["usage"] = None
    # Text chunks come pre-encoded: the constant head once per stream, then only the text is
    # escaped per chunk (the same bytes as encoding each chunk whole).
    enc = ChunkEncoder(base)
    yield enc.role(0)
    async for piece in pieces:
        if piece.final and piece.tool_calls:
            calls = [{"index": i, **call} for i, call in enumerate(piece.tool_calls)]
            yield {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"tool_calls": calls},
                        "finish_reason": None,
                        "logprobs": None,
                    }
                ],
            }
        if piece.final:
            yield enc.finish(0, piece.finish_reason)
            if include_usage:
                yield enc.usage(piece.usage.to_dict())
            return
        if piece.text:
            yield enc.content(0, piece.text)
