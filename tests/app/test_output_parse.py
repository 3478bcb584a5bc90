"""A ``json`` agent whose model keeps answering non-JSON: the run fails with
``output_parse_error`` naming the parser's error (after one retry shown to the model)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from app.main import create_app
from app.settings import Settings
from tests.app.conftest import KEY_A, MODELS
from tests.lifespan import LifespanManager


@pytest.fixture
async def json_client(
    settings_factory: Callable[..., Settings],
) -> AsyncIterator[httpx.AsyncClient]:
    replies = ["not json", "still not", "nope", '{"ok": true}']
    models = [*MODELS, {"name": "sloppy", "backend": "scripted", "replies": replies}]
    app = create_app(settings_factory(models=json.dumps(models)))
    async with LifespanManager(app):
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {KEY_A}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://t", headers=headers
        ) as c:
            yield c


async def test_unparsable_reply_fails_the_run_clearly(json_client: httpx.AsyncClient) -> None:
    spec = {"model": "sloppy", "output_format": {"type": "json"}}
    assert (await json_client.post("/v1/agents", json={"name": "j", "spec": spec})).is_success
    sid = (await json_client.post("/v1/sessions", json={"agent": "j"})).json()["id"]
    answer = await json_client.post(f"/v1/sessions/{sid}/messages", json={"message": "go"})
    run = answer.json()["run"]
    assert run["status"] == "failed"
    assert run["error"]["code"] == "output_parse_error"
    assert "not a valid JSON" in run["error"]["message"]
    # The next turn: a bad reply, shown its error, then good JSON.
    answer = await json_client.post(f"/v1/sessions/{sid}/messages", json={"message": "again"})
    assert answer.json()["run"]["status"] == "completed", answer.text
    assert answer.json()["message"]["formatted"]["data"] == {"ok": True}
