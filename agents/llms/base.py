"""The LLM interface: one async streaming core, lagent's ``chat``/``stream_chat`` on top.

A backend overrides one of ``astream`` (deltas with usage and finish reason), ``stream_chat``
(text deltas) or ``chat`` (whole text); the others are derived from it. Stop words are applied
to the output here, once, for every backend. Token usage goes to the ``usage_scope`` counter
of the calling task, so a server can account a run's usage without threading it through agents;
checks bound with ``call_guard`` run before every model call of the task (a server's token
budgets), here in ``astream``, where every backend's generation starts, and so do the
reservations of a ``call_meter`` (a count shared by a fleet: each call holds its worst case
before it starts and settles with its usage when it ends); so is the system message of an
``instructions_scope`` (a server's per-turn instructions) added.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

Messages = list[dict[str, Any]]


@dataclass
class Usage:
    """Token counts of one generation or a sum of them."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    # Why the last generation counted here stopped ("stop", "length", ...): a reply cut by
    # ``max_new_tokens`` is "length" (OpenAI's finish_reason). Not part of ``to_dict``.
    last_finish: str | None = field(default=None, compare=False)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, other: Usage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        if other.last_finish is not None:
            self.last_finish = other.last_finish

    def to_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }


@dataclass
class LLMDelta:
    """A piece of a generation. The last one of a stream carries ``finish_reason`` and usage."""

    text: str = ""
    finish_reason: str | None = None
    usage: Usage | None = None
    extra: dict[str, Any] = field(default_factory=dict)


_usage_counter: contextvars.ContextVar[tuple[Usage, ...]] = contextvars.ContextVar(
    "agents_usage_counter", default=()
)


@contextmanager
def usage_scope() -> Iterator[Usage]:
    """Sum the usage of every generation made by this task (and tasks it starts) inside.

    Scopes nest: a generation counts in every enclosing scope (a multi-agent task's budget
    and the server's per-run accounting both see it).
    """
    counter = Usage()
    token = _usage_counter.set((*_usage_counter.get(), counter))
    try:
        yield counter
    finally:
        try:
            _usage_counter.reset(token)
        except ValueError:  # closed from another context (an abandoned async generator)
            pass


def record_usage(usage: Usage, finish: str | None = None) -> None:
    """Add a generation's usage (and why it stopped) to every active ``usage_scope`` counter."""
    for counter in _usage_counter.get():
        counter.add(usage)
        if finish is not None:
            counter.last_finish = finish


_call_guards: contextvars.ContextVar[tuple[Callable[[], None], ...]] = contextvars.ContextVar(
    "agents_call_guards", default=()
)


@contextmanager
def call_guard(check: Callable[[], None]) -> Iterator[None]:
    """Run ``check`` before every model call made by this task (and tasks it starts) inside;
    it raises to refuse the call, which then never reaches the model. Guards nest."""
    token = _call_guards.set((*_call_guards.get(), check))
    try:
        yield
    finally:
        try:
            _call_guards.reset(token)
        except ValueError:  # closed from another context (an abandoned async generator)
            pass


class CallMeter(Protocol):
    """A shared count every model call of a task reserves from before it starts and settles
    with its real usage when it ends, however it ends (a server's fleet-wide token budget)."""

    async def reserve(self, messages: Messages, params: dict[str, Any]) -> Any:
        """Hold what the call may use (raise to refuse it); returns the hold for ``settle``."""

    async def settle(self, hold: Any, usage: Usage) -> None:
        """The call ended having used ``usage``: count it in place of the hold."""


class StreamWatcher(Protocol):
    """Told of one model call's stream as ``AsyncBaseLLM.watched_stream`` yields it (a
    server's TTFT and token metrics)."""

    def first_text(self, seconds: float) -> None:
        """The first delta with text is being yielded, ``seconds`` after the call began."""

    def usage(self, usage: Usage) -> None:
        """The backend reported ``usage`` (told before the last delta is yielded)."""


_call_meters: contextvars.ContextVar[tuple[CallMeter, ...]] = contextvars.ContextVar(
    "agents_call_meters", default=()
)


@contextmanager
def call_meter(meter: CallMeter) -> Iterator[None]:
    """Make every model call of this task (and tasks it starts) inside reserve from ``meter``
    before it starts and settle with it when it ends. Meters nest."""
    token = _call_meters.set((*_call_meters.get(), meter))
    try:
        yield
    finally:
        try:
            _call_meters.reset(token)
        except ValueError:  # closed from another context (an abandoned async generator)
            pass


