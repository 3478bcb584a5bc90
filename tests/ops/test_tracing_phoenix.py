"""Acceptance (issue 28): traces in a real trace store. Arize Phoenix (from PyPI, its own venv:
scripts/install-phoenix-env.sh) runs on loopback with its storage in a temp dir; the service
exports to it by ``OTEL_EXPORTER_OTLP_ENDPOINT`` alone; a tool agent turn in a real sandboxed
kernel, a task with a sub-agent and a run that waits for approval are read back through
Phoenix's own client (tests/ops/phoenix_spans.py): the tree, names, parent links and gen_ai.*
attributes, and the client's ``traceparent`` as the root's parent."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.main import create_app
from tests.app.conftest import MODELS, make_settings, sandboxed_client
from tests.app.conftest import base_dir as base_dir  # the fixture

pytestmark = [pytest.mark.kernel, pytest.mark.slow]

PHOENIX_ENV = Path(os.environ.get("AGENTSTATION_PHOENIX_ENV", "/opt/agentstation/phoenix-env"))
READER = Path(__file__).with_name("phoenix_spans.py")
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
ROOT = "POST /v1/sessions/{session_id}/messages"


def _tool_call(name: str, parameters: dict[str, Any]) -> str:
    return f"Let me.\n```json\n{json.dumps({'name': name, 'parameters': parameters})}\n```\n"


TEAM = [
    {
        "name": "coder",
        "backend": "scripted",
        "replies": [_tool_call("IPythonInteractive", {"command": "print(6 * 7)"}), "It is 42."],
    },
    {"name": "teacher", "backend": "scripted", "replies": ["What is 2+3?", "Right."]},
    {"name": "student", "backend": "scripted", "replies": ["5"]},
    {
        "name": "calc",
        "backend": "scripted",
        "replies": [_tool_call("Calculator", {"expression": "6 * 7"}), "The answer is 42."],
    },
]
AGENTS = {
    "coder": {"kind": "tool_agent", "model": "coder", "tools": [{"name": "IPythonInteractive"}]},
    "pupil": {"model": "student"},
    "classroom": {
        "kind": "task",
        "agent": {"model": "teacher"},
        "sub_tasks": [{"agent": "pupil"}],
        "max_turns": 2,
    },
    "calc": {
        "kind": "tool_agent",
        "model": "calc",
        "tools": [{"name": "Calculator"}],
        "approval": {"tools": ["Calculator"]},
    },
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Phoenix:
    """Phoenix's server, started in the background (its start overlaps the sandbox's)."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.url = f"http://127.0.0.1:{_free_port()}"
        env = {
            **{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
            "PHOENIX_WORKING_DIR": str(work),
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": self.url.rsplit(":", 1)[1],
            "PHOENIX_GRPC_PORT": str(_free_port()),
            "PHOENIX_TELEMETRY_ENABLED": "false",
            "PYTHONUNBUFFERED": "1",
        }
        self.log = (work / "phoenix.log").open("wb")
        binary = PHOENIX_ENV / "bin" / "phoenix"
        self.proc = subprocess.Popen(
            [str(binary), "serve"], env=env, cwd=work, stdout=self.log, stderr=self.log
        )

    def wait(self, timeout_s: float = 300) -> None:
        """Until it answers (~15 s on a quiet machine; minutes on a crowded one)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = (self.work / "phoenix.log").read_text(errors="replace")[-2000:]
                pytest.fail(f"Phoenix did not start: {tail}")
            time.sleep(0.3)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    """Phoenix's server on loopback, its database in a temp dir."""
    if not (PHOENIX_ENV / "bin" / "phoenix").exists():
        pytest.fail(f"no Phoenix in {PHOENIX_ENV}: run scripts/install-phoenix-env.sh")
    server = Phoenix(tmp_path_factory.mktemp("phoenix"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def client(
    phoenix: Phoenix, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, base_dir: Path
) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    for name in ("OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", phoenix.url)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "agentstation-acceptance")
    monkeypatch.setenv("AGENTSTATION_SANDBOX_BASE_DIR", str(base_dir))
    monkeypatch.setenv("AGENTSTATION_SANDBOX_TIMEOUT_S", "20")
    from app.db.migrate import upgrade

    url = f"sqlite+aiosqlite:///{tmp_path / 'phoenix.db'}"
    await asyncio.to_thread(upgrade, url)
    models = json.dumps([*MODELS, *TEAM])
    app = create_app(make_settings(url, models=models, sandbox_enabled=True))
    async with sandboxed_client(app) as c:
        await asyncio.to_thread(phoenix.wait)  # started with the module, alongside the sandbox
        for name, spec in AGENTS.items():
            resp = await c.post("/v1/agents", json={"name": name, "spec": spec})
            assert resp.status_code == 201, resp.text
        yield c, app


async def _turn(
    c: httpx.AsyncClient, agent: str, headers: dict[str, str] | None = None
) -> tuple[str, dict[str, Any]]:
    sid = (await c.post("/v1/sessions", json={"agent": agent})).json()["id"]
    resp = await c.post(f"/v1/sessions/{sid}/messages", json={"message": "go"}, headers=headers)
    assert resp.status_code == 200, resp.text
    return sid, resp.json()["run"]


def _read(phoenix: str, trace_ids: list[str]) -> list[dict[str, Any]]:
    python = PHOENIX_ENV / "bin" / "python"
    out = subprocess.run(
        [str(python), str(READER), phoenix, "default", *trace_ids],
        check=True,
        capture_output=True,
        timeout=60,
    )
    spans: list[dict[str, Any]] = json.loads(out.stdout)
    return spans


def _wait_for(phoenix: str, expected: dict[str, set[str]]) -> list[dict[str, Any]]:
    """The spans of the traces in ``expected`` once each holds (at least) its span names."""
    deadline = time.monotonic() + 60
    while True:
        spans = _read(phoenix, list(expected))
        names: dict[str, set[str]] = {}
        for span in spans:
            names.setdefault(span["context"]["trace_id"], set()).add(span["name"])
        if all(want <= names.get(t, set()) for t, want in expected.items()):
            return spans
        if time.monotonic() > deadline:
            raise AssertionError(f"Phoenix never had {expected}; it has {names}")
        time.sleep(0.5)


class Tree:
    """One trace's spans as Phoenix returned them."""

    def __init__(self, spans: list[dict[str, Any]], trace_id: str) -> None:
        self.spans = [s for s in spans if s["context"]["trace_id"] == trace_id]
        self.by_id = {s["context"]["span_id"]: s for s in self.spans}

    def all(self, name: str) -> list[dict[str, Any]]:
        return sorted((s for s in self.spans if s["name"] == name), key=lambda s: s["start_time"])

    def one(self, name: str) -> dict[str, Any]:
        found = self.all(name)
        assert len(found) == 1, f"{len(found)} spans named {name!r} in\n{self.render()}"
        return found[0]

    def render(self, parent: str | None = None, depth: int = 0) -> str:
        """The tree as indented names (assertion messages)."""
        kids = [s for s in self.spans if (s["parent_id"] in self.by_id) == (parent is not None)]
        if parent is not None:
            kids = [s for s in kids if s["parent_id"] == parent]
        lines = []
        for span in sorted(kids, key=lambda s: s["start_time"]):
            lines.append("  " * depth + span["name"])
            lines.append(self.render(span["context"]["span_id"], depth + 1))
        return "\n".join(line for line in lines if line)

    def parent(self, span: dict[str, Any]) -> str | None:
        parent = self.by_id.get(span["parent_id"] or "")
        return parent["name"] if parent is not None else None

    def children(self, span: dict[str, Any]) -> list[str]:
        sid = span["context"]["span_id"]
        kids = [s for s in self.spans if s["parent_id"] == sid]
        return [s["name"] for s in sorted(kids, key=lambda s: s["start_time"])]


async def test_runs_are_traced_into_phoenix(
    client: tuple[httpx.AsyncClient, Any], phoenix: Phoenix
) -> None:
    c, app = client
    traceparent = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
    tool_sid, tool_run = await _turn(c, "coder", {"traceparent": traceparent})
    assert tool_run["status"] == "completed" and tool_run["trace_id"] == CLIENT_TRACE
    task_sid, task_run = await _turn(c, "classroom")
    calc_sid, paused = await _turn(c, "calc")
    assert paused["status"] == "requires_action"
    call = paused["required_action"]["tool_calls"][0]
    await asyncio.sleep(0.5)  # the person thinks
    resp = await c.post(
        f"/v1/runs/{paused['id']}/resume",
        json={"decisions": [{"id": call["id"], "action": "approve"}], "stream": True},
    )
    assert "event: run.completed" in resp.text, resp.text
    app.state.ops.tracing.provider.force_flush()

    tool_trace, task_trace = tool_run["trace_id"], task_run["trace_id"]
    calc_trace = paused["trace_id"]
    spans = _wait_for(
        phoenix.url,
        {
            tool_trace: {ROOT, "execute_tool IPythonInteractive", "kernel.cell", "store.store_end"},
            task_trace: {ROOT, "invoke_agent classroom", "invoke_agent pupil"},
            calc_trace: {ROOT, "approval.wait", "execute_tool Calculator"},
        },
    )

    # A tool agent's turn with a real kernel, continuing the client's trace.
    tree = Tree(spans, tool_trace)
    root = tree.one(ROOT)
    assert root["parent_id"] == CLIENT_SPAN  # the client's span: the root's parent
    assert root["attributes"]["http.response.status_code"] == 200
    assert tree.children(root)[:3] == ["store.lookup", "admission", "invoke_agent coder"]
    assert tree.children(root)[-1] == "store.store_end"
    assert tree.children(tree.one("admission")) == ["store.admit"]
    agent = tree.one("invoke_agent coder")
    assert tree.children(agent) == ["chat coder", "execute_tool IPythonInteractive", "chat coder"]
    attributes = agent["attributes"]
    assert attributes["gen_ai.operation.name"] == "invoke_agent"
    assert attributes["gen_ai.agent.name"] == "coder"
    assert attributes["gen_ai.conversation.id"] == tool_sid
    assert attributes["agentstation.run.id"] == tool_run["id"]
    for chat in tree.all("chat coder"):
        a = chat["attributes"]
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.request.model"] == a["gen_ai.response.model"] == "coder"
        assert a["gen_ai.provider.name"] == "scripted"
        assert a["gen_ai.conversation.id"] == tool_sid
        assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
        assert list(a["gen_ai.response.finish_reasons"]) == ["stop"]
        assert "gen_ai.input.messages" not in a  # no content unless asked
        assert [e["name"] for e in chat["events"]] == ["gen_ai.first_token"]
    tool = tree.one("execute_tool IPythonInteractive")
    assert tool["attributes"]["gen_ai.operation.name"] == "execute_tool"
    assert tool["attributes"]["gen_ai.tool.name"] == "IPythonInteractive"
    assert tree.children(tool) == ["kernel.cell"]  # the kernel cell inside the tool call
    assert tree.one("kernel.cell")["attributes"]["agentstation.kernel.status"] == "ok"

    # A task: its lead agent and its member (a sub-task around the pupil agent) nested in the
    # task's own invoke_agent, each turn with its own span.
    tree = Tree(spans, task_trace)
    task, lead = tree.all("invoke_agent classroom")
    assert tree.parent(task) == ROOT and tree.parent(lead) == "invoke_agent classroom"
    assert task["attributes"]["agentstation.agent.class"] == "Task"
    assert tree.children(task) == ["invoke_agent classroom", "invoke_agent pupil"]
    assert tree.children(lead) == ["chat teacher"]
    member, pupil = tree.all("invoke_agent pupil")
    assert tree.children(member) == ["invoke_agent pupil"]
    assert tree.children(pupil) == ["chat student"]
    for span in (task, lead, member, pupil):
        assert span["attributes"]["gen_ai.conversation.id"] == task_sid, tree.render()
        assert span["attributes"]["agentstation.run.id"] == task_run["id"]

    # Approval: the wait is a span of the run's own trace, and so is the resumed turn.
    tree = Tree(spans, calc_trace)
    wait = tree.one("approval.wait")
    assert tree.parent(wait) == ROOT
    assert wait["attributes"]["gen_ai.conversation.id"] == calc_sid
    assert list(wait["attributes"]["gen_ai.tool.call.id"]) == [call["id"]]
    assert _seconds(wait) >= 0.5
    first, resumed = tree.all("invoke_agent calc")
    assert tree.children(first) == ["chat calc"]  # stopped before the call
    assert tree.children(resumed) == ["execute_tool Calculator", "chat calc"]
    executed = tree.one("execute_tool Calculator")
    assert executed["attributes"]["gen_ai.tool.call.id"] == call["id"]
    assert wait["end_time"] <= executed["start_time"]


def _seconds(span: dict[str, Any]) -> float:
    from datetime import datetime

    start = datetime.fromisoformat(span["start_time"])
    end = datetime.fromisoformat(span["end_time"])
    return (end - start).total_seconds()
