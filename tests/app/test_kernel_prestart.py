"""Kernels started with the session: creating a session of an agent with a sandboxed Python
tool starts its kernel in the background (a free slot only, never evicting one), so that the
first cell finds it up; ``AGENTSTATION_SANDBOX_PRESTART=0`` turns it off. Every way a session
is made does it (one implementation: ``services/sessions.py: create_session``): POST
/v1/sessions, a conversation, an A2A context."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from a2a.types import SendMessageRequest, TaskState
from fastapi import FastAPI

from app.db.models import SessionKernel
from app.main import create_app
from app.settings import Settings
from tests.app.conftest import MODELS, sandboxed_client
from tests.app.test_a2a import a2a_client, user_message

pytestmark = pytest.mark.kernel


def _call(code: str) -> str:
    body = {"name": "IPythonInteractive", "parameters": {"command": code}}
    return f"```json\n{json.dumps(body)}\n```\n"


REPLIES = [_call("x = 21\nprint(x * 2)"), "Done."] * 4
PYTHON = {"name": "IPythonInteractive", "config": {"agent": "analyst"}}
SPEC = {"kind": "tool_agent", "model": "coder", "tools": [PYTHON]}
Served = tuple[FastAPI, httpx.AsyncClient]


@pytest.fixture
def serve(
    settings_factory: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch, base_dir: Path
) -> Callable[..., Any]:
    def start(**env: str) -> Any:
        monkeypatch.setenv("AGENTSTATION_SANDBOX_BASE_DIR", str(base_dir))
        for name, value in env.items():
            monkeypatch.setenv(f"AGENTSTATION_SANDBOX_{name}", value)
        # "coder" first: a new conversation's agent is the first model's (``responses.coder``).
        models = [{"name": "coder", "backend": "scripted", "replies": REPLIES}, *MODELS]
        return create_app(settings_factory(models=json.dumps(models), sandbox_enabled=True))

    return start


async def _served(app: FastAPI) -> AsyncIterator[Served]:
    async with sandboxed_client(app) as c:
        assert (await c.post("/v1/agents", json={"name": "py", "spec": SPEC})).is_success
        yield app, c


async def _new_session(c: httpx.AsyncClient) -> str:
    resp = await c.post("/v1/sessions", json={"agent": "py"})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


async def _kernel_up(pool: Any, key: tuple[str, str]) -> Any:
    """The key's kernel once it answers (no message sent); None after 60 s."""
    for _ in range(600):
        kernel = pool.kernels.get(key)
        if kernel is not None and kernel.alive and not kernel.busy:
            return kernel
        await asyncio.sleep(0.1)
    return None


async def _settled(pool: Any) -> None:
    """Whatever was sent to the pool's loop before has had its turn."""
    await pool.start()
    await asyncio.sleep(0.2)
    await pool.start()


async def _turn(c: httpx.AsyncClient, sid: str) -> str:
    resp = await c.post(f"/v1/sessions/{sid}/messages", json={"message": "compute"})
    assert resp.json()["run"]["status"] == "completed", resp.text
    memory = (await c.get(f"/v1/sessions/{sid}/memory")).json()["memory"]
    return str(memory[-2]["content"])


async def test_a_tool_agents_session_has_its_kernel_before_its_first_message(
    serve: Callable[..., FastAPI],
) -> None:
    async for app, c in _served(serve()):
        pool = app.state.agentstation.kernel_pool
        sid = await _new_session(c)
        key = (f"a:{sid}", "analyst")  # the tool's own kernel name, as its cells use
        kernel = await _kernel_up(pool, key)
        assert kernel is not None, pool.kernels
        assert "42" in await _turn(c, sid)
        assert pool.kernels[key] is kernel and len(pool.kernels) == 1  # no second start
        # Still the cell that recorded the session's kernel (a later restart is reported).
        async with app.state.agentstation.sessionmaker() as db:
            owners = list(await db.scalars(sa.select(SessionKernel.owner)))
        assert [o.split("/", 1)[1] for o in owners] == [kernel.name]


async def test_a_full_pool_evicts_no_kernel_for_a_new_session(
    serve: Callable[..., FastAPI],
) -> None:
    async for app, c in _served(serve(MAX_KERNELS="1")):
        pool = app.state.agentstation.kernel_pool
        one = await _new_session(c)
        kernel = await _kernel_up(pool, (f"a:{one}", "analyst"))
        assert kernel is not None
        two = await _new_session(c)
        await _settled(pool)
        assert list(pool.kernels) == [(f"a:{one}", "analyst")] and kernel.alive
        assert "42" in await _turn(c, two)  # its kernel starts lazily, as before


async def test_prestart_off_leaves_the_pool_empty(serve: Callable[..., FastAPI]) -> None:
    async for app, c in _served(serve(PRESTART="0")):
        pool = app.state.agentstation.kernel_pool
        assert pool.config.prestart is False
        sid = await _new_session(c)
        await _settled(pool)
        assert pool.kernels == {}
        assert "42" in await _turn(c, sid)  # started by the first cell


async def test_a_conversations_session_has_its_kernel_before_its_first_response(
    serve: Callable[..., FastAPI],
) -> None:
    async for app, c in _served(serve()):
        # A new conversation's agent: the stored agent named as the first model, with Python.
        created = await c.post("/v1/agents", json={"name": "coder", "spec": SPEC})
        assert created.is_success, created.text
        pool = app.state.agentstation.kernel_pool
        items = [{"type": "message", "role": "user", "content": "Hi."}]
        resp = await c.post("/v1/conversations", json={"items": items})
        assert resp.status_code == 200, resp.text
        conversation = resp.json()["id"]
        assert await _kernel_up(pool, (f"a:{conversation}", "analyst")) is not None, pool.kernels
        listed = (await c.get(f"/v1/conversations/{conversation}/items")).json()["data"]
        assert [i["content"][0]["text"] for i in listed] == ["Hi."]


async def test_an_a2a_contexts_session_has_its_kernel_though_no_cell_ran(
    serve: Callable[..., FastAPI],
) -> None:
    # The agent answers without running code: its session's kernel is up only if it was
    # started with the session (the first cell would start it otherwise).
    async for app, c in _served(serve()):
        spec = {"kind": "tool_agent", "model": "poet", "tools": [PYTHON]}
        assert (await c.post("/v1/agents", json={"name": "talker", "spec": spec})).is_success
        _, client = await a2a_client(c, "http://t", "talker", streaming=False)
        request = SendMessageRequest(message=user_message("Hi"))
        task = [r async for r in client.send_message(request)][-1].task
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        pool = app.state.agentstation.kernel_pool
        kernel = await _kernel_up(pool, (f"a:{task.context_id}", "analyst"))
        assert kernel is not None, pool.kernels
        async with app.state.agentstation.sessionmaker() as db:
            assert list(await db.scalars(sa.select(SessionKernel.owner))) == []  # no cell ran
