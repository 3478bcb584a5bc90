"""install_ops: the middlewares work together; settings come from the environment."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import httpx
import pytest
from fastapi import FastAPI
from pydantic import ValidationError

from app.ops.budget import BudgetExceeded
from app.ops.config import OpsSettings
from app.ops.wiring import install_ops


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    yield
    root.handlers[:] = before[0]
    root.setLevel(before[1])


def make_app(settings: OpsSettings) -> FastAPI:
    app = FastAPI()

    @app.get("/v1/things/{name}")
    async def thing(name: str) -> dict[str, str]:
        if name == "spent":
            raise BudgetExceeded("session", 100, 120)
        return {"name": name}

    install_ops(app, settings)
    return app


async def test_limits_budgets_ids_and_metrics_work_together() -> None:
    app = make_app(OpsSettings(rate_limit="2/minute", log_format="json", access_log=False))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        ok = await c.get("/v1/things/a", headers={"authorization": "Bearer k1"})
        spent = await c.get("/v1/things/spent", headers={"authorization": "Bearer k1"})
        limited = await c.get("/v1/things/b", headers={"authorization": "Bearer k1"})
        metrics = await c.get("/metrics")
    assert ok.status_code == 200 and ok.headers["x-request-id"]
    assert spent.status_code == 429
    assert spent.json()["error"]["code"] == "budget_exceeded"
    assert spent.headers["x-should-retry"] == "false"
    assert "retry-after" not in spent.headers
    assert limited.status_code == 429
    assert limited.json()["error"]["code"] == "rate_limit_exceeded"
    assert limited.headers["retry-after"] == "30"
    assert limited.headers["x-request-id"]
    text = metrics.text
    assert 'agentstation_budget_exceeded_total{scope="session"} 1.0' in text
    assert "agentstation_rate_limited_requests_total 1.0" in text
    assert (
        'agentstation_http_requests_total{method="GET",route="/v1/things/{name}",status="429"} 1.0'
        in text
    )
    assert app.state.ops.limiter is not None


async def test_no_rate_limit_configured_means_no_limiter() -> None:
    app = make_app(OpsSettings(rate_limit="off"))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        statuses = {(await c.get("/v1/things/x")).status_code for _ in range(50)}
    assert statuses == {200}
    assert app.state.ops.limiter is None


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSTATION_RATE_LIMIT", "30/second")
    monkeypatch.setenv("AGENTSTATION_SESSION_TTL_S", "86400")
    monkeypatch.setenv("AGENTSTATION_LOG_LEVEL", "debug")
    settings = OpsSettings()
    assert settings.rate_limit == "30/second"
    assert settings.session_ttl_s == 86400
    assert settings.log_level == "DEBUG"
    monkeypatch.setenv("AGENTSTATION_RATE_LIMIT", "lots")
    with pytest.raises(ValidationError, match="invalid rate limit"):
        OpsSettings()
