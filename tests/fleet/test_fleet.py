"""Three `agentstation serve` replicas on one fresh PostgreSQL database behind nginx started from
the shipped config (deploy/nginx/nginx.conf), with real sandboxed kernels and a scripted tool
agent whose cells carry each session's own value.

1. Affinity: 50 sessions each set ``x = <its value>`` in Python on one turn and read it back on
   later turns through REST and through chat with ``X-Session-Id``, and 20 of them do the same
   in a Responses chain (``previous_response_id``, routed by the route key in the ids): every
   read returns its own value, and every run of a session ran on one replica.
2. ``kill -9`` of one replica under the test's own bounded load (sessions in a loop of streamed
   REST turns, JSON REST turns and chat turns whose cells take 0.3 s): every request gets an
   answer (success, or 503 with ``Retry-After`` that a retry then passes), every turn
   acknowledged is in its session's memory with its run ``completed``, the dead replica's runs
   are ``interrupted`` within 15 s (read from the database, nothing else touching them), streams
   cut by the kill and resumed with ``Last-Event-ID`` through nginx end with their terminal
   event, and each moved session's first turn on its new replica reports ``kernel.restarted``.
3. SIGTERM of a second replica while turns run on it: they finish there (within
   ``AGENTSTATION_SHUTDOWN_GRACE_S``), its sessions' next turns are served by the last replica,
   and it leaves the replicas table.

Cost (2-core machine shared with other work): 63 s when quiet (before the chains and the drain
phase were added), 100-200 s at load average 15-20 (three replicas' sandbox self-tests, ~75
kernels, ~450 turns). The dead replica's runs were closed 0.7-2.6 s after the kill.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from app.db.migrate import upgrade
from tests.app.conftest import KEY_A, PG_URL, _drop_pg_database, _fresh_pg_database
from tests.fleet.balancer import Nginx
from tests.resilience.procs import Service, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.kernel, pytest.mark.slow, pytest.mark.live]

SESSIONS = 50
CHAINS = 20  # of them also run a Responses chain (a session of its own: 20 more kernels)
CALL = json.dumps({"name": "IPythonInteractive", "parameters": {"command": "{user}"}})
# Per conversation: run the user's message as a cell, then answer with the cell's output.
CODER = {
    "name": "coder",
    "backend": "scripted",
    "cycle": "conversation",
    "template": True,
    "replies": [f"```json\n{CALL}\n```\n", "{last}"],
}
SPEC = {"kind": "tool_agent", "model": "coder", "tools": [{"name": "IPythonInteractive"}]}
AUTH = {"Authorization": f"Bearer {KEY_A}"}
TERMINAL = {"run.completed", "run.failed", "run.cancelled"}


def value(n: int) -> int:
    return 700_000 + n


@dataclass
class Fleet:
    url: str
    services: list[Service]
    nginx: Nginx


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    if not PG_URL:
        pytest.fail("AGENTSTATION_TEST_DATABASE_URL is not set (deselect with -m 'not postgres')")
    url = asyncio.run(_fresh_pg_database())
    bases: list[Path] = []
    services: list[Service] = []
    nginx: Nginx | None = None
    try:
        upgrade(url)
        for i in range(3):
            base = Path(tempfile.mkdtemp(prefix=f"agentstation-fleet{i}-"))
            base.chmod(0o711)  # sandbox uids must traverse it
            bases.append(base)
            service = Service(url, tmp_path, models=[CODER])
            service.env.update(
                AGENTSTATION_SANDBOX_ENABLED="true",
                AGENTSTATION_SANDBOX_BASE_DIR=str(base),
                AGENTSTATION_SANDBOX_MAX_KERNELS="64",
                AGENTSTATION_SANDBOX_TIMEOUT_S="20",
                # 3 x (16 + 4) stays below the server's 100 connections.
                AGENTSTATION_DB_POOL_SIZE="16",
                AGENTSTATION_DB_MAX_OVERFLOW="4",
                AGENTSTATION_REPLICA_NAME=f"r{i}",
                AGENTSTATION_SHUTDOWN_GRACE_S="15",  # a drained replica's runs finish
            )
            services.append(service)
        for service in services:
            service.start(timeout=120)
        for service in services:
            wait_until(
                lambda s=service: httpx.get(f"{s.url}/readyz", timeout=5).status_code == 200,
                120,
                "a replica to be ready (its sandbox self-test)",
                interval=0.5,
            )
        nginx = Nginx([f"127.0.0.1:{s.port}" for s in services]).start()
        yield Fleet(url, services, nginx)
    finally:
        if nginx is not None:
            nginx.stop()
        for service in services:
            service.stop()
        for base in bases:
            shutil.rmtree(base, ignore_errors=True)
        asyncio.run(_drop_pg_database(url))


@contextlib.asynccontextmanager
async def _db(url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        yield conn
    finally:
        await conn.close()


def _reads(text: str, n: int) -> bool:
    """Whether a cell's output is exactly the session's own value."""
    return re.search(rf"(?<!\d){value(n)}(?!\d)", text) is not None and "Error" not in text


async def _rest(c: httpx.AsyncClient, sid: str, code: str) -> dict[str, Any]:
    resp = await c.post(f"/v1/sessions/{sid}/messages", json={"message": code})
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    assert body["run"]["status"] == "completed", body
    return body


async def _chat(c: httpx.AsyncClient, sid: str, code: str) -> str:
    body = {"model": "py", "messages": [{"role": "user", "content": code}]}
    resp = await c.post("/v1/chat/completions", json=body, headers={"X-Session-Id": sid})
    assert resp.status_code == 200, resp.text
    return str(resp.json()["choices"][0]["message"]["content"])


async def _affinity(c: httpx.AsyncClient, url: str) -> dict[str, str]:
    """Phase 1; the replica (id) each session runs on."""
    assert (await c.post("/v1/agents", json={"name": "py", "spec": SPEC})).status_code == 201
    gate = asyncio.Semaphore(8)

    async def session(n: int) -> None:
        sid = f"s{n}"
        async with gate:
            made = await c.post("/v1/sessions", json={"agent": "py", "id": sid})
            assert made.status_code == 201, made.text
            await _rest(c, sid, f"x = {value(n)}")
            read = await _rest(c, sid, "print(x)")
            assert _reads(str(read["message"]["content"]), n), read
            assert _reads(await _chat(c, sid, "print(x)"), n)
            if n < CHAINS:
                await _chain(c, n)

    await asyncio.gather(*(session(n) for n in range(SESSIONS)))
    async with _db(url) as db:
        rows = await db.fetch(
            "SELECT session_id, array_agg(DISTINCT replica) r FROM runs GROUP BY 1"
        )
    homes = {row["session_id"]: row["r"] for row in rows}
    assert len(homes) == SESSIONS + CHAINS  # the chains' sessions too
    assert all(len(r) == 1 for r in homes.values()), homes  # every turn on the session's replica
    assert len({r[0] for r in homes.values()}) == 3  # sessions spread over the replicas
    return {sid: r[0] for sid, r in homes.items() if not sid.startswith("chain_")}


async def _chain(c: httpx.AsyncClient, n: int) -> None:
    """A Responses chain: nginx hands the first response a route key (X-Route-Key), the
    service puts it in the response's id, and the next responses (previous_response_id, in the
    JSON body only) hash to the same replica: the chain's kernel still has x."""
    first = await c.post("/v1/responses", json={"model": "py", "input": f"x = {value(n)}"})
    assert first.status_code == 200, first.text
    session = first.headers["x-session-id"]
    previous = first.json()["id"]
    for _ in range(2):
        body = {"model": "py", "input": "print(x)", "previous_response_id": previous}
        resp = await c.post("/v1/responses", json=body)
        assert resp.status_code == 200, resp.text
        assert resp.headers["x-session-id"] == session  # the chain's one session
        texts = [
            part["text"]
            for item in resp.json()["output"]
            if item["type"] == "message"
            for part in item["content"]
            if part["type"] == "output_text"
        ]
        assert _reads(" ".join(texts), n), resp.json()["output"]
        assert resp.json()["id"][5:21] == previous[5:21]  # the chain keeps its route key
        previous = resp.json()["id"]


