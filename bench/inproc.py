"""The gateway in this process, for the in-process benches (``bench.responses_chain_cpu``,
``bench.delivery_calls``, ``bench.first_token``; ``asgi_post``, the request of
``bench.session_calls`` and ``bench.stateless_cpu``): a fresh database (SQLite in a temporary file,
or a fresh PostgreSQL database at 127.0.0.1:5432), the scripted model answering ``REPLY``, the
app's lifespan, and an httpx client on it (``bench.asgi_stream``'s streaming transport, or
httpx's ``ASGITransport``, which hands the client the body once the response is complete).

These benches measure another tree's code with this tree's bench file (``PYTHONPATH`` naming
that tree, whose ``bench`` package may lack this module): ``run_in_tree`` runs a bench file
there with this module (and the transport, loaded from this folder) as ``bench.inproc``.
``python -m bench.inproc DIR bench/first_token.py [ARGS]``: the same from the command line.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

KEY = "bench-key"
REPLY = " ".join(f"word{i}" for i in range(64))
HERE = Path(__file__).resolve().parent


def _load(name: str, module: str) -> Any:
    """``bench/<name>.py`` of this folder as the module ``module`` (once)."""
    if module in sys.modules:
        return sys.modules[module]
    spec = importlib.util.spec_from_file_location(module, HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[module] = loaded
    spec.loader.exec_module(loaded)
    return loaded


def streaming_transport(app: Any) -> Any:
    """``bench.asgi_stream.StreamingASGITransport`` on ``app``, from this folder."""
    return _load("asgi_stream", "_bench_asgi_stream").StreamingASGITransport(app)


@asynccontextmanager
async def app_client(
    name: str,
    *,
    db: str = "sqlite",
    streamed: bool = True,
    chunk_delay_s: float | None = None,
    on_app: Callable[[Any], None] | None = None,
    **settings: Any,
) -> AsyncIterator[Any]:
    """An ``httpx.AsyncClient`` (base URL ``http://t``, the bench's key) on a fresh app:
    ``name`` names its database; ``streamed``: through the streaming transport;
    ``chunk_delay_s``: the scripted model's time per token after the first; ``on_app``: called
    with the app once its lifespan has started; ``settings``: more ``Settings`` fields."""
    import httpx
    from asgi_lifespan import LifespanManager

    from app.db.migrate import upgrade
    from app.main import create_app
    from app.settings import Settings

    with tempfile.TemporaryDirectory() as tmp:
        if db == "postgres":
            from bench.common import reset_postgres_db

            url = await asyncio.to_thread(
                reset_postgres_db, f"agentstation_bench_{name}", Path.cwd()
            )
        else:
            url = f"sqlite+aiosqlite:///{Path(tmp) / f'{name}.db'}"
            await asyncio.to_thread(upgrade, url)
        model: dict[str, Any] = {"name": "scripted", "backend": "scripted", "replies": [REPLY]}
        if chunk_delay_s is not None:
            model["chunk_delay_s"] = chunk_delay_s
        fields = dict(sandbox_enabled=False, access_log=False) | settings
        app = create_app(
            Settings(database_url=url, models=json.dumps([model]), api_keys=f"a:{KEY}", **fields)
        )
        async with LifespanManager(app), quiet_logs("httpx", "agentstation.runs"):
            if on_app is not None:
                on_app(app)
            transport = streaming_transport(app) if streamed else httpx.ASGITransport(app=app)
            headers = {"Authorization": f"Bearer {KEY}"}
            async with httpx.AsyncClient(
                transport=transport, base_url="http://t", headers=headers
            ) as client:
                yield client


class quiet_logs:
    """``names``' loggers at WARNING while a measurement runs, their levels put back after:
    the suite runs benches in its own process (tests/bench), and a level left behind there
    silenced ``agentstation.runs`` for every later test of that worker."""

    def __init__(self, *names: str) -> None:
        self.loggers = [logging.getLogger(name) for name in names]
        self.levels = [logger.level for logger in self.loggers]

    def __enter__(self) -> None:
        for logger in self.loggers:
            logger.setLevel(logging.WARNING)

    def __exit__(self, *exc: object) -> None:
        for logger, level in zip(self.loggers, self.levels, strict=True):
            logger.setLevel(level)

    async def __aenter__(self) -> None:
        self.__enter__()

    async def __aexit__(self, *exc: object) -> None:
        self.__exit__(*exc)


async def asgi_post(app: Any, path: str, data: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
    """One POST of ``data`` straight through the ASGI ``app``, as a kept-alive client sends it
    (no sockets, no client library: its calls would dwarf the server's), with ``headers``
    between ``host`` and ``content-length``; the body (a non-2xx answer raises). The call
    counting benches' request (``bench.session_calls``, ``bench.stateless_cpu``)."""
    scope = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1", "method": "POST", "scheme": "http", "path": path,
        "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "headers": [(b"host", b"127.0.0.1:8000"), *headers,
                    (b"content-length", str(len(data)).encode())],
        "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8000), "state": {},
    }  # fmt: skip
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:  # as a live connection: nothing more until the response is sent
            await asyncio.sleep(3600)
        sent = True
        return {"type": "http.request", "body": data, "more_body": False}

    out: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        out.append(message)

    await app(scope, receive, send)
    if out[0]["status"] >= 300:
        raise RuntimeError(f"{path}: {out}")
    return b"".join(m.get("body", b"") for m in out[1:])


