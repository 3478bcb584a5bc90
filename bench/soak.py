"""Soak: many sessions, each sending turns back to back (JSON and SSE mixed) over keep-alive
connections of one client (httpx or aiohttp); every request must get an HTTP answer (zero
transport errors) and every session's memory must hold exactly its own turns (issue 20).

    python -m bench.soak --clients httpx aiohttp --databases postgres sqlite \\
        --sessions 100 --duration 20 --runs 5

``--pause 5`` stops every session halfway and resumes them all together 5 s later: their
connections, idle for just under 5 s, are reused in a burst at the clients' idle expiry (httpx's
default, 5 s), where a server that closes idle connections as soon (uvicorn's default, 5 s)
drops requests; ``--keep-alive 5`` serves with that setting to see it. tests/resilience/test_load.py
runs a short version of this in CI.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
import httpx

from bench.common import gateway_server, pct, reset_postgres_db

CLIENTS = ("httpx", "aiohttp")
DATABASES = ("postgres", "sqlite")
ECHO = [{"name": "echo", "backend": "scripted"}]
PG_SOAK_DB = "agentstation_soak"  # its own: make bench drops and recreates agentstation_bench
# What a client library raises when a request got no complete HTTP answer.
TRANSPORT_ERRORS = (httpx.TransportError, aiohttp.ClientError, TimeoutError, OSError)


@dataclass
class SoakConfig:
    """One run's shape."""

    sessions: int = 100
    duration_s: float = 20.0  # sending time, not counting the pause
    stream_every: int = 2  # every n-th turn of a session streams (SSE); 0: none (JSON only)
    pause_s: float = 0.0  # halfway, every session stops; all resume together this much later
    idle_expiry_s: float | None = None  # the client's keep-alive expiry (None: its default)
    timeout_s: float = 120.0  # a turn queued behind the others on a busy machine


@dataclass
class SoakResult:
    """What the clients saw."""

    client: str
    turns: int = 0
    streamed: int = 0
    transport_errors: list[str] = field(default_factory=list)
    http_errors: list[str] = field(default_factory=list)
    memory_errors: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        """No request went unanswered or wrong, and every memory is exact."""
        return not (self.transport_errors or self.http_errors or self.memory_errors)

    def summary(self) -> str:
        """One line for logs and docs."""
        ms = [x * 1e3 for x in self.latencies]
        return (
            f"{self.client}: {self.turns} turns ({self.streamed} SSE) in {self.elapsed_s:.1f} s "
            f"= {self.turns / max(self.elapsed_s, 1e-9):.0f}/s, latency p50 {pct(ms, 50):.0f} "
            f"p99 {pct(ms, 99):.0f} max {max(ms, default=0):.0f} ms; transport errors "
            f"{len(self.transport_errors)}, HTTP errors {len(self.http_errors)}, memory "
            f"mismatches {len(self.memory_errors)}"
        )

    def problems(self, limit: int = 20) -> str:
        """The first errors of each kind."""
        every = self.transport_errors + self.http_errors + self.memory_errors
        return "\n".join(every[:limit])


class Client(Protocol):
    """The few calls a soak makes, over one client library's connection pool."""

    async def send(self, path: str, body: dict[str, Any]) -> tuple[int, str]: ...

    async def events(self, path: str, body: dict[str, Any]) -> tuple[int, list[str], str]: ...

    async def get(self, path: str) -> tuple[int, str]: ...