@dataclass
class Load:
    """What the load saw."""

    acked: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # sid: (message, run)
    retried: int = 0  # 503 + Retry-After, then passed
    resumed: int = 0  # streams cut by the kill, resumed through nginx
    cut: int = 0  # JSON answers cut by the kill (headers sent, body not), sent again
    failures: list[str] = field(default_factory=list)
    ended: dict[str, str] = field(default_factory=dict)  # run id: final status (not completed)
    reads: list[tuple[str, str]] = field(default_factory=list)  # (sid, a cell's output)


async def _stream_turn(c: httpx.AsyncClient, sid: str, code: str, load: Load) -> str | None:
    """A streamed turn; a stream cut mid-way is resumed with Last-Event-ID. The run id when
    the turn completed (None: it did not, e.g. interrupted)."""
    body = {"message": code, "stream": True, "on_disconnect": "continue"}
    run_id, last, end = None, 0, None
    try:
        async with c.stream("POST", f"/v1/sessions/{sid}/messages", json=body) as resp:
            if resp.status_code != 200:
                await resp.aread()
                raise _Refused(resp)
            async for kind, seq, data in _frames(resp):
                last = seq or last
                if kind == "run.created":
                    run_id = data["run"]["id"]
                if kind in TERMINAL:
                    end = (kind, data)
    except (httpx.RemoteProtocolError, httpx.ReadError):
        pass  # the replica died mid-stream
    if end is None:
        assert run_id is not None, "a stream cut before its first event answered 200"
        load.resumed += 1
    # Resumed as a client does (EventSource): again while a stream ends without the final event
    # (a draining replica ends its open streams when it stops).
    for _ in range(10):
        if end is not None:
            break
        headers = {"Last-Event-ID": str(last)}
        with contextlib.suppress(httpx.RemoteProtocolError, httpx.ReadError):
            async with c.stream("GET", f"/v1/runs/{run_id}/events", headers=headers) as resp:
                if resp.status_code == 503 and "retry-after" in resp.headers:
                    await asyncio.sleep(float(resp.headers["retry-after"]))
                    continue
                assert resp.status_code == 200
                async for kind, seq, data in _frames(resp):
                    assert seq is None or seq > last  # ids go on from where it was cut
                    last = seq or last
                    if kind in TERMINAL:
                        end = (kind, data)
    assert end is not None, f"the resumed stream of {run_id} ended without its final event"
    if end[0] != "run.completed":
        load.ended[str(end[1]["run"]["id"])] = str(end[1]["run"]["status"])
        return None
    load.reads.append((sid, str(end[1]["run"]["output"]["content"])))
    return run_id


