"""Shared harness: live servers in subprocesses, result records, goals.

A benchmark module exposes ``NAME`` and ``run(opts: BenchOptions) -> BenchResult``; modules
without ``run`` but with ``main`` are run by ``python -m bench`` as ``python -m bench.<name>``.
Every server is a subprocess bound to 127.0.0.1 on a free port; a benchmark skips (with the
reason in its result) when a piece it needs is missing.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "bench"
RESULTS_DIR = BENCH_DIR / "results"
VENV_BIN = Path(sys.executable).parent
HOST = "127.0.0.1"
PG_ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
PG_BENCH_DB = "agentstation_bench"
PG_BENCH_URL = f"postgresql+asyncpg://postgres@127.0.0.1:5432/{PG_BENCH_DB}"
OLD = "-old"  # suffix of a target served by the baseline tree in a side-by-side run


class Skip(Exception):
    """A benchmark cannot run here; the message says what is missing."""


@dataclass
class BenchOptions:
    """Knobs shared by all benchmarks; ``quick`` shrinks every run to a smoke test."""

    quick: bool = False
    duration_s: float = 3.0
    rounds: int = 2
    connections: int = 32
    generator: str = "auto"  # "wrk" | "aiohttp" | "auto" (wrk when installed)
    # Another checkout (e.g. ``git worktree add /tmp/base <commit>``) whose gateway runs side
    # by side with this tree's, in the same rounds: its targets are named ``<target>-old``.
    baseline: Path | None = None

    def dur(self, full: float | None = None) -> float:
        """Seconds for one load run."""
        return 0.5 if self.quick else (full or self.duration_s)


@dataclass
class Goal:
    """One performance goal from the issue and whether this run met it."""

    name: str
    target: str
    measured: str
    met: bool | None  # None: not measured
    margin: str = ""


@dataclass
class BenchResult:
    """What one benchmark measured: table rows, goals, notes, plots."""

    name: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    goals: list[Goal] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)
    skipped: str | None = None
    elapsed_s: float = 0.0
    output: str | None = None  # raw output of a module run as a script
    # With a baseline: one row per figure, this tree's value, the baseline's, and new/old.
    sidebyside: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form, with the machine and the command, for bench/results/."""
        data = asdict(self)
        data["machine"] = machine_description()
        data["command"] = " ".join(["python", "-m", "bench", *sys.argv[1:]])
        data["timestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        return data


def machine_description() -> str:
    """One line: CPU model, cores, memory, OS, Python."""
    cpu = platform.processor() or "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = ""
    with contextlib.suppress(OSError, ValueError, IndexError):
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 1024 / 1024:.0f} GiB RAM"
    return (
        f"{cpu}, {os.cpu_count()} cores{mem}, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def http_get_status(url: str, timeout: float = 2.0) -> int | None:
    """The status of GET url, or None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (OSError, ValueError):
        return None


class ServerProcess:
    """A server in a subprocess, bound to 127.0.0.1:port, ready when ``ready_path`` says 200."""

    def __init__(
        self,
        name: str,
        cmd: Sequence[str],
        port: int,
        env: dict[str, str] | None = None,
        ready_path: str = "/healthz",
        ready_timeout_s: float = 60.0,
        cwd: Path | None = None,
    ) -> None:
        self.name, self.cmd, self.port = name, list(cmd), port
        self.env = {**os.environ, **(env or {})}
        self.ready_path, self.ready_timeout_s = ready_path, ready_timeout_s
        self.cwd = cwd or ROOT
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_dir = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
        self.log_path = self._log_dir / "server.log"

    def _profile(self) -> None:
        """With ``BENCH_PYSPY_DIR`` set: py-spy samples this server (from now until it exits)
        into ``<dir>/<name>-<pid>.raw`` (collapsed stacks; bench/README.md, "Profiling")."""
        out = os.environ.get("BENCH_PYSPY_DIR")
        if not out or self.proc is None:
            return
        Path(out).mkdir(parents=True, exist_ok=True)
        raw = Path(out) / f"{self.name}-{self.proc.pid}.raw"
        cmd = [str(VENV_BIN / "py-spy"), "record", "--pid", str(self.proc.pid), "--rate", "100"]
        subprocess.Popen(
            [*cmd, "--format", "raw", "--nonblocking", "-o", str(raw)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> ServerProcess:
        """Start the process and wait until it is ready; raise with the log tail if not."""
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                self.cmd, env=self.env, cwd=self.cwd, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                raise RuntimeError(f"{self.name} exited ({code}):\n{self.log_tail()}")
            if http_get_status(self.base_url + self.ready_path, timeout=1.0) == 200:
                self._profile()
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.name} not ready in {self.ready_timeout_s}s:\n{self.log_tail()}")

    def cpu_seconds(self) -> float:
        """User + system CPU the server process has used so far (Linux /proc)."""
        if self.proc is None:
            return 0.0
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def log_tail(self, lines: int = 30) -> str:
        """The last lines the server printed."""
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self) -> None:
        """SIGINT (uvicorn's graceful stop), then SIGKILL after 10 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        shutil.rmtree(self._log_dir, ignore_errors=True)


def uvicorn_server(name: str, app: str, port: int | None = None, **kw: Any) -> ServerProcess:
    """One uvicorn worker (uvloop + httptools, no access log) serving ``module:app``."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "uvicorn", app, "--host", HOST, "--port", str(port)]
    cmd += ["--loop", "uvloop", "--http", "httptools", "--no-access-log", "--log-level", "warning"]
    return ServerProcess(name, cmd, port, **kw)


def gateway_available() -> str | None:
    """None when the gateway can be served here, else why not."""
    if not (VENV_BIN / "agentstation").exists():
        return "no agentstation CLI in the venv"
    try:
        import app.main  # noqa: F401
    except Exception as exc:  # the gateway is optional for the harness itself
        return f"app.main does not import: {exc!r}"
    return None


def gateway_server(
    name: str,
    models: list[dict[str, Any]],
    database_url: str | None = None,
    *,
    tree: Path | str | None = None,
    **env: str,
) -> ServerProcess:
    """``agentstation serve`` on a free port with these models and database (temp SQLite).

    ``tree``: another checkout whose ``app`` and ``agents`` serve instead of this tree's (its
    root first on PYTHONPATH, and the working directory): the baseline of a side-by-side run.
    The venv (its packages and the ``agentstation`` script, ``app.cli:main``) is shared.
    """
    reason = gateway_available()
    if reason:
        raise Skip(f"gateway: {reason}")
    root = ROOT if tree is None else Path(tree)
    port = free_port()
    if database_url is None:
        db_dir = tempfile.mkdtemp(prefix="bench-db-")
        database_url = f"sqlite+aiosqlite:///{db_dir}/bench.db"
    full_env = {
        "AGENTSTATION_HOST": HOST,
        "AGENTSTATION_PORT": str(port),
        "AGENTSTATION_DATABASE_URL": database_url,
        "AGENTSTATION_MODELS": json.dumps(models),
        "AGENTSTATION_LOG_LEVEL": "warning",
        **env,
    }
    if tree is not None:
        full_env["PYTHONPATH"] = str(root)
    elif "PYTHONPATH" not in env:
        # This tree first: the venv's editable install names one checkout (the one that ran
        # ``pip install -e``), which a worktree sharing the venv is not.
        inherited = os.environ.get("PYTHONPATH")
        full_env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *([inherited] if inherited else [])])
    cmd = [str(VENV_BIN / "agentstation"), "serve"]
    return ServerProcess(name, cmd, port, env=full_env, ready_path="/readyz", cwd=root)


def baseline_tree(path: Path | str) -> Path:
    """The resolved root of a baseline checkout; raise ValueError when it has no ``app``."""
    tree = Path(path).resolve()
    if not (tree / "app" / "__init__.py").exists() or not (tree / "migrations").is_dir():
        raise ValueError(f"{tree} is not a checkout of this project (no app/ or migrations/)")
    return tree


def pg_db_name(name: str, tree: Path | None) -> str:
    """The bench database of this tree (``name``) or of a baseline tree (``name_base``)."""
    return name if tree is None else f"{name}_base"


def ratio(new: Any, old: Any, digits: int = 3) -> float | None:
    """new / old when both are numbers and old is not 0, else None."""
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (new, old))
    if not numbers or not old or math.isnan(old) or math.isnan(new):
        return None
    return round(float(new) / float(old), digits)


def compare_row(what: str, figure: str, new: Any, old: Any) -> dict[str, Any]:
    """One side-by-side row: a figure of this tree and of the baseline, new/old, and new − old
    (the one to read for a figure near 0, such as an added latency)."""
    diff = None
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in (new, old)):
        diff = round(new - old, 3)
    row = {"what": what, "figure": figure, "new": new, "old": old}
    return row | {"new/old": ratio(new, old), "new-old": diff}


def compare(
    rows: Sequence[dict[str, Any]], key: str, figures: Sequence[str], suffix: str = OLD
) -> list[dict[str, Any]]:
    """Side-by-side rows for table rows whose ``key`` names a target and ``<target>-old``
    its baseline twin: for each such pair and each figure both have, new, old, new/old."""
    by_key = {str(r[key]): r for r in rows}
    out = []
    for name, row in by_key.items():
        twin = by_key.get(name + suffix)
        if name.endswith(suffix) or twin is None:
            continue
        for fig in figures:
            if row.get(fig) is not None and twin.get(fig) is not None:
                out.append(compare_row(name, fig, row[fig], twin[fig]))
    return out


def run_in_tree(module: str, opts: BenchOptions, tree: Path | None) -> BenchResult:
    """``bench.<module>.run(opts)`` in a subprocess whose ``app`` and ``agents`` come from
    ``tree`` (this tree's when None) and ``bench`` from this tree: for benchmarks that run the
    project's code in their own process (the sandbox), side by side with a baseline."""
    code = (
        "import json, sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "import agents, app  # noqa: F401  (resolved from the tree first)\n"
        "for pkg in (agents, app):\n"
        "    assert pkg.__file__.startswith(sys.argv[1]), (pkg.__file__, sys.argv[1])\n"
        "sys.path.insert(0, sys.argv[2])\n"
        "import dataclasses, importlib\n"
        "from bench.common import BenchOptions\n"
        "mod = importlib.import_module('bench.' + sys.argv[3])\n"
        "res = mod.run(BenchOptions(**json.loads(sys.argv[4])))\n"
        "print('BENCHJSON ' + json.dumps(dataclasses.asdict(res), default=str))\n"
    )
    args = json.dumps({**asdict(opts), "baseline": None})
    where = tree or ROOT
    done = subprocess.run(
        [sys.executable, "-c", code, str(where), str(ROOT), module, args],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=600,
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith("BENCHJSON ")), None)
    if done.returncode != 0 or line is None:
        tail = (done.stdout + done.stderr)[-800:]
        raise RuntimeError(f"bench.{module} in {where} exited {done.returncode}: {tail}")
    data = json.loads(line.removeprefix("BENCHJSON "))
    res = BenchResult(**{k: v for k, v in data.items() if k != "goals"})
    res.goals = [Goal(**g) for g in data["goals"]]
    return res


def reset_postgres_db(name: str = PG_BENCH_DB, tree: Path | None = None) -> str:
    """Drop and recreate the bench database (``name``: another one, so that benchmarks run at
    the same time do not drop each other's), migrate it; return its SQLAlchemy URL."""
    url = PG_BENCH_URL.rsplit("/", 1)[0] + "/" + name
    import asyncio

    import asyncpg

    async def recreate() -> None:
        conn = await asyncpg.connect(PG_ADMIN_DSN, timeout=5)
        try:
            await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            await conn.execute(f"CREATE DATABASE {name}")
        finally:
            await conn.close()

    try:
        asyncio.run(recreate())
    except (OSError, asyncpg.PostgresError) as exc:
        raise Skip(f"PostgreSQL at 127.0.0.1:5432 unavailable: {exc}") from exc
    env = {**os.environ, "AGENTSTATION_DATABASE_URL": url}
    # This checkout's migrations, or another's (a side-by-side baseline migrates its own): the
    # venv's editable install names one checkout, which a worktree sharing the venv is not.
    env["PYTHONPATH"] = str(tree or ROOT)
    cli = str(VENV_BIN / "agentstation")
    done = subprocess.run(
        [cli, "migrate"], env=env, cwd=tree or ROOT, capture_output=True, timeout=120
    )
    if done.returncode != 0:
        raise Skip(f"agentstation migrate failed: {done.stderr.decode()[-500:]}")
    return url


@contextlib.contextmanager
def servers(*procs: ServerProcess) -> Iterator[list[ServerProcess]]:
    """Start all, yield them, stop all (even when one fails to start)."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(p) for p in procs]


def http_json(method: str, url: str, body: dict[str, Any] | None = None) -> Any:
    """A JSON request for setup steps (creating agents and sessions); raises on non-2xx."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:500]
        raise RuntimeError(f"{method} {url} -> {exc.code}: {detail}") from exc
    return json.loads(raw) if raw else None


def pct(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by nearest rank; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    idx = min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[idx]


def stream_figures(turns: Sequence[tuple[float, int]], wall: float) -> dict[str, Any]:
    """Of streamed turns, each (TTFT s, output tokens), done in ``wall`` seconds: output
    tokens/s, TTFT p50 (ms) and the tokens."""
    tokens = sum(n for _, n in turns)
    return {
        "tok_s": tokens / wall,
        "ttft_p50_ms": 1000 * statistics.median(t for t, _ in turns),
        "tokens": tokens,
    }


def ttft_growth(runs: Sequence[Sequence[float]]) -> dict[str, Any]:
    """Of conversations, each its turns' TTFTs (s) in order: the medians of the first and last
    turns' TTFTs (ms), the median of the per-conversation last/first ratios, and those ratios."""
    return {
        "ttft_first_ms": round(1000 * statistics.median(r[0] for r in runs), 1),
        "ttft_last_ms": round(1000 * statistics.median(r[-1] for r in runs), 1),
        "ratio": round(statistics.median(r[-1] / r[0] for r in runs), 2),
        "ratios": [round(r[-1] / r[0], 2) for r in runs],
    }