class HttpxClient:
    """httpx.AsyncClient: one pool of ``sessions + 10`` keep-alive connections."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def send(self, path: str, body: dict[str, Any]) -> tuple[int, str]:
        resp = await self.http.post(path, json=body)
        return resp.status_code, resp.text

    async def events(self, path: str, body: dict[str, Any]) -> tuple[int, list[str], str]:
        async with self.http.stream("POST", path, json=body) as resp:
            if resp.status_code != 200:
                return resp.status_code, [], (await resp.aread()).decode()
            return 200, [line async for line in resp.aiter_lines()], ""

    async def get(self, path: str) -> tuple[int, str]:
        resp = await self.http.get(path)
        return resp.status_code, resp.text


class AiohttpClient:
    """aiohttp.ClientSession with a connector of ``sessions + 10`` connections."""

    def __init__(self, http: aiohttp.ClientSession) -> None:
        self.http = http

    async def send(self, path: str, body: dict[str, Any]) -> tuple[int, str]:
        async with self.http.post(path, json=body) as resp:
            return resp.status, await resp.text()

    async def events(self, path: str, body: dict[str, Any]) -> tuple[int, list[str], str]:
        async with self.http.post(path, json=body) as resp:
            if resp.status != 200:
                return resp.status, [], await resp.text()
            return 200, [raw.decode().rstrip("\r\n") async for raw in resp.content], ""

    async def get(self, path: str) -> tuple[int, str]:
        async with self.http.get(path) as resp:
            return resp.status, await resp.text()


@asynccontextmanager
async def open_client(
    name: str, base_url: str, headers: dict[str, str], cfg: SoakConfig
) -> AsyncIterator[Client]:
    """The named client library's pool, as a ``Client``."""
    size = cfg.sessions + 10
    if name == "httpx":
        expiry = 5.0 if cfg.idle_expiry_s is None else cfg.idle_expiry_s  # httpx's default
        limits = httpx.Limits(
            max_connections=size, max_keepalive_connections=size, keepalive_expiry=expiry
        )
        async with httpx.AsyncClient(
            base_url=base_url, headers=headers, limits=limits, timeout=cfg.timeout_s
        ) as hx:
            yield HttpxClient(hx)
        return
    if name != "aiohttp":
        raise ValueError(f"unknown client {name!r}: one of {CLIENTS}")
    options: dict[str, Any] = {"limit": size}
    if cfg.idle_expiry_s is not None:
        options["keepalive_timeout"] = cfg.idle_expiry_s
    timeout = aiohttp.ClientTimeout(total=cfg.timeout_s)
    async with aiohttp.ClientSession(
        base_url, headers=headers, connector=aiohttp.TCPConnector(**options), timeout=timeout
    ) as ax:
        yield AiohttpClient(ax)


def check_turn(sid: str, text: str, status: int, body: str, stream: bool) -> str | None:
    """None when the turn's answer is right, else what is wrong with it."""
    if status != 200:
        return f"{sid}: {status} {body[:300]}"
    if stream:
        events = [line[5:].strip() for line in body.splitlines() if line.startswith("data:")]
        last = json.loads(events[-1]) if events else {}
        run = last.get("run", {})
        if run.get("status") != "completed" or (run.get("output") or {}).get("content") != text:
            return f"{sid}: stream for {text!r} ended with {events[-1:]}"
        return None
    data = json.loads(body)
    if data["run"]["status"] != "completed" or data["message"]["content"] != text:
        return f"{sid}: wrong result for {text!r}: {body[:300]}"
    return None


async def session_loop(
    http: Client, sid: str, cfg: SoakConfig, start: float, result: SoakResult
) -> list[str]:
    """Turns on one session until the end of the run; returns the acknowledged ones."""
    sent: list[str] = []
    pause_at = start + cfg.duration_s / 2 if cfg.pause_s > 0 else None
    deadline = start + cfg.duration_s + cfg.pause_s
    path = f"/v1/sessions/{sid}/messages"
    while True:
        now = time.monotonic()
        if pause_at is not None and now >= pause_at:
            # Every session stops after its turn in flight, and all resume together with one
            # turn at least: their connections' idle times spread just under pause_s, and the
            # burst reuses them.
            await asyncio.sleep(max(0.0, pause_at + cfg.pause_s - now))
            pause_at = None
        elif now >= deadline:
            break
        text = f"{sid} turn {len(sent) + 1}"
        stream = cfg.stream_every > 0 and len(sent) % cfg.stream_every == cfg.stream_every - 1
        began = time.monotonic()
        try:
            if stream:
                status, lines, error = await http.events(path, {"message": text, "stream": True})
                body = error or "\n".join(lines)
            else:
                status, body = await http.send(path, {"message": text})
        except TRANSPORT_ERRORS as exc:
            at = time.monotonic() - start
            result.transport_errors.append(f"{sid} at {at:.2f} s: {type(exc).__name__}: {exc!r}")
            return sent  # the turn may or may not be stored: the memory check tells
        result.latencies.append(time.monotonic() - began)
        if (wrong := check_turn(sid, text, status, body, stream)) is not None:
            result.http_errors.append(wrong)
            return sent
        sent.append(text)
        result.turns += 1
        result.streamed += stream
    return sent


