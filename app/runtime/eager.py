"""A task whose first step runs at once, in the caller's iteration of the event loop.

``asyncio.create_task`` runs a coroutine's first step in the loop's next iteration: a run's task
started by a streamed request began its turn (and its model call) one iteration after the
request, and with many streams sharing the loop every iteration waits behind all of them
(issue 25: a stored turn's first token crossed 4 iterations against a chat completion's 2).
Python 3.12 has ``eager_start``; this is its equivalent for 3.11: the task is created, then
its coroutine's first step runs now, with the task as the loop's current task and in the
task's own context, until it first awaits; the task goes on from there as any other.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine, Generator
from typing import Any

_NOT_RUN = object()


class _Started(Coroutine[Any, Any, Any]):
    """The task's coroutine: ``inner`` whose first step may already have run (``step``). Its
    first ``send`` then hands the task what that step awaits (or its result, or its
    exception); a ``throw`` first (the task cancelled before it took its step) goes into
    ``inner`` where it waits, as a cancellation of a waiting task does."""

    def __init__(self, inner: Coroutine[Any, Any, Any]) -> None:
        self.inner = inner
        self._first: Any = _NOT_RUN  # ("yield" | "return" | "raise", value) once stepped

    def step(self) -> None:
        try:
            self._first = ("yield", self.inner.send(None))
        except StopIteration as stop:
            self._first = ("return", stop.value)
        except BaseException as exc:  # the task's own outcome: raised by its first step
            self._first = ("raise", exc)

    def send(self, value: Any) -> Any:
        first, self._first = self._first, None
        if first is None or first is _NOT_RUN:
            return self.inner.send(value)
        kind, got = first
        if kind == "yield":
            return got
        if kind == "return":
            raise StopIteration(got)
        raise got

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        first, self._first = self._first, None
        if first is not None and first is not _NOT_RUN:
            kind, got = first
            if kind == "return":
                raise StopIteration(got)
            if kind == "raise":
                raise got
            # What the step waits on: cancelled as a waiting task's future is.
            if isinstance(got, asyncio.Future) and not got.done():
                got.cancel()
        if val is None and tb is None:
            return self.inner.throw(typ)
        return self.inner.throw(typ, val, tb)  # pragma: no cover - asyncio throws one value

    def close(self) -> None:
        self.inner.close()

    def __await__(self) -> Generator[Any, None, Any]:  # pragma: no cover - tasks only
        return self.inner.__await__()

    # ``inspect.getcoroutinestate`` (``Cancels.cancel`` asks whether the body has begun).
    @property
    def cr_running(self) -> bool:
        return bool(getattr(self.inner, "cr_running", False))

    @property
    def cr_suspended(self) -> bool:
        return bool(getattr(self.inner, "cr_suspended", False))

    @property
    def cr_frame(self) -> Any:
        return getattr(self.inner, "cr_frame", None)

    @property
    def cr_code(self) -> Any:
        return getattr(self.inner, "cr_code", None)

    def __repr__(self) -> str:
        return f"<eager {self.inner!r}>"


def create(coro: Coroutine[Any, Any, Any], name: str | None = None) -> EagerTask:
    """A task for ``coro`` whose first step has not run yet: ``start()`` runs it now (or the
    loop runs it in its next iteration, as ``create_task`` does, when ``start`` is never
    called)."""
    return EagerTask(coro, name)


class EagerTask:
    """``task`` (an ``asyncio.Task``, to keep and cancel) and ``start``."""

    def __init__(self, coro: Coroutine[Any, Any, Any], name: str | None) -> None:
        self._coro = _Started(coro)
        self._context = contextvars.copy_context()  # as ``create_task`` takes it
        loop = asyncio.get_running_loop()
        self.loop = loop
        self.task: asyncio.Task[Any] = loop.create_task(
            self._coro, name=name, context=self._context
        )

    def start(self) -> None:
        """Run the coroutine's first step now: until it first awaits (or ends)."""
        loop, task = self.loop, self.task
        if task.done() or self._coro._first is not _NOT_RUN:
            return
        if self._coro.cr_frame is None or self._coro.cr_running:  # pragma: no cover
            return
        caller = asyncio.current_task(loop)
        if caller is not None:
            asyncio.tasks._leave_task(loop, caller)
        asyncio.tasks._enter_task(loop, task)
        try:
            self._context.run(self._coro.step)
        finally:
            asyncio.tasks._leave_task(loop, task)
            if caller is not None:
                asyncio.tasks._enter_task(loop, caller)
