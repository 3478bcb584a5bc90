"""Run the async core from sync code: one private event loop per thread."""

from __future__ import annotations

import asyncio
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
        # Close the loop when its thread goes away (helper and pool threads), not at GC time.
        weakref.finalize(threading.current_thread(), loop.close)
    return loop


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