# Run from the tree's root (not as a script: bench/profile.py would shadow the standard
# library's ``profile`` that cProfile imports), with this module as that tree's ``bench.inproc``.
_RUN = (
    "import importlib.util, runpy, sys, bench; "
    "spec = importlib.util.spec_from_file_location('bench.inproc', sys.argv[1]); "
    "mod = importlib.util.module_from_spec(spec); sys.modules['bench.inproc'] = mod; "
    "bench.inproc = mod; spec.loader.exec_module(mod); "
    "sys.argv = sys.argv[2:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


def run_in_tree(
    tree: Path, file: str, args: list[str], capture: bool = True, wrapper: list[str] | None = None
) -> str:
    """Run the bench file ``file`` (this tree's) on ``tree``'s code, under ``wrapper`` (a
    command such as valgrind's, or none); its stdout (``capture``)."""
    base = tree.resolve()
    env = {**os.environ, "PYTHONPATH": str(base)}
    cmd = [*(wrapper or []), sys.executable, "-c", _RUN, str(HERE / "inproc.py")]
    cmd += [str(Path(file).resolve()), *args]
    done = subprocess.run(cmd, cwd=base, env=env, capture_output=capture, text=True, check=True)
    return done.stdout or ""


def last_json(
    tree: Path, file: str, args: list[str], wrapper: list[str] | None = None
) -> dict[str, Any]:
    """The JSON object on the last line of the bench file's output, run on ``tree``."""
    lines = run_in_tree(tree, file, args, wrapper=wrapper).strip().splitlines()
    out: dict[str, Any] = json.loads(lines[-1])
    return out


def callgrind(out: Path) -> list[str]:
    """The wrapper that runs a bench file under callgrind, instrumented only inside its
    ``Instructions`` windows (its dumps in ``out``)."""
    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")
    return ["valgrind", "--tool=callgrind", "--instr-atstart=no",
            f"--callgrind-out-file={out}/cg.%p"]  # fmt: skip


class Instructions:
    """In a process that ``callgrind(out)`` started: the machine instructions of a window
    (``start()`` … ``stop()``), load-proof where CPU time is not."""

    def __init__(self, out: Path) -> None:
        self.out = out

    def _control(self, *args: str) -> None:
        # Valgrind takes the command while this process runs code: not blocked in a wait.
        cmd = ["callgrind_control", *args, str(os.getpid())]
        done = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while done.poll() is None:
            sum(range(200))

    def start(self) -> None:
        self._control("-z")
        self._control("-i", "on")

    def stop(self) -> int:
        """The window's instructions (its dump's ``totals``)."""
        self._control("-i", "off")
        self._control("-d")
        newest = max(self.out.glob(f"cg.{os.getpid()}.*"), key=lambda p: int(p.suffix[1:]))
        found = re.search(r"^totals: (\d+)$", newest.read_text(errors="replace"), re.M)
        assert found is not None, newest
        return int(found.group(1))


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    run_in_tree(Path(sys.argv[1]), sys.argv[2], sys.argv[3:], capture=False)
