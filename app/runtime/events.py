"""A run's event log: sequence numbers from 1, coalesced deltas, live followers, durable rows.

An event id (``seq``) once sent names that event forever, on every replica and after any
crash. Events are sent before they are stored (storing each one first would put a write in
front of every delta), so a live run sends an id only when it is stored or at most
``Run.seq_reserved``: a bound raised durably, a block at a time, before the run needs it (a
run is created with the first block; most turns never raise it). Recovery numbers the events
it adds after that bound, and says with a ``run.gap`` event that ids up to it may have been
sent and lost (see ``gap_event``).

One module (~300 lines) on purpose: numbering, coalescing, reservation, storage and followers
share one log's state, and splitting them would expose it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.db.base import utcnow
from app.db.models import SEQ_BLOCK
from app.models.encoded import dumps
from app.schemas.vocab import EventType

log = logging.getLogger(__name__)

# The next block is reserved when fewer than this many reserved ids are left unused.
SEQ_LOW_WATER = 16


class EventStore(Protocol):
    """Where a channel stores its events (the run store, app/runtime/store/base.py)."""

    async def append_events(self, rows: list[dict[str, Any]]) -> None: ...

    async def reserve_ids(self, run_id: str, target: int) -> bool: ...


@dataclass
class Event:
    """One event of a run's stream (``data`` is never changed once the event exists)."""

    seq: int
    type: EventType
    data: dict[str, Any]
    raw: bytes | None = field(default=None, repr=False, compare=False)

    def encoded(self) -> bytes:
        """``data`` as compact JSON, encoded once: the SSE frame and the stored row share it
        (a streamed turn encoded each event twice, ~7 % of its CPU)."""
        raw = self.raw
        if raw is None:
            raw = self.raw = dumps(self.data)
        return raw


