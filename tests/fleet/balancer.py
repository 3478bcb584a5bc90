"""nginx started from the shipped config (deploy/nginx/nginx.conf) in a temp dir: the test
writes only ``upstreams.conf`` and ``listen.conf`` next to a copy of it, as an operator does."""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import httpx

from tests.resilience.procs import free_port, wait_until

SHIPPED = Path(__file__).resolve().parents[2] / "deploy" / "nginx" / "nginx.conf"


def nginx_binary() -> str:
    """The Debian package's nginx (scripts/install.sh installs it)."""
    found = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin")
    if found is None:
        raise AssertionError("nginx is not installed (scripts/install.sh: apt-get install nginx)")
    return found


class Nginx:
    """The shipped config over ``upstreams`` (host:port), listening on a free loopback port."""

    def __init__(self, upstreams: list[str]) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="agentstation-nginx-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        shutil.copy(SHIPPED, self.dir / "nginx.conf")
        lines = [f"server {u} max_fails=1 fail_timeout=5s;" for u in upstreams]
        (self.dir / "upstreams.conf").write_text("\n".join(lines) + "\n")
        (self.dir / "listen.conf").write_text(f"listen 127.0.0.1:{self.port};\n")
        self.proc: subprocess.Popen[bytes] | None = None

    def _cmd(self, *extra: str) -> list[str]:
        conf = str(self.dir / "nginx.conf")
        # -e: the start-up error log under the prefix too (not /var/log/nginx).
        return [nginx_binary(), "-p", f"{self.dir}/", "-c", conf, "-e", "error.log", *extra]

    def start(self) -> Nginx:
        check = subprocess.run(self._cmd("-t"), capture_output=True, text=True, check=False)
        assert check.returncode == 0, check.stderr
        self.proc = subprocess.Popen(
            self._cmd("-g", "daemon off;"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_until(lambda: httpx.get(f"{self.url}/healthz", timeout=1), 10, "nginx to listen")
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # graceful: workers finish their requests
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)

    def error_log(self) -> str:
        path = self.dir / "error.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""