_instructions: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "agents_instructions", default=None
)


@contextmanager
def instructions_scope(text: str | None) -> Iterator[None]:
    """Every model call made by this task (and tasks it starts) inside sees ``text`` as one
    more system message, after the call's own leading system messages (a server's per-turn
    instructions: never part of any memory). None or "": no change."""
    token = _instructions.set(text or None)
    try:
        yield
    finally:
        try:
            _instructions.reset(token)
        except ValueError:  # closed from another context (an abandoned async generator)
            pass


def with_instructions(messages: Messages) -> Messages:
    """``messages`` with the task's ``instructions_scope`` text inserted (a copy), or as is."""
    text = _instructions.get()
    if not text or not isinstance(messages, list):
        return messages
    at = 0
    while (
        at < len(messages)
        and isinstance(messages[at], dict)
        and messages[at].get("role") == "system"
    ):
        at += 1
    return [*messages[:at], {"role": "system", "content": text}, *messages[at:]]


DEFAULT_GEN_PARAMS: dict[str, Any] = {
    "max_new_tokens": 512,
    "top_p": 0.8,
    "top_k": 40,
    "temperature": 0.8,
    "repetition_penalty": 1.0,
}


class _StopWordFilter:
    """Cuts streamed text at the first stop word, holding back a possible partial match."""

    def __init__(self, stop_words: list[str]) -> None:
        self.stop_words = [w for w in stop_words if w]
        self.pending = ""
        self.stopped = False

    def feed(self, text: str) -> str:
        if self.stopped or not self.stop_words:
            return "" if self.stopped else text
        self.pending += text
        cut = min(
            (i for i in (self.pending.find(w) for w in self.stop_words) if i >= 0), default=-1
        )
        if cut >= 0:
            out, self.pending, self.stopped = self.pending[:cut], "", True
            return out
        hold = max(
            (k for w in self.stop_words for k in range(1, len(w)) if self.pending.endswith(w[:k])),
            default=0,
        )
        out = self.pending[: len(self.pending) - hold]
        self.pending = self.pending[len(out) :]
        return out

    def flush(self) -> str:
        out, self.pending = self.pending, ""
        return "" if self.stopped else out


