"""Fault-test helpers: a private PostgreSQL cluster we may stop, and the service as a process."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if found:
        return found[-1]
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"PostgreSQL's {name} is not installed")
    return path


class PrivatePostgres:
    """A throw-away PostgreSQL cluster on its own port (the shared one is never touched)."""

    def __init__(self) -> None:
        # Outside pytest's 0700 tmp dirs: the server runs as the postgres user when we are root.
        self.dir = Path(tempfile.mkdtemp(prefix="agentstation-pg-", dir="/tmp"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.as_postgres = os.geteuid() == 0
        if self.as_postgres:
            os.chmod(self.dir, 0o755)
            shutil.chown(self.dir, "postgres", "postgres")
        self._run(_pg_bin("initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres")

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of its ``postgres`` database."""
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *cmd: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if self.as_postgres else []
        subprocess.run([*prefix, *cmd], check=True, capture_output=True, timeout=60)

    def start(self) -> None:
        """Start and wait until it accepts connections."""
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = str(self.dir / "server.log")
        self._run(_pg_bin("pg_ctl"), "-D", str(self.data), "-o", options, "-l", log, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop it (``fast`` ends every session, like a restart does)."""
        self._run(_pg_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def destroy(self) -> None:
        """Stop if running and delete the cluster."""
        try:
            self.stop("immediate")
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


class ServiceProcess:
    """``agentstation serve`` in a child process with the given environment."""

    def __init__(self, env: dict[str, str]) -> None:
        self.port = free_port()
        self.env = {**os.environ, **env, "AGENTSTATION_PORT": str(self.port)}
        self.env.setdefault("AGENTSTATION_HOST", "127.0.0.1")
        self.proc: subprocess.Popen[bytes] | None = None
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log = Path(tempfile.mkstemp(prefix="agentstation-svc-", suffix=".log")[1])

    def start(self, timeout_s: float = 60.0) -> None:
        """Start and wait until ``/healthz`` answers."""
        code = "import sys; from app.cli import main; sys.exit(main())"
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", code, "serve"],
                cwd=ROOT,
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"service exited: {self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.base_url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("service did not start")

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        """SIGTERM and wait (SIGKILL after 15 s); removes the log."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.unlink(missing_ok=True)
