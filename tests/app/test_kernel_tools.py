"""The gateway with real sandboxed kernels: one kernel per session, state kept across turns."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest

from app.settings import Settings
from tests.app.approval_helpers import coder_client, ipython_call

pytestmark = pytest.mark.kernel


# Replayed in order across sessions: session one twice, then session two.
REPLIES = [
    ipython_call("x = 21\nprint(x * 2)"),
    "Done.",
    ipython_call("print(x + 1)"),
    "Done again.",
    ipython_call("print(x + 1)"),
    "No x here.",
]


@pytest.fixture
async def client(
    settings_factory: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch, base_dir: Path
) -> AsyncIterator[httpx.AsyncClient]:
    async with coder_client(settings_factory, monkeypatch, base_dir, REPLIES) as c:
        yield c


async def _tool_result(client: httpx.AsyncClient, sid: str, text: str) -> str:
    resp = await client.post(f"/v1/sessions/{sid}/messages", json={"message": text})
    assert resp.json()["run"]["status"] == "completed", resp.text
    memory = (await client.get(f"/v1/sessions/{sid}/memory")).json()["memory"]
    return str(memory[-2]["content"])


async def test_session_kernel_keeps_state_and_sessions_are_isolated(
    client: httpx.AsyncClient,
) -> None:
    sandbox = (await client.get("/readyz")).json()["sandbox"]
    assert sandbox["level"] in ("L3", "L1", "L0") and sandbox["level_ok"] is True
    spec = {"kind": "tool_agent", "model": "coder", "tools": [{"name": "IPythonInteractive"}]}
    assert (await client.post("/v1/agents", json={"name": "py", "spec": spec})).is_success
    one = (await client.post("/v1/sessions", json={"agent": "py"})).json()["id"]
    two = (await client.post("/v1/sessions", json={"agent": "py"})).json()["id"]
    assert "42" in await _tool_result(client, one, "compute")
    assert "22" in await _tool_result(client, one, "again")  # the session's kernel kept x
    assert "NameError" in await _tool_result(client, two, "compute")  # another kernel: no x
    assert (await client.post(f"/v1/sessions/{one}/reset")).status_code == 200
