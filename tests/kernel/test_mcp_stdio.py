"""A stdio MCP server (written with the official SDK) runs inside the session's sandbox: it
answers over stdin/stdout, and it cannot open a network connection or read outside its work
dir, checked like the kernel attack tests."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from agents.actions.base import current_session_id
from agents.actions.mcp import MCPToolkit
from agents.actions.mcp_conn import CONNECTIONS
from agents.sandbox import KernelPool

pytestmark = pytest.mark.kernel
SERVER = Path(__file__).parents[1] / "agents" / "mcp_server.py"
SESSION = "tenant:mcp-stdio"


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP server on every host address: reachable from the host, not from a sandbox."""
    server = socket.create_server(("0.0.0.0", 0))
    yield server.getsockname()[1]
    server.close()


@pytest.fixture
async def tools(pool: KernelPool) -> AsyncIterator[MCPToolkit]:
    inside = pool.save_file(SESSION, "mcp_server.py", SERVER.read_bytes())
    toolkit = MCPToolkit(command=["python", inside, "stdio"], launch=pool.stdio_launch,
                         timeout_s=20)  # fmt: skip
    token = current_session_id.set(SESSION)
    try:
        yield toolkit
    finally:
        current_session_id.reset(token)
        await CONNECTIONS.close_session(SESSION)


async def test_stdio_server_answers_from_inside_the_sandbox(
    tools: MCPToolkit, listener: int, base_dir: Path
) -> None:
    added = await tools.acall({"a": 2, "b": 40}, "add")
    assert added.result == [{"type": "text", "content": "42"}], added
    secret = base_dir / "mcp-secret.txt"
    secret.write_text("host-secret")
    socket.create_connection(("127.0.0.1", listener), timeout=2).close()  # open from the host
    for host, port, path in [
        ("127.0.0.1", listener, str(secret)),
        ("127.0.0.1", 5432, "/etc/shadow"),
        ("127.0.0.1", 5432, "/root/.bashrc"),
    ]:
        probe = await tools.acall({"host": host, "port": port, "path": path}, "probe")
        text = probe.result[0]["content"] if probe.result else probe.errmsg
        assert "network: blocked" in text, text
        assert "file: blocked" in text, text
        assert "cwd: /workspace" in text, text  # its work dir is the session's


async def test_stdio_server_runs_under_the_kernels_cgroup_limits(
    tools: MCPToolkit, pool: KernelPool
) -> None:
    """The server joins a cgroup with the kernels' memory and process limits before it
    starts (where cgroups are writable: CI runs as root), and the group goes with the
    session."""
    from agents.sandbox import cgroups

    if not cgroups.parents():
        pytest.skip("no writable cgroup hierarchy on this machine")
    answer = await tools.acall({"a": 1, "b": 2}, "add")  # the server is up
    assert answer.result, answer.errmsg
    (group,) = pool._stdio_groups[SESSION]
    assert group.pids()  # the server (and whatever it starts) is in the group
    limits = {
        name: (d / name).read_text().strip()
        for d in group.dirs
        for name in ("memory.limit_in_bytes", "memory.max", "pids.max")
        if (d / name).exists()
    }
    memory = limits.get("memory.max") or limits.get("memory.limit_in_bytes")
    assert memory == str(pool.config.memory_bytes), limits
    assert limits["pids.max"] == str(pool.config.max_procs), limits
    await CONNECTIONS.close_session(SESSION)
    await pool.shutdown_session(SESSION)
    assert SESSION not in pool._stdio_groups
    assert not any(d.exists() for d in group.dirs)
