"""A live run's events are stored mid-run within ``store_s`` (durable before the run ends),
events close together share one write, and merged deltas reach followers within ``flush_s``,
also after the channel sat quiet (its flusher sleeps then)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from app.runtime.events import RunChannel
from app.schemas.vocab import EventType


class RecordingStore:
    """Where the channel's writes go: each write's rows and when it came."""

    def __init__(self) -> None:
        self.writes: list[tuple[float, list[dict[str, Any]]]] = []
        self.written = asyncio.Event()

    async def append_events(self, rows: list[dict[str, Any]]) -> None:
        self.writes.append((time.monotonic(), rows))
        self.written.set()

    async def reserve_ids(self, run_id: str, target: int) -> bool:
        return True


async def test_events_after_a_quiet_spell_are_stored_within_store_s_in_one_write() -> None:
    store = RecordingStore()
    channel = RunChannel("run-1", store, flush_s=0.02, store_s=0.2)
    channel.start()
    await asyncio.sleep(0.5)  # the run waits on its model: nothing to store
    assert store.writes == []
    t0 = time.monotonic()
    await channel.emit(EventType.MESSAGE, {"index": 0, "message": {"content": "call"}})
    await channel.emit(EventType.MESSAGE, {"index": 1, "message": {"content": "result"}})
    await asyncio.wait_for(store.written.wait(), 2)
    at, rows = store.writes[0]
    assert at - t0 <= 0.2 + 0.1  # store_s, with a margin for a loaded machine
    assert [r["seq"] for r in rows] == [1, 2]  # both events, one write
    assert rows[0]["raw"] == channel.events[0].encoded()  # the SSE frame's JSON, stored as is
    await channel.close()
    assert len(store.writes) == 1


async def test_a_delta_after_a_quiet_spell_reaches_a_follower_within_flush_s() -> None:
    channel = RunChannel("run-2", RecordingStore(), flush_s=0.05, store_s=1.0)
    channel.start()
    seen: list[tuple[float, str]] = []
    both = asyncio.Event()

    async def follow() -> None:
        async for event in channel.follow():
            if event.type == EventType.MESSAGE_DELTA:
                seen.append((time.monotonic(), event.data["delta"]))
                if len(seen) == 2:
                    both.set()

    follower = asyncio.create_task(follow())
    await asyncio.sleep(0.3)  # quiet: the flusher sleeps
    await channel.delta(0, "agent", "a", 1)  # the first after a quiet spell: out at once
    t0 = time.monotonic()
    await channel.delta(0, "agent", "b", 1)  # merged, published by the flusher
    await asyncio.wait_for(both.wait(), 2)
    assert [d for _, d in seen] == ["a", "b"]
    assert seen[1][0] - t0 <= 0.05 + 0.1
    await channel.close()
    await follower
