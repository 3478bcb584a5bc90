"""Processes the fault and load tests break: the service (``agentstation serve`` in a child
process, so it can be SIGKILLed) and a private, throw-away PostgreSQL cluster."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from tests.app.conftest import KEY_A, KEY_B, MODELS

AUTH = {"Authorization": f"Bearer {KEY_A}"}


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until(check: Any, timeout: float, what: str, interval: float = 0.05) -> Any:
    """Poll ``check()`` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(httpx.HTTPError, OSError):
            value = check()
            if value:
                return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class Service:
    """``agentstation serve`` on a free port, as a child process with its own log file."""

    def __init__(
        self, database_url: str, log_dir: Path, models: list[dict[str, Any]] | None = None
    ):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / f"service-{self.port}.log"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTSTATION_")}
        self.env.update(
            AGENTSTATION_DATABASE_URL=database_url,
            AGENTSTATION_MODELS=json.dumps(models or MODELS),
            AGENTSTATION_API_KEYS=f"a:{KEY_A},b:{KEY_B}",
            AGENTSTATION_SANDBOX_ENABLED="false",
            AGENTSTATION_EVENT_FLUSH_S="0.05",
            AGENTSTATION_LOG_LEVEL="WARNING",
        )
        # The service runs this checkout's code, not the one the shared venv's editable
        # install points at (a git worktree of the repository).
        root = str(Path(__file__).resolve().parents[2])
        self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, self.env.get("PYTHONPATH")]))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60) -> Service:
        """Start it and wait for /healthz."""
        cli = Path(sys.executable).parent / "agentstation"
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [str(cli), "serve", "--port", str(self.port)],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

        def up() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"service exited {self.proc.returncode}:\n{self.log()}")
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200

        wait_until(up, timeout, "the service to start")
        return self

    def kill(self) -> None:
        """SIGKILL: no shutdown hook runs."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it lingers."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.kill()

    def log(self) -> str:
        """The last lines the service wrote."""
        return self.log_path.read_text(errors="replace")[-4000:]

    def client(self, **kwargs: Any) -> httpx.Client:
        """Tenant ``a``'s client."""
        return httpx.Client(base_url=self.url, headers=AUTH, **kwargs)


@contextlib.contextmanager
def running(service: Service) -> Iterator[Service]:
    """The service, started, and stopped at the end of the block."""
    try:
        yield service.start()
    finally:
        service.stop()


def _pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise AssertionError(f"PostgreSQL's {name} is not installed under /usr/lib/postgresql")
    return found[-1]


class PrivatePostgres:
    """A throw-away PostgreSQL cluster in a temp dir on a free port (trust auth), run as the
    ``postgres`` OS user when we are root (initdb refuses root). Never the shared server."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="agentstation-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.url = f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str, timeout: float = 60) -> None:
        cmd = list(args)
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}")

    def init(self) -> PrivatePostgres:
        """initdb and start."""
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        self._run(_pg_bin("initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "-N")
        self.start()
        return self

    def start(self) -> None:
        """Start the cluster and wait until it accepts connections."""
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = str(self.dir / "postgres.log")
        self._run(_pg_bin("pg_ctl"), "-D", str(self.data), "-o", options, "-l", log, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop it (``fast`` disconnects every client, as a restart does)."""
        self._run(_pg_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def destroy(self) -> None:
        """Stop it if running and remove every file."""
        with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
            self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)