async def _frames(resp: httpx.Response) -> AsyncIterator[tuple[str, int | None, Any]]:
    kind, seq = "", None
    async for line in resp.aiter_lines():
        if line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("id:"):
            seq = int(line[3:].strip())
        elif line.startswith("data:"):
            yield kind, seq, json.loads(line[5:])
            kind, seq = "", None


class _Refused(Exception):
    def __init__(self, resp: httpx.Response) -> None:
        super().__init__(f"{resp.status_code} {resp.text[:300]}")
        self.resp = resp


async def _turn(c: httpx.AsyncClient, sid: str, k: int, load: Load) -> None:
    """One turn of the load (streamed, JSON or chat by ``k``), retried after a 503 with
    Retry-After; an acknowledged turn is recorded."""
    code = f"import time; time.sleep(0.3); print(x)  # t{k}"
    for _ in range(10):
        try:
            if k % 3 == 0:
                run_id = await _stream_turn(c, sid, code, load)
            elif k % 3 == 1:
                resp = await c.post(f"/v1/sessions/{sid}/messages", json={"message": code})
                if resp.status_code != 200:
                    raise _Refused(resp)
                run = resp.json()["run"]
                run_id = run["id"] if run["status"] == "completed" else None
                if run_id:
                    load.reads.append((sid, str(resp.json()["message"]["content"])))
            else:
                body = {"model": "py", "messages": [{"role": "user", "content": code}]}
                headers = {"X-Session-Id": sid}
                resp = await c.post("/v1/chat/completions", json=body, headers=headers)
                if resp.status_code != 200:
                    raise _Refused(resp)
                load.reads.append((sid, str(resp.json()["choices"][0]["message"]["content"])))
                run_id = await _last_run(c, sid, code)
        except _Refused as refused:
            resp = refused.resp
            if resp.status_code == 503 and "retry-after" in resp.headers:
                load.retried += 1
                await asyncio.sleep(float(resp.headers["retry-after"]))
                continue
            load.failures.append(f"{sid} t{k}: {resp.status_code} {resp.text[:300]}")
            return
        except httpx.RemoteProtocolError:
            # The replica was killed while it wrote this answer (headers out, body cut, so
            # nginx cannot retry it): not acknowledged, so the client sends it again, as it
            # does after an interruption (CI at 260ebc6 met this once).
            load.cut += 1
            continue
        except httpx.HTTPError as exc:
            load.failures.append(f"{sid} t{k}: {exc!r}")
            return
        if run_id is not None:
            load.acked.setdefault(sid, []).append((code, run_id))
            return
        # Interrupted with its replica (not acknowledged): the client sends it again.
    load.failures.append(f"{sid} t{k}: no success after 10 tries")


