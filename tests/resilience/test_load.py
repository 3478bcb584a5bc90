"""Load (issue 20): many sessions send JSON and SSE turns back to back over the keep-alive pools
of httpx and of aiohttp, on SQLite and PostgreSQL (live service). Halfway every session stops,
and all resume together 5 s later, as their idle connections reach the clients' idle expiry
(httpx's default, 5 s): a server that closes idle connections as soon (uvicorn's default) drops
some of that burst's requests (no response: ReadError, ServerDisconnectedError). Every request
must be answered, every session's memory must hold exactly its own turns, and the server must
log no connection closed without a response. The full acceptance run (100 sessions x 20 s, five
runs per client) is ``python -m bench.soak`` (bench/README.md)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from bench.soak import CLIENTS, SoakConfig, soak
from tests.resilience.procs import AUTH, Service

pytestmark = [pytest.mark.slow, pytest.mark.live]

SESSIONS = int(os.environ.get("RESILIENCE_LOAD_SESSIONS", "60"))
DURATION_S = float(os.environ.get("RESILIENCE_LOAD_S", "2"))  # of turns, besides the pause
CLIENT_IDLE_EXPIRY_S = 5.0  # httpx's default; aiohttp's (15 s) is set to it


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(
    "database", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_every_request_answered_and_stored_once(
    client: str, database: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if database == "postgres":
        url = str(request.getfixturevalue("shared_pg_url"))
    else:
        url = f"sqlite+aiosqlite:///{tmp_path}/load.db"
    cfg = SoakConfig(
        sessions=SESSIONS,
        duration_s=DURATION_S,
        pause_s=CLIENT_IDLE_EXPIRY_S,
        idle_expiry_s=CLIENT_IDLE_EXPIRY_S,
    )
    service = Service(url, tmp_path).start()
    try:
        result = asyncio.run(soak(service.url, cfg, client, AUTH))
    finally:
        service.stop()
    print(f"{database} {result.summary()}")
    log = service.log()
    if not result.ok:
        pytest.fail(f"{result.summary()}\n{result.problems()}\n{log[-2000:]}")
    assert "without a response" not in log, log[-2000:]
    # Every session worked before and after the pause, and streamed some turns.
    assert result.turns >= SESSIONS * 2 and result.streamed >= SESSIONS // 2, result.summary()
