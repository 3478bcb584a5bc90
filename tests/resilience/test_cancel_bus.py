"""Cross-replica cancel keeps working after PostgreSQL restarts (a private cluster): the
cancel listener notices its connection is gone and opens a new one, with backoff."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest

from app.db.engine import create_engine
from app.runtime.notify import CancelBus
from tests.resilience.procs import PrivatePostgres

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


async def _until(check: Callable[[], bool], what: str) -> None:
    for _ in range(300):  # 15 s
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def test_cancel_listener_reconnects_after_a_database_restart(
    private_pg: PrivatePostgres, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="app.runtime.notify")
    engine = create_engine(private_pg.url)
    received: list[tuple[str, str]] = []
    bus = CancelBus(
        engine,
        lambda run_id, mode: received.append((run_id, mode)),
        backoff_s=0.1,
        max_backoff_s=0.5,
    )
    await bus.start()
    try:
        await bus.publish("run_before", "cancelled")
        await _until(lambda: ("run_before", "cancelled") in received, "the first cancel")

        await asyncio.to_thread(private_pg.stop)  # every client is disconnected
        await _until(lambda: "reconnect 1 failed" in caplog.text, "a failed reconnect")
        await asyncio.sleep(0.6)  # a few more attempts against the stopped database
        await asyncio.to_thread(private_pg.start)
        await _until(lambda: bus.reconnects == 1, "the listener to come back")

        # Another replica (the pool re-connects by itself) asks for a cancel: it still arrives.
        await bus.publish("run_after", "shutdown")
        await _until(lambda: ("run_after", "shutdown") in received, "a cancel after the restart")
    finally:
        await bus.aclose()
        await engine.dispose()
    assert "cancel listener connection lost" in caplog.text
    assert "cancel listener re-established" in caplog.text
    assert received == [("run_before", "cancelled"), ("run_after", "shutdown")]
