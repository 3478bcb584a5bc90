"""A small MCP server written with the official SDK, for the MCP tool tests.

``python mcp_server.py http PORT`` serves streamable HTTP on 127.0.0.1:PORT (path /mcp);
``python mcp_server.py stdio`` speaks over stdin/stdout (run inside the sandbox by the tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("test-tools")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def shout(text: str) -> str:
    """The text in capitals."""
    return text.upper()


@server.tool()
def fail(reason: str) -> str:
    """Always fails, with the reason."""
    raise ValueError(reason)


@server.tool()
async def hang() -> str:
    """Never answers."""
    await asyncio.sleep(3600)
    return "late"


@server.tool()
def probe(host: str, port: int, path: str) -> str:
    """What this process can reach: a TCP connection and a file outside its work dir."""
    outcome = []
    try:
        socket.create_connection((host, port), timeout=2).close()
        outcome.append("network: connected")
    except OSError as exc:
        outcome.append(f"network: blocked ({type(exc).__name__})")
    try:
        Path(path).read_text()
        outcome.append("file: read")
    except OSError as exc:
        outcome.append(f"file: blocked ({type(exc).__name__})")
    outcome.append(f"cwd: {Path.cwd()}")
    return "; ".join(outcome)


@server.tool()
def trace_context(ctx: Context) -> str:
    """The request's ``_meta`` as JSON (where a client puts the trace context)."""
    meta = ctx.request_context.meta
    return json.dumps(meta.model_dump() if hasattr(meta, "model_dump") else meta or {})


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def serve_http(timeout: float = 30) -> Iterator[str]:
    """This server over streamable HTTP in its own process; yields its URL."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, __file__, "http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"MCP server exited with {proc.returncode}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("MCP server did not start") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    if sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