class AsyncBaseLLM:
    """Async LLM (lagent's ``AsyncBaseLLM``): ``gen_params`` plus optional ``meta_template``."""

    def __init__(
        self,
        path: str | None = None,
        meta_template: list[dict[str, Any]] | None = None,
        **gen_params: Any,
    ) -> None:
        self.path = path
        self.meta_template = meta_template
        params = dict(DEFAULT_GEN_PARAMS)
        params.update(gen_params)
        params["stop_words"] = list(params.get("stop_words") or [])
        self.gen_params: dict[str, Any] = params

    def update_gen_params(self, **kwargs: Any) -> dict[str, Any]:
        """This call's parameters: ``gen_params`` overridden by ``kwargs`` (not stored)."""
        # One level copied (stop_words and other lists/dicts), as deep as the parameters go in
        # practice; a deepcopy was ~4 us per model call.
        params = {
            k: copy.copy(v) if isinstance(v, list | dict) else v for k, v in self.gen_params.items()
        }
        params.update({k: v for k, v in kwargs.items() if v is not None})
        if isinstance(params.get("stop_words"), str):
            params["stop_words"] = [params["stop_words"]]
        return params

    # -- the core: subclasses override exactly one of the three below -------------------------
    async def _astream(self, messages: Messages, **params: Any) -> AsyncIterator[LLMDelta]:
        if _overrides(self, AsyncBaseLLM, "stream_chat"):
            async for text in self.stream_chat(messages, **params):
                yield LLMDelta(text=text)
        elif _overrides(self, AsyncBaseLLM, "chat"):
            yield LLMDelta(text=await self.chat(messages, **params))
        else:
            raise NotImplementedError(f"{type(self).__name__} implements no generation method")
        yield LLMDelta(finish_reason="stop")

    def astream(self, messages: Messages, **kwargs: Any) -> AsyncIterator[LLMDelta]:
        """Stream deltas with stop words applied; the last delta has ``finish_reason``.
        The task's ``call_guard`` checks run first."""
        return self.watched_stream(messages, kwargs, None)

    async def watched_stream(
        self, messages: Messages, kwargs: dict[str, Any], watcher: StreamWatcher | None
    ) -> AsyncIterator[LLMDelta]:
        """``astream``, telling ``watcher`` (if any) of the call's first text and its usage:
        a server's model metrics without one more generator every delta passes through."""
        start = time.perf_counter()
        for check in _call_guards.get():
            check()
        messages = with_instructions(messages)
        params = self.update_gen_params(**kwargs)
        stop = _StopWordFilter(params.get("stop_words") or [])
        finish: str | None = None
        usage: Usage | None = None
        meters = _call_meters.get()
        holds: list[tuple[CallMeter, Any]] = []
        try:
            for meter in meters:
                holds.append((meter, await meter.reserve(messages, params)))
        except BaseException:
            for meter, hold in holds:  # refused by a later meter: give the earlier holds back
                await meter.settle(hold, Usage())
            raise
        agen = self._astream(messages, **params)
        filtering = bool(stop.stop_words)  # else the text passes as it is (per delta)
        waiting = watcher is not None  # for the first text
        try:
            async for delta in agen:
                plain = True  # no usage, no finish reason: the backend's delta may pass on
                if delta.usage is not None:
                    usage, plain = delta.usage, False
                if delta.finish_reason is not None:
                    finish, plain = delta.finish_reason, False
                text = stop.feed(delta.text) if filtering else delta.text
                if text or delta.extra:
                    if waiting and text:
                        waiting = False
                        watcher.first_text(time.perf_counter() - start)  # type: ignore[union-attr]
                    # The same values either way; a new delta only to drop usage or finish.
                    yield (
                        delta if plain and text is delta.text else LLMDelta(text, extra=delta.extra)
                    )
                if filtering and stop.stopped:
                    finish = "stop"
                    break
        finally:
            aclose = getattr(agen, "aclose", None)
            try:
                if aclose is not None:  # stop the backend's generation (e.g. a vLLM abort) now
                    await aclose()
            finally:
                for meter, hold in holds:  # what the call used (a call cut short: what it
                    await meter.settle(hold, usage or Usage())  # reported) replaces its hold
        tail = stop.flush()
        record_usage(usage or Usage(), finish or "stop")
        if watcher is not None:
            if waiting and tail:
                watcher.first_text(time.perf_counter() - start)
            if usage is not None:
                watcher.usage(usage)
        yield LLMDelta(text=tail, finish_reason=finish or "stop", usage=usage)

    async def chat(self, messages: Messages, **kwargs: Any) -> str:
        """The whole reply to ``messages`` (a list of ``{'role', 'content'}`` dicts)."""
        if type(self)._astream is AsyncBaseLLM._astream and not _overrides(
            self, AsyncBaseLLM, "stream_chat"
        ):
            raise NotImplementedError(f"{type(self).__name__} implements no generation method")
        return "".join([d.text async for d in self.astream(messages, **kwargs)])

    async def stream_chat(self, messages: Messages, **kwargs: Any) -> AsyncIterator[str]:
        """Text deltas of the reply to ``messages``."""
        async for delta in self.astream(messages, **kwargs):
            if delta.text:
                yield delta.text


class BaseLLM(AsyncBaseLLM):
    """Sync LLM (lagent's ``BaseLLM``): override ``chat`` (and optionally ``stream_chat``).

    The async core runs a sync override in a worker thread, so one agent loop drives both.
    """

    async def _astream(self, messages: Messages, **params: Any) -> AsyncIterator[LLMDelta]:
        if _overrides(self, BaseLLM, "stream_chat"):
            iterator = iter(self.stream_chat(messages, **params))
            sentinel = object()
            while (item := await asyncio.to_thread(next, iterator, sentinel)) is not sentinel:
                yield LLMDelta(text=str(item))
        elif _overrides(self, BaseLLM, "chat"):
            yield LLMDelta(text=await asyncio.to_thread(self.chat, messages, **params))
        else:
            raise NotImplementedError(f"{type(self).__name__} implements no generation method")
        yield LLMDelta(finish_reason="stop")

    def chat(self, messages: Messages, **kwargs: Any) -> str:  # type: ignore[override]
        """The whole reply, computed synchronously."""
        from agents.utils import run_sync

        return run_sync(AsyncBaseLLM.chat(self, messages, **kwargs))

    def stream_chat(self, messages: Messages, **kwargs: Any) -> Iterator[str]:  # type: ignore[override,unused-ignore]
        """Text deltas, synchronously."""
        from agents.utils import iterate_sync

        return iterate_sync(AsyncBaseLLM.stream_chat(self, messages, **kwargs))


def _overrides(obj: object, base: type, name: str) -> bool:
    return getattr(type(obj), name) is not getattr(base, name)