class RunChannel:
    """Events of one live run: kept in memory for followers, written to the database in batches."""

    def __init__(
        self,
        run_id: str,
        store: EventStore,
        flush_s: float,
        reserved: int = SEQ_BLOCK,
        store_s: float | None = None,
    ) -> None:
        self.run_id = run_id
        self.reserved = reserved  # durably reserved: ids up to it may be sent before storage
        self.stored = 0  # events up to this seq are stored
        self._reserving: asyncio.Task[None] | None = None
        self._followers = 0  # ids are reserved only for someone to send them to
        self.events: list[Event] = []
        self.done = False
        self._store = store
        self._flush_s = flush_s
        # Mid-run events are stored this often (the run's end stores the rest with it): a
        # write per run per flush was most of a streamed turn's database work.
        self._store_s = flush_s if store_s is None else max(store_s, flush_s)
        self._last_store = 0.0
        self._waiters: list[asyncio.Future[None]] = []  # followers waiting for a change
        self._pending: dict[str, Any] | None = None  # a message.delta being coalesced
        self._pending_text = False  # its ``delta`` is a str (more text merges into it)
        self._unsaved: list[Event] = []
        self._last_publish = 0.0
        self._write_lock = asyncio.Lock()
        self._flusher: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None  # starts the flusher (see start)
        # The flusher's nap: woken at ``_nap_until`` (monotonic, inf: not before something is
        # added) or earlier by ``_nudge`` when an event or a delta needs it sooner.
        self._nap: asyncio.Future[None] | None = None
        self._nap_until = 0.0
        # The timer of the nap's end (``_alarm_at``, monotonic), kept across naps that end at
        # the same time (the next store, most naps of a streaming run): one timer per store
        # period, not one per published delta (issue 25).
        self._alarm: asyncio.TimerHandle | None = None
        self._alarm_at = math.inf

    def preload(self, events: list[Event]) -> None:
        """Start from a run's stored log (a run resumed after waiting): new events number on
        from its last, and followers get the stored ones too (Last-Event-ID across the pause)."""
        self.events = list(events)
        self.stored = events[-1].seq if events else 0
        self.reserved = max(self.reserved, self.stored)

    def seed(self, type_: EventType, data: dict[str, Any]) -> None:
        """Add the first event before anyone follows (``run.created``)."""
        event = Event(len(self.events) + 1, type_, data)
        self.events.append(event)
        self._unsaved.append(event)

    def start(self) -> None:
        """Start the periodic flusher (at most ``flush_s`` between a delta and its storage);
        its task is created only when the first period ends (most turns end before)."""
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self._flush_s, self._start_flusher)

    def _start_flusher(self) -> None:
        self._timer = None
        self._last_store = time.monotonic() - self._flush_s  # the run's start
        self._flusher = asyncio.create_task(self._flush_loop())

    async def _flush_loop(self) -> None:
        """Publish merged deltas every ``flush_s``; store events every ``store_s`` (on the
        grid of ``store_s`` periods from the run's start, so events close together share a
        write). It sleeps while there is nothing to publish or store: a run waiting on its
        model or its tool cost a wake-up every ``flush_s`` (10 a second per live run)."""
        while True:
            if self._pending is not None:
                self._publish_pending()
            if self._followers and len(self.events) + SEQ_LOW_WATER > self.reserved:
                self._reserve_soon()  # again, if an earlier reservation failed
            now = time.monotonic()
            if now - self._last_store >= self._store_s - 1e-3:
                # The grid point reached (periods with nothing to store are skipped).
                if self._store_s > 0:
                    periods = (now - self._last_store) // self._store_s
                    self._last_store += max(1.0, periods) * self._store_s
                else:
                    self._last_store = now
                try:
                    await self.save()
                except Exception:  # keep streaming; the final save retries and reports
                    log.exception("run %s: saving events failed", self.run_id)
            await self._sleep(self._next_wake())

    def _next_wake(self) -> float:
        """When the flusher has work next (monotonic; inf: nothing until an event comes)."""
        now = time.monotonic()
        # Followers need ids reserved and the last try did not get them (retried); and
        # ``_store_due``'s common case inline (this runs once per published delta).
        if self._pending is not None or (
            self._followers and len(self.events) + SEQ_LOW_WATER > self.reserved
        ):
            return now + self._flush_s
        if self._unsaved:
            last, period = self._last_store, self._store_s
            due = last + period if 0 < period and now - last < period else self._store_due(now)
            return due if due > now + self._flush_s else now + self._flush_s
        return math.inf

    def _store_due(self, now: float | None = None) -> float:
        """The next grid point at or after now (when unsaved events are stored)."""
        if now is None:
            now = time.monotonic()
        if self._store_s <= 0:
            return now
        if now - self._last_store < self._store_s:
            return self._last_store + self._store_s
        periods = math.ceil((now - self._last_store) / self._store_s)
        return self._last_store + periods * self._store_s

    async def _sleep(self, until: float) -> None:
        loop = asyncio.get_running_loop()
        nap = self._nap = loop.create_future()
        self._nap_until = until
        if until != self._alarm_at or self._alarm is None:
            self._disarm()
            if until != math.inf:
                at = loop.time() + max(0.0, until - time.monotonic())
                self._alarm, self._alarm_at = loop.call_at(at, self._ring), until
        try:
            await nap
        finally:
            self._nap = None

    def _ring(self) -> None:
        """The alarm: the nap (whichever is under way) ends."""
        self._alarm, self._alarm_at = None, math.inf
        nap = self._nap
        if nap is not None and not nap.done():
            nap.set_result(None)

    def _disarm(self) -> None:
        alarm, self._alarm, self._alarm_at = self._alarm, None, math.inf
        if alarm is not None:
            alarm.cancel()

    def _nudge(self, by: float) -> None:
        """The flusher must run by ``by`` (monotonic): wake it if it sleeps past that."""
        nap = self._nap
        if nap is not None and by < self._nap_until:
            self._nap_until = by
            loop = nap.get_loop()
            loop.call_at(loop.time() + max(0.0, by - time.monotonic()), _resolve, nap)

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _append(self, type_: EventType, data: dict[str, Any]) -> Event:
        events = self.events
        event = Event(len(events) + 1, type_, data)
        events.append(event)
        self._unsaved.append(event)
        if self._followers and len(events) + SEQ_LOW_WATER > self.reserved:
            self._reserve_soon()
        if self._waiters:
            self._wake()
        if self._nap is not None and self._nap_until == math.inf:
            self._nudge(self._store_due())
        return event

    def sendable(self) -> int:
        """How many events followers may see: those stored or within the reserved ids."""
        return min(len(self.events), max(self.reserved, self.stored))

    def _reserve_soon(self) -> None:
        """Reserve the next block of ids in the background when few are left (and the run
        has followers: without any, events wait for storage, which the final write does)."""
        if (
            self._followers
            and self._reserving is None
            and len(self.events) + SEQ_LOW_WATER > self.reserved
        ):
            self._reserving = asyncio.create_task(self._reserve())

    async def _reserve(self) -> None:
        """Raise ``Run.seq_reserved`` durably, then let followers see the events it covers.
        Only while the run is active: a run closed by recovery keeps the bound recovery saw."""
        try:
            target = len(self.events) + SEQ_BLOCK
            if await self._store.reserve_ids(self.run_id, target):
                self.reserved = target
                self._wake()
            else:
                log.warning("run %s: no longer active; its event ids stay reserved", self.run_id)
        except Exception:  # followers wait; the flusher or the next event tries again
            log.exception("run %s: reserving event ids failed", self.run_id)
        finally:
            self._reserving = None

    def _publish_pending(self) -> None:
        # Not a coroutine (nor ``_append``): one per published delta was a coroutine made,
        # run and thrown away (issue 25).
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self._last_publish = time.monotonic()
            self._append(EventType.MESSAGE_DELTA, pending)

    async def delta(self, index: int, sender: str, text: Any, stream_state: int) -> None:
        """``put_delta`` awaited (it never waits)."""
        self.put_delta(index, sender, text, stream_state)

    def put_delta(self, index: int, sender: str, text: Any, stream_state: int) -> None:
        """Add a content delta; consecutive deltas of one message are merged between flushes
        (not a coroutine: the run's segmenter calls it once per token of every answer)."""
        pending = self._pending
        if (
            pending is not None
            and self._pending_text  # its delta is text (checked once, not per token)
            and pending["index"] == index
            and (type(text) is str or isinstance(text, str))
        ):
            pending["delta"] += text
            pending["stream_state"] = stream_state
        else:
            self._publish_pending()
            self._pending = {
                "index": index,
                "sender": sender,
                "delta": text,
                "stream_state": stream_state,
            }
            self._pending_text = isinstance(text, str)
            if self._nap is not None:
                self._nudge(time.monotonic() + self._flush_s)
        # The first delta after a quiet period goes out at once (time to first token).
        if time.monotonic() - self._last_publish >= self._flush_s:
            self._publish_pending()

    async def emit(self, type_: EventType, data: dict[str, Any], durable: bool = False) -> Event:
        """Append a whole event (after any pending delta); ``durable`` waits for storage."""
        self._publish_pending()
        event = self._append(type_, data)
        if durable:
            await self.save()
        return event

    def _rows(self, events: list[Event]) -> list[dict[str, Any]]:
        now = utcnow()
        return [
            {"run_id": self.run_id, "seq": e.seq, "type": e.type, "data": e.data,
             "raw": e.encoded(), "created_at": now}
            for e in events
        ]  # fmt: skip

    async def save(self) -> None:
        """Write unsaved events in one transaction."""
        async with self._write_lock:
            if not self._unsaved:
                return
            batch, self._unsaved = self._unsaved, []
            try:
                await self._store.append_events(self._rows(batch))
            except BaseException:
                self._unsaved = batch + self._unsaved
                raise
            self.stored = batch[-1].seq
            self._wake()

    async def stop_flushing(self) -> None:
        """Stop the periodic flusher (never in the middle of a save) and publish any pending
        delta: the run's last events are then written by the caller (``final_rows``)."""
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        flusher, self._flusher = self._flusher, None
        if flusher is not None:
            async with self._write_lock:  # a save in flight completes first
                flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flusher
        self._disarm()
        self._publish_pending()
        if self._reserving is not None:  # never left half done (it logs its own errors)
            await asyncio.shield(self._reserving)

    def final_rows(
        self, type_: EventType, data: dict[str, Any]
    ) -> tuple[Event, list[dict[str, Any]]]:
        """The terminal event and, as ``seq``/``type``/``data``/``raw`` (``data`` encoded,
        ``Event.encoded``) dicts, every unsaved event with
        it, for the caller to store in the run's end (then call ``published``). Call after
        ``stop_flushing`` (nothing else appends events then)."""
        event = Event(len(self.events) + 1, type_, data)
        rows = [
            {"seq": e.seq, "type": e.type, "data": e.data, "raw": e.encoded()}
            for e in [*self._unsaved, event]
        ]
        return event, rows

    async def published(self, event: Event) -> None:
        """The run's end with ``final_rows`` committed: show ``event`` to followers."""
        self._unsaved = []
        self.events.append(event)
        self.stored = event.seq
        self._wake()

    async def close(self) -> None:
        """Stop the flusher, store everything and wake followers for the last time."""
        await self.stop_flushing()
        await self.save()
        self.done = True
        self._wake()

    async def follow(self, after: int = 0) -> AsyncIterator[Event]:
        """Events with ``seq > after``, live until the run ends."""
        position = max(after, 0)
        loop = asyncio.get_running_loop()
        self._followers += 1
        try:
            self._reserve_soon()
            while True:
                # ``sendable`` inline (per event and per wake-up of every live follower).
                reserved, stored = self.reserved, self.stored
                limit = len(self.events)
                if reserved < limit and stored < limit:
                    limit = reserved if reserved > stored else stored
                if position < limit:
                    position += 1
                    yield self.events[position - 1]
                    continue
                if self.done:
                    return
                waiter = loop.create_future()
                self._waiters.append(waiter)
                await waiter
        finally:
            self._followers -= 1


def _resolve(nap: asyncio.Future[None]) -> None:
    if not nap.done():
        nap.set_result(None)


def gap_event(stored: int, reserved: int, reason: str) -> tuple[str, dict[str, Any]] | None:
    """The ``run.gap`` event recovery stores before a dead run's final event, when ids above
    its stored events may have been sent: ``from_id``..``to_id`` named events that are lost
    (the client saw them live, or missed them) and are never used again."""
    if reserved <= stored:
        return None
    return EventType.RUN_GAP, {"from_id": stored + 1, "to_id": reserved, "reason": reason}