async def _last_run(c: httpx.AsyncClient, sid: str, code: str) -> str:
    runs = (await c.get(f"/v1/sessions/{sid}/runs", params={"limit": 5})).json()["data"]
    for run in runs:
        if run["input"]["content"] == code and run["status"] == "completed":
            return str(run["id"])
    raise AssertionError(f"the chat turn's run is not in {runs}")


async def _until_running(c: httpx.AsyncClient, sid: str, code: str) -> None:
    for _ in range(200):
        runs = (await c.get(f"/v1/sessions/{sid}/runs", params={"limit": 3})).json()["data"]
        if any(r["input"]["content"] == code and r["status"] == "running" for r in runs):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the long turn of {sid} never ran")


async def _kill_under_load(fleet: Fleet, c: httpx.AsyncClient, homes: dict[str, str]) -> None:
    async with _db(fleet.url) as db:
        ids = {
            row["id"].rsplit("-", 1)[1]: row["id"]
            for row in await db.fetch("SELECT id FROM replicas")
        }
    by_replica = {rid: [s for s, h in homes.items() if h == rid] for rid in ids.values()}
    dead_id = ids["r0"]
    moved = set(by_replica[dead_id])
    assert moved
    # The load: every moved session and as many others, each a loop of turns.
    stayed = [s for s in homes if s not in moved][: len(moved)]
    load, stop = Load(), asyncio.Event()

    async def worker(sid: str) -> None:
        k = 0
        while not stop.is_set():
            await _turn(c, sid, k, load)
            k += 1

    # Two moved sessions run one long turn each (20 s), surely in the middle of a cell at the kill.
    slow = sorted(moved)[:2]
    code = "import time; time.sleep(20); print(x)  # long"
    long_turns = [asyncio.create_task(_stream_turn(c, sid, code, load)) for sid in slow]
    workers = [asyncio.create_task(worker(sid)) for sid in [*moved - set(slow), *stayed]]
    await asyncio.sleep(2.0)
    for sid in slow:  # both long cells run on r0 now
        await _until_running(c, sid, code)
    async with _db(fleet.url) as db:
        where = await db.fetch(
            "SELECT replica FROM runs WHERE session_id = ANY($1) AND status = 'running'", slow
        )
    assert [r["replica"] for r in where] == [dead_id, dead_id]
    fleet.services[0].kill()  # SIGKILL: r0
    killed_at, killed_wall = time.monotonic(), datetime.now(UTC)
    # Its runs, read from the database only: interrupted within 15 s.
    async with _db(fleet.url) as db:
        while True:
            active = await db.fetchval(
                "SELECT count(*) FROM runs WHERE replica = $1 AND status IN ('queued', 'running')",
                dead_id,
            )
            left = await db.fetch(
                "SELECT pid, state, wait_event, left(query, 60) q FROM pg_stat_activity "
                "WHERE application_name = $1",
                f"agentstation:{dead_id}",
            )
            if left:  # the dead replica's backends still there (blocked in a statement)
                print(f"{time.monotonic() - killed_at:.1f} s: {len(left)} backends of r0 left")
            if not active:
                break
            assert time.monotonic() - killed_at < 15, f"{active} runs of the dead replica active"
            await asyncio.sleep(0.2)
        swept_s = time.monotonic() - killed_at
        closed = await db.fetch(
            "SELECT finished_at FROM runs WHERE replica = $1 AND stop_reason = 'replica_lost'",
            dead_id,
        )
        interrupted = [round((r["finished_at"] - killed_wall).total_seconds(), 1) for r in closed]
    await asyncio.sleep(max(0.0, 6.0 - (time.monotonic() - killed_at)))
    stop.set()
    await asyncio.gather(*workers)
    assert not load.failures, load.failures
    # The long turns' streams were cut by the kill and resumed through nginx to their end.
    assert await asyncio.gather(*long_turns) == [None, None]
    long_runs = [rid for rid, status in load.ended.items() if status == "interrupted"]
    assert len(long_runs) >= 2, load.ended
    for run_id in long_runs:
        run = (await c.get(f"/v1/runs/{run_id}")).json()
        assert (run["status"], run["stop_reason"]) == ("interrupted", "replica_lost"), run
    # One more turn for every session of the load, after it: moved ones surely ran elsewhere.
    await asyncio.gather(*(_turn(c, sid, 999, load) for sid in [*moved, *stayed]))
    assert not load.failures, load.failures
    print(
        f"fleet: {sum(map(len, load.acked.values()))} turns acknowledged, {load.retried} "
        f"retried after 503, {load.resumed} streams resumed, {load.cut} cut answers sent again, "
        f"runs interrupted at {interrupted} s, "
        f"none active {swept_s:.1f} s after the kill"
    )
    # Every acknowledged turn is stored: its run completed, its message in the memory.
    for sid, turns in load.acked.items():
        memory = (await c.get(f"/v1/sessions/{sid}/memory")).json()["memory"]
        said = [m["content"] for m in memory if m["sender"] == "user"]
        n = int(sid[1:])
        assert said[0] == f"x = {value(n)}"  # the memory from before the kill is intact
        for code, run_id in turns:
            assert code in said, (sid, code)
            assert (await c.get(f"/v1/runs/{run_id}")).json()["status"] == "completed"
    # Sessions that stayed kept their kernel: every read is their own value.
    for sid, out in load.reads:
        if sid not in moved:
            assert _reads(out, int(sid[1:])), (sid, out)
    # Each moved session's first completed turn after the kill says its kernel restarted.
    for sid in moved:
        runs = (await c.get(f"/v1/sessions/{sid}/runs", params={"limit": 100})).json()["data"]
        after = sorted(
            (r for r in runs if datetime.fromisoformat(r["created_at"]) > killed_wall
             and r["status"] == "completed"),
            key=lambda r: r["created_at"],
        )  # fmt: skip
        assert after, sid
        events = (await c.get(f"/v1/runs/{after[0]['id']}/events")).text
        assert "event: kernel.restarted" in events, (sid, events)
        assert '"reason":"replica_changed"' in events.replace(" ", ""), events
        for later in after[1:]:
            assert "kernel.restarted" not in (await c.get(f"/v1/runs/{later['id']}/events")).text


