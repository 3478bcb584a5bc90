"""Prometheus exposition: request counts by route template, run/token/TTFT metrics, own registry."""

from __future__ import annotations

import httpx
from fastapi import FastAPI, HTTPException
from prometheus_client.parser import text_string_to_metric_families

from app.ops.metrics import Metrics, MetricsMiddleware


def make_app() -> tuple[FastAPI, Metrics]:
    app = FastAPI()
    metrics = Metrics()

    @app.get("/v1/runs/{run_id}")
    async def get_run(run_id: str) -> dict[str, str]:
        if run_id == "missing":
            raise HTTPException(404)
        return {"id": run_id}

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("boom")

    app.add_middleware(MetricsMiddleware, metrics=metrics)
    return app, metrics


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(text: str, name: str, **labels: str) -> float:
    return samples(text)[(name, frozenset(labels.items()))]


async def scrape(app: FastAPI) -> httpx.Response:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        return await c.get("/metrics")


async def test_requests_are_counted_by_route_template_and_status() -> None:
    app, _ = make_app()
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        for run_id in ("a", "b", "c"):
            assert (await c.get(f"/v1/runs/{run_id}")).status_code == 200
        assert (await c.get("/v1/runs/missing")).status_code == 404
        assert (await c.get("/no/such/path")).status_code == 404
        assert (await c.get("/boom")).status_code == 500
        response = await c.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=")
    text = response.text
    route = "/v1/runs/{run_id}"
    name = "agentstation_http_requests_total"
    assert value(text, name, method="GET", route=route, status="200") == 3
    assert value(text, name, method="GET", route=route, status="404") == 1
    assert value(text, name, method="GET", route="<unmatched>", status="404") == 1
    assert value(text, name, method="GET", route="/boom", status="500") == 1
    latency = "agentstation_http_request_duration_seconds_count"
    assert value(text, latency, method="GET", route=route) == 4
    # Raw paths never become label values (bounded cardinality).
    assert "/v1/runs/a" not in text
    assert value(text, "agentstation_http_requests_in_flight") == 0


async def test_runtime_calls_show_up_in_the_exposition() -> None:
    app, metrics = make_app()
    metrics.run_finished("completed", 1.5)
    metrics.run_finished("completed", 0.5)
    metrics.run_finished("failed", 3.0)
    metrics.tokens("qwen", prompt=100, completion=20, provider="vllm")
    metrics.tokens("qwen", prompt=50, completion=5, provider="vllm")
    metrics.time_to_first_token("qwen", 0.2, provider="vllm")
    metrics.set_queue_depth(4, active=2)
    metrics.set_active_sessions(7)
    metrics.set_kernels({"idle": 3, "busy": 1})
    metrics.set_sandbox_level("L3")
    metrics.budget_exceeded.labels("session").inc()
    text = (await scrape(app)).text
    assert value(text, "agentstation_runs_total", status="completed") == 2
    assert value(text, "agentstation_runs_total", status="failed") == 1
    assert value(text, "agentstation_run_duration_seconds_sum", status="completed") == 2.0
    assert value(text, "agentstation_tokens_total", model="qwen", kind="prompt") == 150
    assert value(text, "agentstation_tokens_total", model="qwen", kind="completion") == 25
    assert value(text, "agentstation_time_to_first_token_seconds_count", model="qwen") == 1
    # The GenAI conventions' metrics, by their Prometheus names and gen_ai_* labels.
    genai = {"gen_ai_operation_name": "chat", "gen_ai_provider_name": "vllm"}
    usage = "gen_ai_client_token_usage"
    model = {**genai, "gen_ai_request_model": "qwen"}
    assert value(text, f"{usage}_sum", **model, gen_ai_token_type="input") == 150
    assert value(text, f"{usage}_sum", **model, gen_ai_token_type="output") == 25
    assert value(text, f"{usage}_count", **model, gen_ai_token_type="output") == 2
    assert value(text, f"{usage}_bucket", **model, gen_ai_token_type="output", le="16.0") == 1
    ttft = "gen_ai_server_time_to_first_token_seconds"
    assert value(text, f"{ttft}_count", **model) == 1
    assert value(text, f"{ttft}_sum", **model) == 0.2
    assert value(text, "agentstation_runs_queued") == 4
    assert value(text, "agentstation_runs_active") == 2
    assert value(text, "agentstation_active_sessions") == 7
    assert value(text, "agentstation_kernels", state="busy") == 1
    assert value(text, "agentstation_sandbox_level", level="L3") == 1
    assert value(text, "agentstation_sandbox_level", level="L0") == 0
    assert value(text, "agentstation_budget_exceeded_total", scope="session") == 1


class FakePool:
    def size(self) -> int:
        return 5

    def checkedout(self) -> int:
        return 2

    def overflow(self) -> int:
        return -3


async def test_samplers_refresh_gauges_at_scrape_and_a_broken_one_is_contained() -> None:
    app, metrics = make_app()
    queued = [1]
    metrics.add_sampler(lambda: metrics.set_queue_depth(queued[0]))

    def broken() -> None:
        raise RuntimeError("sampler bug")

    metrics.add_sampler(broken)
    metrics.observe_db_pool(FakePool())
    queued[0] = 9
    text = (await scrape(app)).text
    assert value(text, "agentstation_runs_queued") == 9
    assert value(text, "agentstation_db_pool_connections", state="size") == 5
    assert value(text, "agentstation_db_pool_connections", state="checked_out") == 2


async def test_each_app_has_its_own_registry() -> None:
    app_a, metrics_a = make_app()
    app_b, _ = make_app()
    metrics_a.run_finished("completed", 1.0)
    text_b = (await scrape(app_b)).text
    assert ("agentstation_runs_total", frozenset({("status", "completed")})) not in samples(text_b)
    text_a = (await scrape(app_a)).text
    assert value(text_a, "agentstation_runs_total", status="completed") == 1
