"""Run the async core from sync code: one private event loop per thread."""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")
_local = threading.local()


def _loop() -> asyncio.AbstractEventLoop:
    loop: asyncio.AbstractEventLoop | None = getattr(_local, "loop", None)
    if loop is None or loop.is_closed():
        loop = asyncio.new_event_loop()
        _local.loop = loop
        # Close the loop when its thread goes away (helper and pool threads), not at GC time,
        # and only in the process that made it: a forked child shares the loop's epoll and
        # self-pipe, and closing them there would leave the parent's loop deaf.
        weakref.finalize(threading.current_thread(), _close_in, os.getpid(), loop)
    return loop


def _close_in(pid: int, loop: asyncio.AbstractEventLoop) -> None:
    if os.getpid() == pid and not loop.is_closed() and not loop.is_running():
        loop.close()


def _forget_loop_after_fork() -> None:
    _local.__dict__.pop("loop", None)


os.register_at_fork(after_in_child=_forget_loop_after_fork)


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion; from inside a running loop, on a helper thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _loop().run_until_complete(coro)
    result: list[T] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            result.append(asyncio.run(coro))
        except BaseException as exc:  # re-raised in the caller's thread
            error.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]


def iterate_sync(agen: AsyncIterator[T]) -> Iterator[T]:
    """Iterate an async iterator from sync code."""
    loop = _loop()
    try:
        while True:
            try:
                yield loop.run_until_complete(agen.__anext__())
            except StopAsyncIteration:
                return
    finally:
        aclose = getattr(agen, "aclose", None)
        if aclose is not None:
            loop.run_until_complete(aclose())
