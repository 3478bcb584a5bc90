"""Real Responses API clients against a live ``agentstation serve``: the OpenAI Agents SDK
(in its own venv, ``.venv-agents-sdk``) and Codex CLI (``.tools/codex``), both installed by
scripts/install-clients.sh. The service runs from the project's environment with scripted
models, so every answer is known; a recording proxy in front of it keeps what the clients send."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from tests.app.conftest import KEY_A
from tests.resilience.procs import Service, running

ROOT = Path(__file__).resolve().parents[2]
CODEX = ROOT / ".tools" / "codex" / "node_modules" / ".bin" / "codex"
SDK_PYTHON = ROOT / ".venv-agents-sdk" / "bin" / "python"
SDK_SCRIPT = Path(__file__).with_name("agents_sdk_client.py")
STREAM_EVENT: TypeAdapter[ResponseStreamEvent] = TypeAdapter(ResponseStreamEvent)
TERMINAL = ("response.completed", "response.incomplete", "response.failed")
INSTALL_HINT = "run `bash scripts/install-clients.sh` (part of `make install`)"

# The scripted answers (cycle "conversation": the reply after as many as the history holds).
WEATHER_CALL = {"name": "get_weather", "arguments": {"city": "Paris"}}
SHELL_CALL = {"name": "exec_command", "arguments": {"cmd": "echo agentstation-$((6*7))"}}
CLIENT_MODELS: list[dict[str, Any]] = [
    {"name": "echo", "backend": "scripted"},
    {"name": "greeter", "backend": "scripted", "replies": ["Hello from AgentStation."]},
    {
        "name": "chain",
        "backend": "scripted",
        "cycle": "conversation",
        "replies": ["First answer.", "Second answer, after the first."],
    },
    {
        "name": "weather",
        "backend": "scripted",
        "cycle": "conversation",
        "replies": [{"content": "", "tool_calls": [WEATHER_CALL]}, "It is sunny in Paris."],
    },
    {
        "name": "shell",
        "backend": "scripted",
        "cycle": "conversation",
        "replies": [{"content": "", "tool_calls": [SHELL_CALL]}, "The command printed 42."],
    },
]


@contextlib.contextmanager
def client_service(tmp: Path) -> Iterator[Service]:
    """``agentstation serve`` on SQLite with the scripted models above."""
    service = Service(f"sqlite+aiosqlite:///{tmp}/clients.db", tmp, CLIENT_MODELS)
    with running(service) as svc:
        yield svc


class RecordingProxy:
    """Forwards every request to ``upstream`` as it comes (streams included) and keeps
    ``(method, path, JSON body)`` of each, so a test can read what a client really sent."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.requests: list[tuple[str, str, Any]] = []
        # (path, status, content type, body) of every answer, as the client received it.
        self.answers: list[tuple[str, int, str, bytes]] = []
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = body.decode(errors="replace")
        self.requests.append((request.method, request.path_qs, parsed))
        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower() not in ("host", "content-length", "transfer-encoding", "connection")
        }
        assert self._session is not None
        async with self._session.request(
            request.method, self.upstream + request.path_qs, data=body, headers=headers
        ) as upstream:
            out = web.StreamResponse(status=upstream.status)
            for key, value in upstream.headers.items():
                if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                    out.headers[key] = value
            await out.prepare(request)
            body = bytearray()
            gone = False  # a client may hang up once it has its terminal event (Codex does)
            async for chunk in upstream.content.iter_any():
                body += chunk
                if not gone:
                    try:
                        await out.write(chunk)
                    except ConnectionResetError:
                        gone = True
            ctype = upstream.headers.get("Content-Type", "")
            self.answers.append((request.path, upstream.status, ctype, bytes(body)))
            if not gone:
                with contextlib.suppress(ConnectionResetError):
                    await out.write_eof()
            return out

    async def _start(self) -> None:
        self._session = aiohttp.ClientSession(auto_decompress=False)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def bodies(self, path: str = "/v1/responses") -> list[dict[str, Any]]:
        """The JSON bodies POSTed to ``path``, in order."""
        return [b for m, p, b in self.requests if m == "POST" and p == path]


def check_answers(answers: list[tuple[str, int, str, bytes]]) -> int:
    """Validate every 200 answer of ``POST /v1/responses`` in ``answers`` (a proxy's) against the
    ``openai`` package's own models (``Response``; ``ResponseStreamEvent`` for each event,
    with strictly increasing ``sequence_number``s and one terminal event last); returns
    how many were checked."""
    checked = 0
    for path, status, ctype, body in answers:
        if path != "/v1/responses" or status != 200:
            continue
        checked += 1
        if "text/event-stream" not in ctype:
            Response.model_validate_json(body)
            continue
        events = [
            STREAM_EVENT.validate_json(line[6:])
            for line in body.decode().splitlines()
            if line.startswith("data: ")
        ]
        numbers = [e.sequence_number for e in events]
        assert numbers == sorted(set(numbers)), numbers
        assert events[0].type == "response.created", events[0]
        assert events[-1].type in TERMINAL, events[-1]
        assert not [e for e in events[:-1] if e.type in TERMINAL]
    return checked


def _clean_env() -> dict[str, str]:
    """This process's environment less the project's and OpenAI's own settings."""
    drop = ("AGENTSTATION_", "OPENAI_", "PYTHON", "VIRTUAL_ENV", "CODEX_")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


def run_agents_sdk(mode: str, base_url: str, timeout: float = 120) -> dict[str, Any]:
    """Run ``agents_sdk_client.py MODE`` with the SDK venv's python (isolated: the checkout's
    own ``agents`` package is not on its path); returns the JSON it prints."""
    assert SDK_PYTHON.exists(), f"the OpenAI Agents SDK venv is missing: {INSTALL_HINT}"
    env = _clean_env() | {"OPENAI_BASE_URL": f"{base_url}/v1", "OPENAI_API_KEY": KEY_A}
    done = subprocess.run(
        [str(SDK_PYTHON), "-I", str(SDK_SCRIPT), mode],
        env=env,
        cwd=tempfile.gettempdir(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"SDK {mode}: exit {done.returncode}\n{done.stderr[-4000:]}"
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run_codex(
    prompt: str, model: str, base_url: str, workdir: Path, timeout: float = 120
) -> tuple[list[dict[str, Any]], subprocess.CompletedProcess[str]]:
    """``codex exec --json`` with AgentStation as a custom provider (``wire_api="responses"``);
    returns its JSONL events and the finished process."""
    assert CODEX.exists(), f"Codex CLI is missing: {INSTALL_HINT}"
    home = workdir / "codex-home"
    home.mkdir(exist_ok=True)
    provider = (
        f'model_providers.agentstation={{name="AgentStation",base_url="{base_url}/v1",'
        'env_key="AGENTSTATION_API_KEY",wire_api="responses"}'
    )
    env = _clean_env() | {"CODEX_HOME": str(home), "AGENTSTATION_API_KEY": KEY_A}
    done = subprocess.run(
        [
            str(CODEX),
            "exec",
            "--json",
            "--skip-git-repo-check",
            # Codex's own sandbox (Landlock/seccomp) is not what is tested, and containers
            # may lack it; the scripted command is a harmless echo in a temp dir.
            "--sandbox",
            "danger-full-access",
            "-c",
            "model_provider=agentstation",
            "-c",
            provider,
            "-m",
            model,
            prompt,
        ],
        env=env,
        cwd=workdir,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    events = []
    for line in done.stdout.splitlines():
        with contextlib.suppress(ValueError):
            events.append(json.loads(line))
    return events, done
