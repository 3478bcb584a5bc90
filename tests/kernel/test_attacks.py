"""The attack suite: hostile cells against the real L3 sandbox, checked from the host."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from agents.sandbox import KernelPool

pytestmark = pytest.mark.kernel


def host_address() -> str | None:
    """A non-loopback address of this machine (stands in for 'outside' without sending out)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET: connect() on UDP sends nothing
            address: str = probe.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


def existing(paths: list[Path]) -> list[Path]:
    """The paths that exist on the host."""
    return [p for p in paths if p.exists()]


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP server on every host address: reachable from the host, not from a sandbox."""
    server = socket.create_server(("0.0.0.0", 0))
    yield server.getsockname()[1]
    server.close()


CONNECT = """
import socket
def attempt(host, port):
    try:
        socket.create_connection((host, port), timeout=2).close()
        return "connected"
    except OSError as exc:
        return type(exc).__name__
print(attempt({host!r}, {port}))
"""


async def test_no_tcp_to_host_services(pool: KernelPool, listener: int) -> None:
    socket.create_connection(("127.0.0.1", listener), timeout=2).close()  # open from the host
    for port in (5432, listener):
        cell = await pool.execute("net", CONNECT.format(host="127.0.0.1", port=port))
        assert cell.status == "ok", cell
        assert cell.output.strip() != "connected"


async def test_no_route_outside(pool: KernelPool, listener: int) -> None:
    cell = await pool.execute("net", "import socket; print(socket.if_nameindex())")
    assert cell.output.strip() == "[(1, 'lo')]"  # no interface leads anywhere
    address = host_address()
    if address is not None:  # the machine's own outward address, with a server listening
        socket.create_connection((address, listener), timeout=2).close()
        cell = await pool.execute("net", CONNECT.format(host=address, port=listener))
        assert cell.output.strip() in ("OSError", "ConnectionRefusedError"), cell.output


SERVICE_FILE = str(Path(__file__).resolve())
READ = """
import os
for path in ["/etc/shadow", "/root", {secret!r}, {service!r}]:
    try:
        if os.path.isdir(path):
            print(path, os.listdir(path))
        else:
            print(path, open(path).read()[:20])
    except OSError as exc:
        print(path, type(exc).__name__)
"""


async def test_no_reading_host_secrets(pool: KernelPool, base_dir: Path) -> None:
    secret = base_dir / "secret.txt"
    secret.write_text("host-secret")
    service = SERVICE_FILE
    cell = await pool.execute("files", READ.format(secret=str(secret), service=service))
    lines = cell.output.splitlines()
    assert len(lines) == 4, cell
    for line in lines:
        assert line.endswith(("FileNotFoundError", "PermissionError")), line
    assert "host-secret" not in cell.output


WRITE = """
import os
for path in ["/tmp/escape.txt", "/etc/escape.txt", "/usr/escape.txt", {env!r} + "/escape.txt",
             {base!r} + "/escape.txt", "/escape.txt"]:
    try:
        with open(path, "w") as f:
            f.write("x")
        print(path, "written")
    except OSError as exc:
        print(path, type(exc).__name__)
open("inside.txt", "w").write("ok")
"""


async def test_no_writing_outside_the_workdir(pool: KernelPool, base_dir: Path) -> None:
    env = str(pool.config.kernel_env)
    cell = await pool.execute("files", WRITE.format(env=env, base=str(base_dir)))
    assert cell.status == "ok", cell
    outside = ["/tmp", "/etc", "/usr", "/", str(pool.config.kernel_env), str(base_dir)]
    assert existing([Path(d) / "escape.txt" for d in outside]) == []
    inside = pool.workdir("files") / "inside.txt"
    assert inside.read_text() == "ok"
    assert inside.stat().st_uid >= pool.config.uid_base  # written by the session's own uid
    # /tmp inside is the sandbox's own size-capped tmpfs; the host's /tmp stays untouched.
    assert "/tmp/escape.txt written" in cell.output


FORK_BOMB = """
import os, time
children = 0
try:
    for _ in range(500):
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        children += 1
except OSError as exc:
    print(type(exc).__name__)