async def check_memory(http: Client, agent: str, sid: str, sent: list[str]) -> str | None:
    """The session's memory is exactly its acknowledged turns: user, reply, … in order."""
    status, body = await http.get(f"/v1/sessions/{sid}/memory")
    if status != 200:
        return f"{sid}: memory read {status} {body[:200]}"
    got = [(m["sender"], m["content"]) for m in json.loads(body)["memory"]]
    want = [pair for text in sent for pair in (("user", text), (agent, text))]
    if got == want:
        return None
    extra = " (a turn whose request failed was stored)" if got[: len(want)] == want else ""
    return f"{sid}: memory has {len(got)} entries, {len(want)} expected{extra}: {got[-2:]}"


async def soak(
    base_url: str, cfg: SoakConfig, client: str = "httpx", headers: dict[str, str] | None = None
) -> SoakResult:
    """One run: an agent on the echo model, ``cfg.sessions`` sessions, their turns, checks."""
    result = SoakResult(client)
    async with open_client(client, base_url, headers or {}, cfg) as http:
        agent = f"soak-{uuid.uuid4().hex[:8]}"
        spec = {"kind": "agent", "model": "echo"}
        status, body = await http.send("/v1/agents", {"name": agent, "spec": spec})
        if status != 201:
            raise RuntimeError(f"creating the agent: {status} {body[:300]}")

        async def new_session() -> str:
            status, body = await http.send("/v1/sessions", {"agent": agent})
            if status != 201:
                raise RuntimeError(f"creating a session: {status} {body[:300]}")
            return str(json.loads(body)["id"])

        sids = list(await asyncio.gather(*(new_session() for _ in range(cfg.sessions))))
        start = time.monotonic()
        sent = await asyncio.gather(*(session_loop(http, s, cfg, start, result) for s in sids))
        result.elapsed_s = time.monotonic() - start
        checks = await asyncio.gather(
            *(check_memory(http, agent, s, t) for s, t in zip(sids, sent, strict=True))
        )
    result.memory_errors = [c for c in checks if c is not None]
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--clients", nargs="+", choices=CLIENTS, default=list(CLIENTS))
    parser.add_argument("--databases", nargs="+", choices=DATABASES, default=list(DATABASES))
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of turns per run")
    parser.add_argument("--runs", type=int, default=5, help="runs in a row per server")
    parser.add_argument("--stream-every", type=int, default=2, help="0: JSON turns only")
    parser.add_argument("--pause", type=float, default=0.0, help="idle once, halfway (s)")
    parser.add_argument("--idle-expiry", type=float, help="clients' keep-alive expiry (s)")
    parser.add_argument("--keep-alive", type=int, help="the server's AGENTSTATION_KEEP_ALIVE_S")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Every (database, client): one server, ``--runs`` runs in a row; 1 if any failed."""
    args = parse_args(argv)
    cfg = SoakConfig(
        sessions=args.sessions,
        duration_s=args.duration,
        stream_every=args.stream_every,
        pause_s=args.pause,
        idle_expiry_s=args.idle_expiry,
    )
    env = {"AGENTSTATION_SANDBOX_ENABLED": "false"}
    if args.keep_alive is not None:
        env["AGENTSTATION_KEEP_ALIVE_S"] = str(args.keep_alive)
    failed = 0
    for database in args.databases:
        for client in args.clients:
            url = reset_postgres_db(PG_SOAK_DB) if database == "postgres" else None
            with gateway_server(f"soak-{database}", ECHO, url, **env) as server:
                for n in range(1, args.runs + 1):
                    result = asyncio.run(soak(server.base_url, cfg, client))
                    failed += not result.ok
                    print(f"{database} run {n}/{args.runs} {result.summary()}", flush=True)
                    if not result.ok:
                        print(result.problems(), flush=True)
                dropped = server.log_path.read_text(errors="replace").count("without a response")
                print(f"{database} {client}: server logged {dropped} closes without a response")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