async def _drain(fleet: Fleet, c: httpx.AsyncClient, homes: dict[str, str]) -> None:
    """SIGTERM r1 while turns run on it: they finish (streams resumed elsewhere end with
    run.completed), and its sessions' next turns are served by r2 (a 503 then retried at
    most); it leaves the replicas table when it exits."""
    async with _db(fleet.url) as db:
        r1 = await db.fetchval("SELECT id FROM replicas WHERE id LIKE '%-r1'")
    mine = [sid for sid, home in homes.items() if home == r1]
    running, later = mine[:3], mine[3:6]
    assert running and later
    load = Load()
    code = "import time; time.sleep(2); print(x)  # drained"
    turns = [asyncio.create_task(_stream_turn(c, sid, code, load)) for sid in running]
    await asyncio.sleep(1.0)  # their cells run now
    service = fleet.services[1]
    assert service.proc is not None
    service.proc.terminate()
    await asyncio.sleep(0.3)
    await asyncio.gather(*(_turn(c, sid, 1000, load) for sid in later))
    done = await asyncio.gather(*turns)
    assert all(run_id is not None for run_id in done), done  # completed on the draining replica
    assert not load.failures, load.failures
    for sid, out in load.reads:
        if sid in running:
            assert _reads(out, int(sid[1:])), (sid, out)  # its own kernel, to the end
    await asyncio.to_thread(service.proc.wait, 30)
    async with _db(fleet.url) as db:
        assert await db.fetchval("SELECT count(*) FROM replicas WHERE id = $1", r1) == 0
        lost = await db.fetchval(
            "SELECT count(*) FROM runs WHERE replica = $1 AND status <> 'completed'", r1
        )
    assert lost == 0
    print(
        f"drain: {len(running)} runs finished on the draining replica, {load.resumed} streams "
        f"resumed, {load.retried} turns retried after 503"
    )


def test_sessions_stay_whole_through_nginx_and_a_killed_replica(fleet: Fleet) -> None:
    async def main() -> None:
        async with httpx.AsyncClient(base_url=fleet.nginx.url, headers=AUTH, timeout=60) as c:
            homes = await _affinity(c, fleet.url)
            await _kill_under_load(fleet, c, homes)
            await _drain(fleet, c, homes)

    try:
        asyncio.run(main())
    except BaseException:
        for service in fleet.services:
            print(f"--- replica {service.port}:\n{service.log()}")
        print(f"--- nginx:\n{fleet.nginx.error_log()}")
        raise
