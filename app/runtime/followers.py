"""The runs of this process, their event channels and final states, and the followers of any
run: live from its channel here, or from its stored events (a run owned by another replica, or
one that ended a while ago)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from app.db.models import Run
from app.runtime.events import Event, RunChannel
from app.runtime.jobs import Job
from app.runtime.store import RunStore
from app.schemas.vocab import TERMINAL, WAITING, EventType, RunStatus, ends_stream

KEEP_CHANNEL_S = 30.0  # finished runs are served from memory a little longer, then from the DB
FOLLOW_POLL_S = 0.2  # a run owned elsewhere is followed by reading its stored events this often
REAP_EVERY = 5  # polls between checks that its owner (another replica) is still alive


class LiveRuns:
    """Jobs, channels and recent final states of this process's runs."""

    def __init__(
        self,
        store: RunStore,
        reap: Callable[[str, str], Awaitable[bool]],
    ) -> None:
        self.store = store
        self.reap = reap  # close a run whose replica died (``Orphans.reap``)
        self.jobs: dict[str, Job] = {}
        self.channels: dict[str, RunChannel] = {}
        # Runs this process finished, served from memory for KEEP_CHANNEL_S (the POST's answer).
        self.finished: dict[str, Run] = {}
        self.finished_public: dict[str, dict[str, Any]] = {}  # their API shape (run_public)
        # Called with each run this process finished (ops: metrics and the "run finished" log).
        self.on_finished: Callable[[Run], None] | None = None

    def register(self, job: Job) -> None:
        """A job starts: followers find its channel from now on."""
        self.jobs[job.run_id] = job
        self.channels[job.run_id] = job.channel

    def ended(self, run: Run, public: dict[str, Any]) -> None:
        """A job stored its run's end: served from memory for a while."""
        self.finished[run.id] = run
        self.finished_public[run.id] = public
        if self.on_finished is not None:
            self.on_finished(run)

    def reopen(self, run_id: str) -> None:
        """A waiting run resumes: its old final state is no longer its state."""
        self.finished.pop(run_id, None)
        self.finished_public.pop(run_id, None)

    def forget(self, job: Job) -> None:
        """Called by a finished job: drop it now, its channel after a grace period (a run
        that waits for a person at once: followers then read the stored log, which goes on
        when the run resumes, perhaps on another replica)."""
        if self.jobs.get(job.run_id) is job:
            self.jobs.pop(job.run_id, None)
        if job.run.status in WAITING:
            if self.channels.get(job.run_id) is job.channel:
                self.channels.pop(job.run_id, None)
        loop = asyncio.get_running_loop()
        loop.call_later(KEEP_CHANNEL_S, self._drop_finished, job.run_id, job.channel)

    def _drop_finished(self, run_id: str, channel: RunChannel | None = None) -> None:
        if channel is not None and self.channels.get(run_id) not in (None, channel):
            return  # resumed since: its new channel and result stay
        self.channels.pop(run_id, None)
        self.finished.pop(run_id, None)
        self.finished_public.pop(run_id, None)

    async def wait(self, run_id: str) -> None:
        """Until the run has a final status."""
        job = self.jobs.get(run_id)
        if job is not None:
            await job.done.wait()
            return
        async for _ in self.follow(run_id, 0):
            pass

    def follow(self, run_id: str, after: int = 0) -> AsyncIterator[Event]:
        """Stored events after ``after``, then live ones, until the run ends: the channel's own
        follower when this process runs it (no generator around it: each event and each wait
        passed through one more, issue 25), else its stored events."""
        channel = self.channels.get(run_id)
        if channel is not None:
            return channel.follow(after)
        return self._follow_stored(run_id, after)

    async def _follow_stored(self, run_id: str, after: int) -> AsyncIterator[Event]:
        """A run owned elsewhere, or ended a while ago: its stored events, polled."""
        polls = 0
        while True:
            found, rows = await self.store.events_after(run_id, after)
            for i, (seq, type_, data) in enumerate(rows):
                after = seq
                yield Event(seq, EventType(type_), data)
                # A pause ends the stream only while the run still waits there: a resumed
                # run's log goes on after it (Last-Event-ID across the pause).
                paused_before = type_ == EventType.RUN_REQUIRES_ACTION and (
                    i < len(rows) - 1 or (found is not None and found[0] not in WAITING)
                )
                if ends_stream(type_) and not paused_before:
                    return
            if found is None or found[0] in TERMINAL:
                return
            polls += 1
            if found[0] == RunStatus.RUNNING and polls % REAP_EVERY == 0:
                if await self.reap(run_id, found[1]):
                    continue  # its final events are stored: read them now
            await asyncio.sleep(FOLLOW_POLL_S)
