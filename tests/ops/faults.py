"""Fault-test helpers: the service as a child process (PostgreSQL: tests.resilience.procs)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tests.resilience.procs import free_port

ROOT = Path(__file__).resolve().parents[2]


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
