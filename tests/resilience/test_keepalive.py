"""Idle keep-alive connections (issue 20): the server keeps them open longer than clients do,
and a request that arrives as it closes one is logged, never dropped silently."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import aiohttp
import httpx
import pytest

from app.ops.config import OpsSettings
from tests.resilience.procs import Service, wait_until

REQUEST = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def test_default_keep_alive_outlasts_the_clients_idle_expiry() -> None:
    """Clients must retire an idle connection before the server closes it: uvicorn's 5 s
    equalled httpx's 5 s, and requests sent on a connection being closed got no response."""

    async def aiohttp_expiry() -> float:
        connector = aiohttp.TCPConnector()
        try:
            return float(connector._keepalive_timeout)  # no public accessor
        finally:
            await connector.close()

    server = OpsSettings.model_fields["keep_alive_s"].default
    assert server > httpx.Limits(max_connections=None).keepalive_expiry  # 5 s
    assert server > asyncio.run(aiohttp_expiry())  # 15 s
    assert server > 60  # nginx's upstream keepalive_timeout, AWS ALB's idle timeout


def read_response(sock: socket.socket) -> bytes:
    """One whole response (headers and a Content-Length body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, f"closed mid-response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        body += sock.recv(4096)
    return head


@pytest.mark.live
def test_idle_close_and_a_request_that_came_too_late(tmp_path: Path) -> None:
    service = Service(f"sqlite+aiosqlite:///{tmp_path}/ka.db", tmp_path)
    service.env["AGENTSTATION_KEEP_ALIVE_S"] = "1"
    service.start()
    try:
        with socket.create_connection(("127.0.0.1", service.port), timeout=10) as sock:
            sock.sendall(REQUEST)
            assert read_response(sock).startswith(b"HTTP/1.1 200")
            idle_from = time.monotonic()
            assert sock.recv(1) == b""  # the server's FIN: it closed the idle connection
            assert 0.8 < time.monotonic() - idle_from < 4  # after AGENTSTATION_KEEP_ALIVE_S
            # A request sent now, as a client whose idle expiry is too long would: no response,
            # and the connection is closed, not reset (the client knows it was not processed).
            sock.sendall(REQUEST)
            assert sock.recv(4096) == b""
        wait_until(lambda: "without a response" in service.log(), 10, "the server's warning")
    finally:
        service.stop()
    line = next(x for x in service.log().splitlines() if "without a response" in x)
    assert "WARNING" in line and "keep-alive" in line, line
