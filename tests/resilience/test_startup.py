"""A fresh server taking traffic at once (a new replica behind a load balancer): as soon as
/healthz answers, a tool agent's message runs its cell (the sandbox self-test is still
running then) and /readyz is never 200 while a part is not ready. Ten starts in a row, on
SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.db.migrate import upgrade
from tests.app.conftest import MODELS, PG_URL, _drop_pg_database, _fresh_pg_database
from tests.resilience.procs import AUTH, Service

pytestmark = [pytest.mark.live, pytest.mark.kernel, pytest.mark.slow]
STARTS = 10
CALL = {"name": "IPythonInteractive", "parameters": {"command": "print(6*7)"}}
CODER = {
    "name": "coder",
    "backend": "scripted",
    "replies": [f"```json\n{json.dumps(CALL)}\n```\n", "The answer is in the output."],
}


@pytest.fixture
def sandbox_dir() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="agentstation-start-"))
    base.chmod(0o711)  # sandbox uids must traverse it
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'start.db'}"  # migrated by the first start
        return
    if not PG_URL:
        pytest.fail("AGENTSTATION_TEST_DATABASE_URL is not set")
    url = await _fresh_pg_database()
    try:
        await asyncio.to_thread(upgrade, url)  # `serve` migrates SQLite only
        yield url
    finally:
        await _drop_pg_database(url)


def _watch_ready(url: str, stop: threading.Event, seen: list[tuple[int, dict[str, Any]]]) -> None:
    """Poll /readyz every 20 ms until ``stop`` (every answer kept); a busier loop only takes
    CPU from the server on a 2-core CI runner."""
    with httpx.Client(base_url=url, timeout=5) as c:
        while not stop.wait(0.02):
            resp = c.get("/readyz")
            seen.append((resp.status_code, resp.json()))
            if resp.status_code == 200 and len(seen) > 3:
                return


def _ready_is_true(status: int, body: dict[str, Any]) -> None:
    """A 200 only with every part ready; a 503 names what is not."""
    if status == 200:
        assert body["database"] == "ok", body
        assert all(s == "ready" for s in body["models"].values()), body
        assert body["sandbox"]["level"] is not None and body["sandbox"]["level_ok"], body
    else:
        assert status == 503 and body["status"] == "not_ready" and body["not_ready"], body


def test_first_tool_call_after_start_works(
    database: str, sandbox_dir: Path, tmp_path: Path
) -> None:
    early = 0  # starts whose /readyz was seen 503 naming the sandbox: the window was hit
    for start in range(STARTS):
        service = Service(database, tmp_path, models=[*MODELS, CODER])
        service.env.update(
            AGENTSTATION_SANDBOX_ENABLED="true",
            AGENTSTATION_SANDBOX_BASE_DIR=str(sandbox_dir),
            AGENTSTATION_SANDBOX_TIMEOUT_S="20",
        )
        service.start()  # returns as soon as /healthz answers
        seen: list[tuple[int, dict[str, Any]]] = []
        stop = threading.Event()
        watcher = threading.Thread(target=_watch_ready, args=(service.url, stop, seen))
        watcher.start()
        try:
            with httpx.Client(base_url=service.url, headers=AUTH, timeout=60) as c:
                spec = {"kind": "tool_agent", "model": "coder",
                        "tools": [{"name": "IPythonInteractive"}]}  # fmt: skip
                name = f"py{start}"
                assert c.post("/v1/agents", json={"name": name, "spec": spec}).status_code == 201
                sid = c.post("/v1/sessions", json={"agent": name}).json()["id"]
                resp = c.post(f"/v1/sessions/{sid}/messages", json={"message": "6*7?"})
                assert resp.status_code == 200, resp.text
                assert resp.json()["run"]["status"] == "completed", resp.text
                memory = c.get(f"/v1/sessions/{sid}/memory").json()["memory"]
                result = memory[-2]  # the cell's result, which the model's answer follows
                assert "42" in str(result["content"]), (start, result, service.log())
                assert "Error" not in str(result["content"]), (start, result)
            watcher.join(60)
        finally:
            stop.set()
            watcher.join(5)
            service.stop()
        assert seen, "no /readyz answer"
        for status, body in seen:
            _ready_is_true(status, body)
        assert seen[-1][0] == 200, seen[-1]
        early += any("sandbox" in body.get("not_ready", ()) for _, body in seen)
    assert early, "no start was caught before its sandbox was ready: the test proves nothing"
