"""The ``scripted`` backend: replies replayed in order and cycled, or an echo (demos, tests)."""

from __future__ import annotations

import asyncio
import copy
from collections import deque
from collections.abc import AsyncIterator, Sequence
from operator import itemgetter
from typing import Any

from agents.llms.base import AsyncBaseLLM, LLMDelta, Messages, Usage
from agents.llms.scripted import split_words
from app.engines.base import ModelHandle
from app.models.raw import LLMRawBackend

_CONTENT = itemgetter("content")


def count_words(
    messages: Messages,
    _kept: dict[str | None, int] = {},  # noqa: B006
    _size: list[int] = [0],  # noqa: B006
) -> int:
    """Prompt size in words (the scripted backend's token unit). A session's whole history is
    counted on every turn, so each text's count is kept: ``_kept`` (this function's own, text ->
    count), emptied when the texts kept reach 8 million characters (``_size``)."""
    try:  # every message has text seen before: no split, no Python loop
        return sum(map(_kept.__getitem__, map(_CONTENT, messages)))
    except (KeyError, TypeError):  # a new text, content that is not text, or no content
        pass
    total = 0
    for content in (m.get("content") for m in messages):
        if content is not None and type(content) is not str:
            total += len(str(content or "").split())
            continue
        n = _kept.get(content)
        if n is None:
            text = content or ""
            if _size[0] + len(text) > 8_000_000:
                _kept.clear()
                _size[0] = 0
            n = _kept[content] = len(text.split())
            _size[0] += len(text)
        total += n
    return total


Reply = str | dict[str, Any]


def _last_user(messages: Sequence[dict[str, Any]]) -> str:
    """The last ``user`` message's text ("" without one), found from the end: a session's
    whole history is the prompt, and its last user message is almost always near the end."""
    for m in reversed(messages):
        if m.get("role") == "user":
            return str(m.get("content") or "")
    return ""


def _fill(reply: Reply, messages: Messages) -> Reply:
    """``{user}``/``{last}`` filled in a reply's text (a tool-call turn: its content and its
    calls' string arguments)."""
    user = _last_user(messages)
    last = str(messages[-1].get("content") or "") if messages else ""

    def fill(text: str) -> str:
        return text.replace("{user}", user).replace("{last}", last)

    if isinstance(reply, str):
        return fill(reply)
    calls = [
        {**c, "arguments": fill(c["arguments"])} if isinstance(c.get("arguments"), str) else c
        for c in reply.get("tool_calls") or []
    ]
    return {**reply, "content": fill(str(reply.get("content") or "")), "tool_calls": calls}


class ScriptedModelLLM(AsyncBaseLLM):
    """Streams configured replies word by word; usage counts words. A reply may be a native
    tool-call turn, ``{"content": ..., "tool_calls": [{"name", "arguments"}]}`` (the calls
    arrive as a tool-call parser reports them). ``recent``: the last calls' messages and
    parameters (tests read them)."""

    def __init__(
        self,
        replies: list[Reply] | None = None,
        chunk_delay_s: float = 0.0,
        cycle: str = "model",
        template: bool = False,
        **gen_params: Any,
    ) -> None:
        super().__init__(**gen_params)
        if cycle not in ("model", "conversation"):
            raise ValueError(f"cycle must be 'model' or 'conversation', not {cycle!r}")
        self.replies = list(replies or [])
        self.chunk_delay_s = chunk_delay_s
        self.cycle = cycle
        self.template = template
        self._next = 0
        self.recent: deque[dict[str, Any]] = deque(maxlen=16)

    def next_reply(self, messages: Messages) -> Reply:
        """The next scripted reply, or the last user message when no replies are configured.

        ``template``: ``{user}`` in a reply becomes the last user message, ``{last}`` the last
        message of any role (e.g. a tool's result), so one script serves every session with
        its own values (tests: a tool call per session).

        ``cycle="model"``: replies in turn across every call. ``cycle="conversation"``: the
        reply after as many as the conversation already holds (its assistant messages), so
        concurrent sessions, and a session after a cancelled run, each follow the script.
        """
        if not self.replies:
            return _last_user(messages)
        if self.cycle == "conversation":
            done = sum(1 for m in messages if m.get("role") == "assistant")
            reply = self.replies[done % len(self.replies)]
        else:
            reply = self.replies[self._next % len(self.replies)]
            self._next += 1
        return _fill(reply, messages) if self.template else reply

    async def _astream(self, messages: Messages, **params: Any) -> AsyncIterator[LLMDelta]:
        # The call's own list (callers build a new one per call): no copy of a long history.
        self.recent.append({"messages": messages, "params": params})
        reply = self.next_reply(messages)
        calls = reply.get("tool_calls") if isinstance(reply, dict) else None
        if isinstance(reply, dict):
            reply = str(reply.get("content") or "")
        pieces = split_words(reply)
        limit = params.get("max_new_tokens")
        finish = "stop"
        if isinstance(limit, int) and 0 < limit < len(pieces):
            pieces, finish = pieces[:limit], "length"
        for i, piece in enumerate(pieces):
            if i and self.chunk_delay_s:
                await asyncio.sleep(self.chunk_delay_s)
            yield LLMDelta(text=piece)
        if calls and params.get("tools") and params.get("tool_choice") != "none":
            yield LLMDelta(extra={"tool_calls": copy.deepcopy(list(calls))})
        usage = Usage(prompt_tokens=count_words(messages), completion_tokens=len(pieces))
        yield LLMDelta(finish_reason=finish, usage=usage)


def create_scripted_handle(config: dict[str, Any]) -> ModelHandle:
    """A scripted model (``replies``, ``chunk_delay_s``, ``cycle``, ``template``, optional
    ``gen_params``)."""
    llm = ScriptedModelLLM(
        replies=[r if isinstance(r, dict) else str(r) for r in config.get("replies") or []],
        chunk_delay_s=float(config.get("chunk_delay_s", 0.0)),
        cycle=str(config.get("cycle", "model")),
        template=bool(config.get("template", False)),
        **config.get("gen_params", {}),
    )
    return ModelHandle(config["name"], "scripted", llm, LLMRawBackend(llm, config["name"]))
