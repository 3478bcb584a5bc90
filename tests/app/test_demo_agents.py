"""``agentstation serve`` with no model configured creates a ready demo: ``assistant`` on the
default model and ``coder``, a tool agent on the scripted model with the sandboxed Python tool.

The default chat model is replaced by a scripted one here (the real one is tested on the
engine in tests/vllm/test_default_model.py); everything else is what ``serve`` builds.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app import cli
from app.models.scripted import ScriptedModelLLM
from app.settings import ModelConfig, Settings
from tests.app.conftest import KEY_A, KEY_B, sandboxed_client
from tests.lifespan import LifespanManager


@pytest.fixture(autouse=True)
def scripted_chat_model(monkeypatch: pytest.MonkeyPatch) -> None:
    chat = ModelConfig(name="smollm2-135m", backend="scripted", replies=["Paris."])
    monkeypatch.setattr(cli, "default_chat_model", lambda: chat)


def _settings(tmp_path: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": f"sqlite+aiosqlite:///{tmp_path / 'demo.db'}",
        "models": [],
        "api_keys": f"a:{KEY_A},b:{KEY_B}",
        "sandbox_enabled": False,
        "event_flush_s": 0.05,
    }
    values.update(overrides)
    return Settings(**values)


async def _serve(settings: Settings) -> FastAPI:
    return await asyncio.to_thread(cli.build_app, settings)  # migrates SQLite: not in the loop


async def _agents(app: FastAPI, key: str) -> dict[str, dict[str, Any]]:
    transport = httpx.ASGITransport(app=app)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://t", headers=headers) as c:
        return {a["name"]: a for a in (await c.get("/v1/agents")).json()["data"]}


async def test_serve_without_models_creates_the_demo_for_every_tenant(tmp_path: Path) -> None:
    app = await _serve(_settings(tmp_path))
    assert [m.name for m in app.state.settings.models] == ["smollm2-135m", "scripted"]
    async with LifespanManager(app):
        for key in (KEY_A, KEY_B):
            agents = await _agents(app, key)
            assert set(agents) == {"assistant", "coder"}
            assert agents["assistant"]["spec"]["model"] == "smollm2-135m"
            coder = agents["coder"]["spec"]
            assert coder["kind"] == "tool_agent" and coder["model"] == "scripted"
            assert [t["name"] for t in coder["tools"]] == ["IPythonInteractive"]


async def test_a_restart_keeps_the_users_edits(tmp_path: Path) -> None:
    app = await _serve(_settings(tmp_path))
    async with LifespanManager(app):
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {KEY_A}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://t", headers=headers
        ) as c:
            spec = {"kind": "agent", "model": "scripted", "system_prompt": "mine"}
            assert (await c.put("/v1/agents/assistant", json={"spec": spec})).status_code == 200
            assert (await c.delete("/v1/agents/coder")).status_code == 204
    again = await _serve(_settings(tmp_path))
    async with LifespanManager(again):
        agents = await _agents(again, KEY_A)
    assert agents["assistant"]["version"] == 2
    assert agents["assistant"]["spec"]["system_prompt"] == "mine"
    assert "coder" not in agents  # a deleted demo agent stays deleted


async def test_demo_agents_can_be_turned_off(tmp_path: Path) -> None:
    app = await _serve(_settings(tmp_path, demo_agents=False))  # AGENTSTATION_DEMO_AGENTS=0
    async with LifespanManager(app):
        assert await _agents(app, KEY_A) == {}


def test_the_environment_variable_turns_them_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSTATION_DEMO_AGENTS", "0")
    assert Settings().demo_agents is False


async def test_configured_models_mean_no_demo(tmp_path: Path) -> None:
    mine = '[{"name": "mine", "backend": "scripted"}]'
    app = await _serve(_settings(tmp_path, models=mine))
    assert [m.name for m in app.state.settings.models] == ["mine"]
    async with LifespanManager(app):
        assert await _agents(app, KEY_A) == {}


@pytest.fixture
async def sandboxed(
    tmp_path: Path, base_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[httpx.AsyncClient]:
    monkeypatch.setenv("AGENTSTATION_SANDBOX_BASE_DIR", str(base_dir))
    monkeypatch.setenv("AGENTSTATION_SANDBOX_TIMEOUT_S", "20")
    app = await _serve(_settings(tmp_path, sandbox_enabled=True))
    async with sandboxed_client(app, wait=False) as c:
        yield c


async def _turn(client: httpx.AsyncClient, sid: str, text: str) -> list[dict[str, Any]]:
    """One message to a session; the messages the run added to its memory."""
    before = len((await client.get(f"/v1/sessions/{sid}/memory")).json()["memory"])
    resp = await client.post(f"/v1/sessions/{sid}/messages", json={"message": text})
    assert resp.status_code == 200, resp.text
    assert resp.json()["run"]["status"] == "completed"
    memory: list[dict[str, Any]] = (await client.get(f"/v1/sessions/{sid}/memory")).json()["memory"]
    return memory[before:]


@pytest.mark.kernel
async def test_the_demo_coder_runs_python_in_the_sandbox(sandboxed: httpx.AsyncClient) -> None:
    one = (await sandboxed.post("/v1/sessions", json={"agent": "coder"})).json()["id"]
    two = (await sandboxed.post("/v1/sessions", json={"agent": "coder"})).json()["id"]
    # Interleaved sessions and a second turn: each turn is call → result → answer.
    for sid, text in ((one, "primes?"), (two, "primes too?"), (one, "again")):
        user, call, result, answer = await _turn(sandboxed, sid, text)
        assert user["content"] == text
        assert call["formatted"]["action"]["name"] == "IPythonInteractive"
        assert "[2, 3, 5, 7, 11, 13" in result["content"]  # the kernel's output
        assert "primes below 50" in answer["content"]


def test_a_conversation_cycle_follows_each_conversation() -> None:
    llm = ScriptedModelLLM(["call", "answer"], cycle="conversation")
    user: Any = {"role": "user", "content": "hi"}
    said: Any = {"role": "assistant", "content": "x"}
    assert llm.next_reply([user]) == "call"
    assert llm.next_reply([user]) == "call"  # another session: the same step of the script
    assert llm.next_reply([user, said, user]) == "answer"
    assert llm.next_reply([user, said, user, said, user]) == "call"
    with pytest.raises(ValueError, match="cycle"):
        ScriptedModelLLM(["a"], cycle="random")
