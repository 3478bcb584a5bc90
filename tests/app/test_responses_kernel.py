"""A stored agent's sandboxed Python calls through the Responses API, on real kernels: each
call is a ``code_interpreter_call`` item carrying the code the model sent and the kernel's
output; the chain's next response runs in the same session, so its kernel keeps the state.
Every body and event validated with the ``openai`` package's models (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from app.main import create_app
from app.settings import Settings
from tests.app.conftest import MODELS, sandboxed_client
from tests.app.test_responses import client_for, valid, valid_events

pytestmark = pytest.mark.kernel

FIRST = "x = 6 * 7\nprint(f'x is {x}')"
SECOND = "print(x + 1)"


def _call(code: str) -> str:
    body = {"name": "IPythonInteractive", "parameters": {"command": code}}
    return f"Let me run it.\n```json\n{json.dumps(body)}\n```\n"


REPLIES = [_call(FIRST), "x is 42.", _call(SECOND), "And 43."]


@pytest.fixture
async def app_client(
    settings_factory: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch, base_dir: Path
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    monkeypatch.setenv("AGENTSTATION_SANDBOX_BASE_DIR", str(base_dir))
    monkeypatch.setenv("AGENTSTATION_SANDBOX_TIMEOUT_S", "20")
    models = [*MODELS, {"name": "coder", "backend": "scripted", "replies": REPLIES}]
    app = create_app(settings_factory(models=json.dumps(models), sandbox_enabled=True))
    async with sandboxed_client(app) as c:
        yield app, c


async def test_python_calls_are_code_interpreter_calls_on_the_sessions_kernel(
    app_client: tuple[FastAPI, httpx.AsyncClient],
) -> None:
    app, client = app_client
    spec = {"kind": "tool_agent", "model": "coder", "tools": [{"name": "IPythonInteractive"}]}
    assert (await client.post("/v1/agents", json={"name": "py", "spec": spec})).is_success
    raw = await client.post(
        "/v1/responses", json={"model": "py", "input": "What is 6 times 7?", "stream": True}
    )
    assert raw.status_code == 200, raw.text
    events = valid_events(raw.text)
    first = valid(events[-1]["response"])
    assert first.status == "completed"
    call, answer = first.output
    assert call.type == "code_interpreter_call"
    assert call.code == FIRST and call.status == "completed"
    assert call.outputs is not None and [o.type for o in call.outputs] == ["logs"]
    assert "x is 42" in call.outputs[0].logs  # type: ignore[union-attr]
    assert answer.type == "message" and first.output_text == "x is 42."
    added = [e["item"]["type"] for e in events if e["type"] == "response.output_item.added"]
    assert added == ["code_interpreter_call", "message"]
    # The chain's next response: the same session, so the same kernel (x is still there).
    oai = client_for(app)
    second = await oai.responses.create(
        model="py", input="And one more?", previous_response_id=first.id
    )
    valid(second.model_dump(mode="json"))
    [more, _] = second.output
    assert more.type == "code_interpreter_call" and more.code == SECOND
    assert more.outputs is not None and "43" in more.outputs[0].logs  # type: ignore[union-attr]
    assert second.output_text == "And 43."
    # Retrieved later, the stored response holds the same items.
    again = await oai.responses.retrieve(first.id)
    assert again.output[0].model_dump() == call.model_dump()
    await oai.close()