print(children)
"""


async def test_fork_bomb_stops_short(pool: KernelPool) -> None:
    cell = await pool.execute("forks", FORK_BOMB, timeout_s=20)
    error, count = cell.output.split()
    assert error == "BlockingIOError"
    assert int(count) < pool.config.max_procs
    after = await pool.execute("forks", "print('still here')")
    assert after.output == "still here\n"
    await pool.shutdown_session("forks")


async def test_huge_allocation_fails_and_next_cell_works(pool: KernelPool) -> None:
    await pool.execute("mem", "kept = 41")
    cell = await pool.execute("mem", "big = bytearray(8 * 1024**3)")
    assert cell.status == "error"
    assert cell.ename == "MemoryError"
    after = await pool.execute("mem", "print(kept + 1)")
    assert after.output == "42\n"


async def test_infinite_loop_is_interrupted(pool: KernelPool) -> None:
    await pool.execute("loop", "kept = 'state'")
    started = time.monotonic()
    cell = await pool.execute("loop", "while True: pass")
    elapsed = time.monotonic() - started
    assert cell.status == "error" and cell.ename == "TimeoutError"
    assert elapsed < pool.config.timeout_s + pool.config.interrupt_grace_s + 1
    after = await pool.execute("loop", "print(kept)")
    assert after.output == "state\n"  # an interrupt keeps the kernel


async def test_uninterruptible_loop_restarts_the_sandbox(pool: KernelPool) -> None:
    await pool.execute("stuck", "open('kept.txt', 'w').write('file'); lost = 1")
    code = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass"
    started = time.monotonic()
    cell = await pool.execute("stuck", code)
    elapsed = time.monotonic() - started
    assert cell.status == "timeout"
    assert "restarted" in " ".join(cell.notes)
    assert elapsed < pool.config.timeout_s + pool.config.interrupt_grace_s + 2
    after = await pool.execute("stuck", "print(open('kept.txt').read(), 'lost' in dir())")
    assert after.output == "file False\n"  # fresh kernel, same work dir


SIGNALS = """
import os, signal
for target in (os.getppid(), 1, -1, {service}):
    try:
        os.kill(target, signal.SIGKILL)
        print(target, "sent")
    except OSError as exc:
        print(target, type(exc).__name__)
"""


async def test_signals_do_not_reach_the_service(pool: KernelPool) -> None:
    await pool.execute("bystander", "x = 'untouched'")
    await pool.execute("killer", SIGNALS.format(service=os.getpid()))
    assert psutil.pid_exists(os.getpid())
    bystander = await pool.execute("bystander", "print(x)")
    assert bystander.output == "untouched\n"
    after = await pool.execute("killer", "print('next')")
    assert after.output == "next\n"


async def test_huge_print_is_truncated_and_memory_bounded(pool: KernelPool) -> None:
    process = psutil.Process()
    await pool.execute("flood", "print('warm')")
    before = process.memory_info().rss
    cell = await pool.execute("flood", "print('x' * 200_000_000)", timeout_s=30)
    assert cell.truncated and "output truncated" in cell.notes[0]
    assert cell.output == "x" * pool.config.output_bytes  # the first part, then the note
    # Around the kernel-side cap: one 200 MB message; zmq drops it unread.
    bypass = "import sys; type(sys.stdout).write(sys.stdout, 'y' * 200_000_000); sys.stdout.flush()"
    cell = await pool.execute("flood", bypass, timeout_s=30)
    assert len(cell.output.encode()) <= pool.config.output_bytes
    assert cell.truncated or cell.status != "ok"
    growth = process.memory_info().rss - before
    assert growth < 64 << 20, f"service grew by {growth >> 20} MiB"
    many = await pool.execute("flood", "for _ in range(5000): print('z' * 100)")
    assert many.truncated and "output truncated" in many.notes[0]
    assert len(many.output.encode()) == pool.config.output_bytes
    after = await pool.execute("flood", "print('fine')")
    assert after.output == "fine\n"


async def test_sessions_are_isolated(pool: KernelPool) -> None:
    await pool.execute("alice", "secret = 'alice-only'; open('alice.txt', 'w').write('a')")
    alice_dir = str(pool.workdir("alice"))
    code = f"import os; print('secret' in dir(), os.listdir('.'), os.path.exists({alice_dir!r}))"
    cell = await pool.execute("bob", code)
    assert cell.output == "False [] False\n"
    uids = [
        (await pool.execute(s, "import os; print(os.getuid())")).output for s in ("alice", "bob")
    ]
    assert uids[0] != uids[1]


async def test_no_service_environment_inside(pool: KernelPool) -> None:
    cell = await pool.execute("env", "import os; print(sorted(os.environ))")
    assert "AGENTSTATION_TEST_SERVICE_SECRET" not in cell.output
    assert "AGENTSTATION_TEST_DATABASE_URL" not in cell.output


FILL = """
for i in range({n}):
    with open(f"blob{{i}}.bin", "wb") as f:
        f.write(b"0" * {size})
"""


async def test_filling_the_workdir_is_reported(pool: KernelPool) -> None:
    mib = 1 << 20
    files = pool.config.workdir_bytes // pool.config.max_file_bytes + 1
    code = FILL.format(n=files, size=pool.config.max_file_bytes)
    cell = await pool.execute("disk", code, timeout_s=20)
    assert cell.status == "error" and cell.ename == "DiskQuotaExceeded"
    too_big = await pool.execute("disk", f"open('huge.bin', 'wb').write(b'0' * {65 * mib})")
    assert too_big.status == "error"  # RLIMIT_FSIZE: no single file over the limit
    assert not (pool.workdir("disk") / "huge.bin").stat().st_size > pool.config.max_file_bytes
    await pool.shutdown_session("disk", remove_files=True)
