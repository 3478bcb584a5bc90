"""Load: 200 concurrent sessions for 60 s on the scripted model against PostgreSQL (live
service) — zero errors, and every session's memory holds exactly its own messages, in order."""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.resilience.procs import AUTH, Service

pytestmark = [pytest.mark.slow, pytest.mark.live, pytest.mark.postgres]

SESSIONS = 200
DURATION_S = float(os.environ.get("RESILIENCE_LOAD_S", "60"))
STREAM_EVERY = 2  # every 2nd message streams (SSE), the others wait for the JSON result


@dataclass
class Tally:
    """What the clients saw."""

    runs: int = 0
    streamed: int = 0
    errors: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)


async def send_json(http: aiohttp.ClientSession, sid: str, text: str) -> str | None:
    """One non-streamed message; None when the reply is right, else what went wrong."""
    url = f"/v1/sessions/{sid}/messages"
    async with http.post(url, json={"message": text}) as resp:
        body = await resp.text()
    if resp.status != 200:
        return f"{sid}: {resp.status} {body[:300]}"
    data = json.loads(body)
    if data["run"]["status"] != "completed" or data["message"]["content"] != text:
        return f"{sid}: wrong result for {text!r}: {body[:300]}"
    return None


async def send_stream(http: aiohttp.ClientSession, sid: str, text: str) -> str | None:
    """One streamed message, read to the end of the event stream."""
    url = f"/v1/sessions/{sid}/messages"
    events: list[tuple[str, Any]] = []
    async with http.post(url, json={"message": text, "stream": True}) as resp:
        if resp.status != 200:
            return f"{sid}: {resp.status} {(await resp.text())[:300]}"
        event = ""
        async for raw in resp.content:
            line = raw.decode().rstrip("\r\n")
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                events.append((event, json.loads(line[5:])))
    kinds = [k for k, _ in events]
    if not kinds or kinds[-1] != "run.completed":
        return f"{sid}: stream for {text!r} ended with {kinds[-3:]}"
    replies = [d["message"]["content"] for k, d in events if k == "message"]
    if replies[-1:] != [text]:
        return f"{sid}: streamed reply {replies!r} for {text!r}"
    return None


async def client(http: aiohttp.ClientSession, sid: str, deadline: float, tally: Tally) -> list[str]:
    """Send messages to one session until the deadline; returns what it sent, in order."""
    sent: list[str] = []
    while time.monotonic() < deadline:
        text = f"{sid} message {len(sent) + 1}"
        stream = len(sent) % STREAM_EVERY == STREAM_EVERY - 1
        start = time.monotonic()
        try:
            error = await (send_stream if stream else send_json)(http, sid, text)
        except (aiohttp.ClientError, TimeoutError) as exc:
            error = f"{sid}: {type(exc).__name__}: {exc}"
        tally.latencies.append(time.monotonic() - start)
        if error is not None:
            tally.errors.append(error)
            # The turn may still have landed; the memory check below needs to know.
            await asyncio.sleep(0.5)
            break
        sent.append(text)
        tally.runs += 1
        tally.streamed += stream
    return sent


async def check_memory(http: aiohttp.ClientSession, sid: str, sent: list[str]) -> str | None:
    """The session's memory is exactly its own turns: user, reply, user, reply… in order."""
    async with http.get(f"/v1/sessions/{sid}/memory") as resp:
        memory = (await resp.json())["memory"]
    got = [(m["sender"], m["content"]) for m in memory]
    want = [pair for text in sent for pair in (("user", text), ("bot", text))]
    if got != want:
        return f"{sid}: memory has {len(got)} entries, expected {len(want)}: {got[:4]}…"
    return None


async def run_load(base_url: str) -> tuple[Tally, list[str]]:
    """Create the sessions, run the clients, then check every memory."""
    connector = aiohttp.TCPConnector(limit=SESSIONS + 10)
    timeout = aiohttp.ClientTimeout(total=120)  # queueing behind 200 sessions on 2 cores
    async with aiohttp.ClientSession(
        base_url, headers=AUTH, connector=connector, timeout=timeout
    ) as http:
        spec = {"kind": "agent", "model": "echo"}
        async with http.post("/v1/agents", json={"name": "bot", "spec": spec}) as resp:
            assert resp.status == 201, await resp.text()

        async def new_session() -> str:
            async with http.post("/v1/sessions", json={"agent": "bot"}) as resp:
                assert resp.status == 201, await resp.text()
                return str((await resp.json())["id"])

        sids = list(await asyncio.gather(*(new_session() for _ in range(SESSIONS))))
        tally = Tally()
        deadline = time.monotonic() + DURATION_S
        sent = await asyncio.gather(*(client(http, sid, deadline, tally) for sid in sids))
        checks = await asyncio.gather(
            *(check_memory(http, s, m) for s, m in zip(sids, sent, strict=True))
        )
    return tally, [c for c in checks if c is not None]


def test_200_sessions_for_60_seconds(shared_pg_url: str, tmp_path: Path) -> None:
    service = Service(shared_pg_url, tmp_path).start()
    try:
        started = time.monotonic()
        tally, memory_errors = asyncio.run(run_load(service.url))
        elapsed = time.monotonic() - started
    finally:
        service.stop()
    lat = sorted(tally.latencies) or [0.0]
    print(
        f"load: {SESSIONS} sessions, {tally.runs} runs ({tally.streamed} streamed) in "
        f"{elapsed:.0f}s = {tally.runs / elapsed:.1f} runs/s; latency p50 "
        f"{lat[len(lat) // 2]:.2f}s p99 {lat[int(len(lat) * 0.99)]:.2f}s max {lat[-1]:.2f}s"
    )
    assert tally.errors == [], "\n".join(tally.errors[:20]) + "\n" + service.log()[-2000:]
    assert memory_errors == [], "\n".join(memory_errors[:20])
    # Every session really worked concurrently, for the whole time, and some runs streamed.
    assert tally.runs >= SESSIONS * 2 and tally.streamed >= SESSIONS, tally.runs
