"""A private event loop on its own thread: the pool works from any loop, thread or sync code."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """Runs coroutines on one long-lived loop.

    Kernels are spawned from this thread, and their parent-death signal is tied to it, so it
    lives as long as the pool does.
    """

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()
        self._ready.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        self.loop.run_forever()
        # Let cancelled tasks finish before the loop closes (no "task destroyed" warnings).
        pending = asyncio.all_tasks(self.loop)
        for task in pending:
            task.cancel()
        if pending:
            self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self.loop.close()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` from another loop; cancelling the caller cancels it here too."""
        if self.in_thread():
            return await coro
        return await asyncio.wrap_future(self.submit(coro))

    def run_sync(self, coro: Coroutine[Any, Any, T]) -> T:
        """Block the calling thread until ``coro`` is done."""
        if self.in_thread():
            coro.close()
            raise RuntimeError("run_sync called from the sandbox loop itself")
        return self.submit(coro).result()

    def in_thread(self) -> bool:
        """Whether the caller runs on this loop's thread."""
        return threading.current_thread() is self.thread

    def stop(self) -> None:
        """Stop the loop and wait for the thread."""
        if self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            if not self.in_thread():
                self.thread.join(timeout=10)
