"""Set-up shared by the approval and tool-agent tests: scripted tool calls, the calculator
agent, polling a run to its end, a session's memory, the Responses API's approval round trip,
and an app with real sandboxed kernels."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI

from app.main import create_app
from app.settings import Settings
from tests.app.conftest import MODELS, sandboxed_client
from tests.app.test_responses import valid
from tests.lifespan import LifespanManager


def scripted_call(name: str, parameters: dict[str, Any], preface: str = "") -> str:
    """A scripted model's reply that calls the tool ``name`` (a JSON block after ``preface``)."""
    body = {"name": name, "parameters": parameters}
    return f"{preface}```json\n{json.dumps(body)}\n```\n"


def calculator_call(expression: str) -> str:
    """A reply that asks the Calculator for ``expression``."""
    return scripted_call("Calculator", {"expression": expression}, "Let me compute.\n")


# The calculator model: one call, then the answer (a chain's next turn calls again: the replies
# cycle per conversation).
CALC = {
    "name": "calc",
    "backend": "scripted",
    "replies": [calculator_call("6 * 7"), "The answer is 42."],
    "cycle": "conversation",
}
CALCULATOR_AGENT: dict[str, Any] = {
    "kind": "tool_agent",
    "model": "calc",
    "tools": [{"name": "Calculator"}],
}


async def until_ended(
    client: httpx.AsyncClient,
    run_id: str,
    pending: tuple[str, ...] = ("queued", "running", "requires_action"),
    tries: int = 400,
) -> dict[str, Any]:
    """The run once its status is not one of ``pending`` (by default: once it has ended,
    neither queued, running nor waiting for a decision), polled every 0.02 s."""
    for _ in range(tries):
        run: dict[str, Any] = (await client.get(f"/v1/runs/{run_id}")).json()
        if run["status"] not in pending:
            return run
        await asyncio.sleep(0.02)
    raise AssertionError("the run never ended")


async def session_memory(client: httpx.AsyncClient, session_id: str) -> list[dict[str, Any]]:
    """The session's memory (its messages)."""
    body = (await client.get(f"/v1/sessions/{session_id}/memory")).json()
    return list(body["memory"])


# -- the Responses API: a stored agent whose Calculator calls wait for a person ----------------
# Two calls in one turn: the run pauses twice.
TWICE = {
    "name": "twice",
    "backend": "scripted",
    "replies": [calculator_call("6 * 7"), calculator_call("2 + 3"), "42 and 5."],
    "cycle": "conversation",
}
APPROVAL = {"tools": ["Calculator"]}


@pytest.fixture
async def app(settings_factory: Callable[..., Settings]) -> AsyncIterator[FastAPI]:
    """The app with the calculator models (``calc``, ``twice``)."""
    application = create_app(settings_factory(models=json.dumps([*MODELS, CALC, TWICE])))
    async with LifespanManager(application):
        yield application


async def approval_agent(client: httpx.AsyncClient, name: str, model: str = "calc") -> None:
    """Store a calculator agent whose Calculator calls wait for approval."""
    spec = {**CALCULATOR_AGENT, "model": model, "approval": APPROVAL}
    made = await client.post("/v1/agents", json={"name": name, "spec": spec})
    assert made.status_code == 201, made.text


def decision(request_id: str, approve: bool = True, **extra: Any) -> dict[str, Any]:
    """An ``mcp_approval_response`` input item."""
    return {
        "type": "mcp_approval_response",
        "approval_request_id": request_id,
        "approve": approve,
        **extra,
    }


def dump(response: Any) -> dict[str, Any]:
    """A response model as JSON."""
    return dict(response.model_dump(mode="json"))


async def waiting_response(oai: openai.AsyncOpenAI, model: str = "careful") -> Any:
    """A response of ``model`` that waits for approval of its one call."""
    waiting = await oai.responses.create(model=model, input="6 times 7?")
    valid(dump(waiting))
    assert waiting.status == "completed"
    assert [item.type for item in waiting.output] == ["mcp_approval_request"]
    return waiting


async def paused(
    oai: openai.AsyncOpenAI, client: httpx.AsyncClient, agent: str = "careful", model: str = "calc"
) -> Any:
    """Store the approval agent ``agent`` on ``model``; its response waiting for approval."""
    await approval_agent(client, agent, model)
    return await waiting_response(oai, agent)


async def approve(
    oai: openai.AsyncOpenAI, waiting: Any, model: str = "careful", **body: Any
) -> Any:
    """The response that approves ``waiting``'s first approval request."""
    return await oai.responses.create(
        model=model,
        input=[decision(waiting.output[0].id)],  # type: ignore[list-item]
        previous_response_id=waiting.id,
        **body,
    )


# -- real sandboxed kernels -------------------------------------------------------------------
def ipython_call(code: str, preface: str = "") -> str:
    """A reply that asks IPythonInteractive to run ``code``."""
    return scripted_call("IPythonInteractive", {"command": code}, preface)


@asynccontextmanager
async def coder_client(
    settings_factory: Callable[..., Settings],
    monkeypatch: pytest.MonkeyPatch,
    base_dir: Path,
    replies: list[str],
) -> AsyncIterator[httpx.AsyncClient]:
    """The app with sandboxed kernels under ``base_dir`` and a scripted model ``coder``
    answering ``replies``, started; tenant A's client."""
    monkeypatch.setenv("AGENTSTATION_SANDBOX_BASE_DIR", str(base_dir))
    monkeypatch.setenv("AGENTSTATION_SANDBOX_TIMEOUT_S", "10")
    models = [*MODELS, {"name": "coder", "backend": "scripted", "replies": replies}]
    app = create_app(settings_factory(models=json.dumps(models), sandbox_enabled=True))
    async with sandboxed_client(app) as c:
        yield c
