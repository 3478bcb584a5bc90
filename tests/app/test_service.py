"""Health, readiness, error envelope for malformed input, body limit, anonymous access, CLI keys."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.cli import _create_key
from app.main import create_app
from app.middleware import BodyLimitMiddleware
from app.settings import Settings
from tests.lifespan import LifespanManager


async def test_healthz_and_readyz_need_no_key(client: httpx.AsyncClient) -> None:
    anon = {"Authorization": ""}
    assert (await client.get("/healthz", headers=anon)).json() == {"status": "ok"}
    ready = await client.get("/readyz", headers=anon)
    assert ready.status_code == 200
    body = ready.json()
    assert body["status"] == "ready" and body["database"] == "ok"
    assert body["models"] == {"echo": "ready", "poet": "ready", "slow": "ready"}
    assert body["sandbox"]["enabled"] is False and body["version"]


async def test_malformed_input_never_500(client: httpx.AsyncClient) -> None:
    resp = await client.post(
        "/v1/agents", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_json"
    resp = await client.post("/v1/agents", json=[1, 2, 3])
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_body"
    form = await client.post("/v1/agents", content=b"{}", headers={"content-type": "text/plain"})
    assert form.status_code == 400 and "Content-Type" in form.json()["error"]["message"]
    resp = await client.patch("/v1/agents/x")
    assert resp.status_code == 405 and resp.json()["error"]["code"] == "method_not_allowed"
    resp = await client.get("/v1/nothing-here")
    assert resp.status_code == 404 and "error" in resp.json()


async def test_body_limit_is_413(settings_factory: Callable[..., Settings]) -> None:
    app = create_app(settings_factory(max_body_bytes=200, api_keys="a:k"))
    async with LifespanManager(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            big = {"name": "x", "description": "y" * 500, "spec": {"model": "echo"}}
            resp = await c.post("/v1/agents", json=big, headers={"Authorization": "Bearer k"})
            assert resp.status_code == 413
            assert resp.json()["error"]["code"] == "payload_too_large"

            async def chunks() -> AsyncIterator[
                bytes
            ]:  # no content-length: counted while streaming
                for _ in range(10):
                    yield b"x" * 50

            resp = await c.post(
                "/v1/agents",
                content=chunks(),
                headers={"Authorization": "Bearer k", "content-type": "application/json"},
            )
            assert resp.status_code == 413


@pytest.mark.parametrize(
    ("headers", "chunks", "status"),
    [
        ([(b"content-length", b"10")], [b"x" * 10], 200),  # declared and within the limit
        ([(b"content-length", b"11")], [b"x" * 11], 413),  # declared over it: before reading
        ([], [b"x" * 6, b"x" * 6], 413),  # not declared: counted while it streams
        # A length next to a chunked encoding is not trusted: counted too.
        ([(b"content-length", b"4"), (b"transfer-encoding", b"chunked")], [b"x" * 12], 413),
    ],
)
async def test_body_limit_middleware(
    headers: list[tuple[bytes, bytes]], chunks: list[bytes], status: int
) -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    messages = [
        {"type": "http.request", "body": c, "more_body": i + 1 < len(chunks)}
        for i, c in enumerate(chunks)
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/", "headers": headers}
    await BodyLimitMiddleware(app, max_bytes=10)(scope, receive, send)
    assert sent[0]["status"] == status


async def test_anonymous_only_on_loopback_without_keys(
    settings_factory: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    app = create_app(settings_factory(api_keys=""))
    async with LifespanManager(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            assert (await c.get("/v1/agents")).status_code == 200
            # A key made with the CLI ends anonymous access.
            url = app.state.agentstation.settings.database_url
            monkeypatch.setenv("AGENTSTATION_DATABASE_URL", url)
            key = await _create_key("team")
            assert key.startswith("as-")
            assert (await c.get("/v1/agents")).status_code == 401
            ok = await c.get("/v1/agents", headers={"Authorization": f"Bearer {key}"})
            assert ok.status_code == 200
    public = create_app(settings_factory(api_keys="", host="0.0.0.0"))
    async with LifespanManager(public):
        transport = httpx.ASGITransport(app=public)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            assert (await c.get("/v1/agents")).status_code == 401


@pytest.mark.parametrize("models", ['[{"name": "m"}]', '[{"name": "m", "backend": "x"}]'])
def test_bad_models_setting_fails_at_start(models: str) -> None:
    with pytest.raises(ValueError):
        Settings(models=models)


def test_models_from_a_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "models.yaml"
    path.write_text("- name: m\n  backend: scripted\n  replies: [hi]\n  chunk_delay_s: 0.1\n")
    settings = Settings(models=str(path))
    assert settings.models[0].name == "m" and settings.models[0].options()["replies"] == ["hi"]
