"""Acceptance (issue 15) with real sandboxed kernels: a scripted tool agent asks for
``IPythonInteractive``; nothing runs until a person decides (checked in the kernel's work dir);
approve runs the cell and the model reads its output, deny runs nothing and the model reads the
denial, edit runs the edited code."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.settings import Settings
from tests.app.approval_helpers import coder_client, ipython_call

pytestmark = pytest.mark.kernel


def _call(code: str) -> str:
    return ipython_call(code, "I will run this.\n")


APPROVED = "open('approved.txt', 'w').write('x')\nprint(6 * 7)"
DENIED = "open('denied.txt', 'w').write('x')\nprint('ran anyway')"
ORIGINAL = "open('original.txt', 'w').write('x')"
EDITED = "open('edited.txt', 'w').write('x')\nprint('edited ran')"
REPLIES = [
    _call(APPROVED), "It printed 42.",
    _call(DENIED), "Fine, I will not.",
    _call(ORIGINAL), "Done.",
]  # fmt: skip
SPEC = {
    "kind": "tool_agent",
    "model": "coder",
    "tools": [{"name": "IPythonInteractive"}],
    "approval": {"tools": ["IPythonInteractive"]},
}


@pytest.fixture
async def client(
    settings_factory: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch, base_dir: Path
) -> AsyncIterator[httpx.AsyncClient]:
    async with coder_client(settings_factory, monkeypatch, base_dir, REPLIES) as c:
        yield c


def _workdir(base_dir: Path, session_id: str) -> Path:
    """The session's kernel work dir on the host (KernelPool.workdir of ``a:<session>``)."""
    return base_dir / "sessions" / hashlib.sha256(f"a:{session_id}".encode()).hexdigest()[:32]


async def _pause(client: httpx.AsyncClient, sid: str, code: str) -> tuple[str, str]:
    resp = await client.post(f"/v1/sessions/{sid}/messages", json={"message": "go"})
    run = resp.json()["run"]
    assert run["status"] == "requires_action", resp.text
    call = run["required_action"]["tool_calls"][0]
    assert (call["name"], call["arguments"]) == ("IPythonInteractive", {"command": code})
    return run["id"], call["id"]


async def _decide(client: httpx.AsyncClient, run_id: str, decision: dict[str, Any]) -> str:
    resp = await client.post(
        f"/v1/runs/{run_id}/resume", json={"decisions": [decision], "stream": True}
    )
    assert resp.status_code == 200, resp.text
    assert "event: run.completed" in resp.text, resp.text
    run = (await client.get(f"/v1/runs/{run_id}")).json()
    assert run["status"] == "completed"
    return str(run["output"]["content"])


async def _tool_result(client: httpx.AsyncClient, sid: str) -> str:
    memory = (await client.get(f"/v1/sessions/{sid}/memory")).json()["memory"]
    return str(memory[-2]["content"])


async def test_approve_deny_edit_with_a_real_kernel(
    client: httpx.AsyncClient, base_dir: Path
) -> None:
    await client.post("/v1/agents", json={"name": "coder", "spec": SPEC})
    sid = (await client.post("/v1/sessions", json={"agent": "coder"})).json()["id"]
    work = _workdir(base_dir, sid)

    run_id, call_id = await _pause(client, sid, APPROVED)
    assert not (work / "approved.txt").exists()  # no cell ran while it waits
    answer = await _decide(client, run_id, {"id": call_id, "action": "approve"})
    assert (work / "approved.txt").exists()
    assert "42" in await _tool_result(client, sid) and answer == "It printed 42."

    run_id, call_id = await _pause(client, sid, DENIED)
    deny = {"id": call_id, "action": "deny", "message": "no files, please"}
    answer = await _decide(client, run_id, deny)
    assert not (work / "denied.txt").exists()
    result = await _tool_result(client, sid)
    assert "no files, please" in result and "ran anyway" not in result
    assert answer == "Fine, I will not."

    run_id, call_id = await _pause(client, sid, ORIGINAL)
    edit = {"id": call_id, "action": "edit", "arguments": {"command": EDITED}}
    await _decide(client, run_id, edit)
    assert (work / "edited.txt").exists() and not (work / "original.txt").exists()
    assert "edited ran" in await _tool_result(client, sid)
