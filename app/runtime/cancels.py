"""Cancelling a run wherever it is: its task here, its owner replica (``CancelBus``), or, when
nobody runs it (waiting for a person, or its replica died), closing it in the database."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Coroutine
from inspect import CORO_CREATED
from typing import Any, cast

from app.runtime.jobs import Job
from app.runtime.notify import CancelBus
from app.runtime.orphans import Orphans
from app.runtime.store import RunStore
from app.schemas.vocab import TERMINAL, WAITING, CancelMode


class Cancels:
    """Cancels runs; ``background`` holds the cancels started from cancelled contexts."""

    def __init__(
        self,
        jobs: dict[str, Job],
        store: RunStore,
        orphans: Orphans,
        bus: CancelBus,
        timeout_s: float,
        background: set[asyncio.Task[Any]],
    ) -> None:
        self.jobs = jobs  # this process's runs (LiveRuns.jobs)
        self.store = store
        self.orphans = orphans
        self.bus = bus
        self.timeout_s = timeout_s
        self.background = background

    async def cancel(self, run_id: str, mode: CancelMode = CancelMode.CANCELLED) -> None:
        """Cancel a run (reaching the model call and the tool) and wait for it to stop."""
        job = self.jobs.get(run_id)
        if job is None and await self._waiting(run_id):
            # Nobody runs it: close it here (a concurrent resume claims it, or finds it closed).
            if await self.orphans.close(run_id, mode, waiting_only=True):
                return
            job = self.jobs.get(run_id)  # resumed meanwhile, here or elsewhere
        if job is None:
            if self.bus.enabled and await self._cancel_remote(run_id, mode):
                return
            await self.orphans.close(run_id, mode)
            return
        if job.task is None or job.finishing:
            await job.done.wait()
            return
        if job.cancel_mode is None:
            job.cancel_mode = mode
            job.cancel_sent = job.inline  # see RunManager.run_here
            coro = cast(Coroutine[Any, Any, Any], job.task.get_coro())
            if job.inline or inspect.getcoroutinestate(coro) != CORO_CREATED:
                job.task.cancel()
            # else: its task has not taken a step yet, and a task cancelled then would never
            # run its body (no end stored, its lease never taken): its first step sees
            # ``cancel_mode`` and ends the run (execution.execute).
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(job.done.wait()), self.timeout_s * 5)

    async def _waiting(self, run_id: str) -> bool:
        return await self.store.run_status(run_id) in WAITING

    async def _cancel_remote(self, run_id: str, mode: CancelMode) -> bool:
        """Ask the replica that owns the run; True once the run has a final status."""
        await self.bus.publish(run_id, mode)
        for _ in range(int(self.timeout_s * 2 / 0.05) + 1):
            status = await self.store.run_status(run_id)
            if status is None or status in TERMINAL:
                return True
            await asyncio.sleep(0.05)
        return False  # nobody owns it: the caller closes it as an orphan

    def cancel_soon(self, run_id: str, mode: CancelMode) -> None:
        """Cancel from a context that is itself being cancelled (a dropped stream)."""
        task = asyncio.create_task(self.cancel(run_id, mode))
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    def remote_cancel(self, run_id: str, mode: str) -> None:
        """A cancel another replica published: ours if the run is (an unknown mode, from a
        newer replica: ``cancelled``)."""
        if run_id in self.jobs:
            self.cancel_soon(run_id, CancelMode.parse(mode) or CancelMode.CANCELLED)
