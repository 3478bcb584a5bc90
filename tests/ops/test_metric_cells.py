"""The per-request metrics kept as plain floats (app/ops/metric_cells.py) expose what
prometheus_client's own Counter and Histogram exposed: names, types, help, labels, buckets,
values and ``_created`` samples, in the same order, from any thread."""

from __future__ import annotations

import asyncio
import math
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, HTTPException
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client import metrics as prometheus_metrics
from prometheus_client.parser import text_string_to_metric_families

from app.ops import metrics as ops_metrics
from app.ops.metric_cells import OTHERS, OWNER
from app.ops.metrics import Metrics, MetricsMiddleware

GENAI = ["gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model"]
HOT = (
    "agentstation_http_requests",
    "agentstation_http_request_duration_seconds",
    "agentstation_time_to_first_token_seconds",
    "agentstation_tokens",
    "gen_ai_client_token_usage",
    "gen_ai_server_time_to_first_token_seconds",
)


class Reference:
    """The same six metrics as prometheus_client's own types (main before the change)."""

    def __init__(self, metrics: Metrics) -> None:
        reg = self.registry = CollectorRegistry()
        doc = {name: getattr(metrics, attr).documentation for attr, name in _attrs().items()}
        self.http_requests = Counter(
            HOT[0], doc[HOT[0]], ["method", "route", "status"], registry=reg
        )
        self.http_latency = Histogram(
            HOT[1], doc[HOT[1]], ["method", "route"], registry=reg,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
        )  # fmt: skip
        self.ttft = Histogram(
            HOT[2], doc[HOT[2]], ["model"], registry=reg,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
        )  # fmt: skip
        self.tokens = Counter(HOT[3], doc[HOT[3]], ["model", "kind"], registry=reg)
        self.usage = Histogram(
            HOT[4], doc[HOT[4]], [*GENAI, "gen_ai_token_type"], registry=reg,
            buckets=[4**i for i in range(14)],
        )  # fmt: skip
        self.genai_ttft = Histogram(
            HOT[5], doc[HOT[5]], GENAI, registry=reg,
            buckets=(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                     2.5, 5.0, 7.5, 10.0),
        )  # fmt: skip

    def request(self, method: str, route: str, status: int, seconds: float) -> None:
        self.http_requests.labels(method, route, str(status)).inc()
        self.http_latency.labels(method, route).observe(seconds)

    def tokens_of(self, model: str, prompt: int, completion: int, provider: str) -> None:
        genai = ("chat", provider, model)
        prompt_c = self.tokens.labels(model, "prompt")
        completion_c = self.tokens.labels(model, "completion")
        if prompt:
            prompt_c.inc(prompt)
        if completion:
            completion_c.inc(completion)
        self.usage.labels(*genai, "input").observe(prompt)
        self.usage.labels(*genai, "output").observe(completion)

    def first_token(self, model: str, seconds: float, provider: str) -> None:
        seconds = max(0.0, seconds)
        self.ttft.labels(model).observe(seconds)
        self.genai_ttft.labels("chat", provider, model).observe(seconds)


def _attrs() -> dict[str, str]:
    return dict(
        zip(
            ("http_requests", "http_latency", "ttft", "tokens_total", "genai_token_usage",
             "genai_ttft"),
            HOT,
            strict=True,
        )
    )  # fmt: skip


def families(text: str) -> dict[str, tuple[str, str, list[tuple[str, dict[str, str], Any]]]]:
    """The six families parsed: type, help and samples (``_created``'s timestamp kept apart)."""
    out = {}
    for family in text_string_to_metric_families(text):
        if family.name in HOT:
            rows = [
                (s.name, s.labels, "created" if s.name.endswith("_created") else s.value)
                for s in family.samples
            ]
            out[family.name] = (family.type, family.documentation, rows)
    return out


def created_times(text: str) -> list[float]:
    return [
        s.value
        for family in text_string_to_metric_families(text)
        if family.name in HOT
        for s in family.samples
        if s.name.endswith("_created")
    ]


# Values on and around the bucket bounds, above the last, zeros, NaN and negative TTFTs.
REQUESTS = [
    ("GET", "/v1/models", 200, 0.005), ("GET", "/v1/models", 200, 0.0051),
    ("POST", "/v1/chat/completions", 200, 0.0001), ("POST", "/v1/chat/completions", 429, 1.0),
    ("POST", "/v1/chat/completions", 200, 300.0), ("GET", "<unmatched>", 404, 1000.0),
    ("POST", "/v1/chat/completions", 500, 0.0),
]  # fmt: skip
TOKENS = [
    ("qwen", 100, 20, "vllm"), ("qwen", 0, 0, "vllm"), ("mock", 4, 5, "openai"),
    ("mock", 67108864, 1, "openai"), ("qwen", 10**9, 16, "other provider: the first one stays"),
]  # fmt: skip
TTFTS = [
    ("qwen", 0.001, "vllm"), ("qwen", -0.5, "vllm"), ("qwen", math.nan, "vllm"),
    ("mock", 0.0105, "openai"), ("mock", 45.0, "openai"),
]  # fmt: skip


def drive(metrics: Metrics, reference: Reference) -> None:
    for request in REQUESTS:
        metrics.http_request(*request)
        reference.request(*request)
    for model, prompt, completion, provider in TOKENS:
        metrics.tokens(model, prompt, completion, provider)
        reference.tokens_of(model, prompt, completion, "vllm" if model == "qwen" else provider)
    for model, seconds, provider in TTFTS:
        metrics.time_to_first_token(model, seconds, provider)
        reference.first_token(model, seconds, provider)


def test_the_exposition_is_prometheus_clients_own() -> None:
    metrics = Metrics(process=False)
    metrics.writers.claim()  # this thread updates without the lock
    reference = Reference(metrics)
    before = time.time()
    drive(metrics, reference)
    text, expected = metrics.render().decode(), generate_latest(reference.registry).decode()
    assert families(text) == families(expected)
    assert set(families(text)) == set(HOT)
    # Same lines in the same order once the creation timestamps are masked.
    lines = [line for line in text.splitlines() if line.split("{")[0].split(" ")[-1] in _names()]
    masked = [line.rsplit(" ", 1)[0] if "_created" in line else line for line in lines]
    want = [line for line in expected.splitlines() if line.split("{")[0].split(" ")[-1] in _names()]
    assert masked == [line.rsplit(" ", 1)[0] if "_created" in line else line for line in want]
    assert all(before <= t <= time.time() for t in created_times(text))
    assert metrics.writers.owner == threading.get_ident()
    assert not any(f.shards[OTHERS] for f in _hot(metrics))  # all on the lock-free path


def _names() -> set[str]:
    suffixes = ("", "_total", "_created", "_bucket", "_count", "_sum")
    return {name + suffix for name in HOT for suffix in suffixes}


def _hot(metrics: Metrics) -> list[Any]:
    return [getattr(metrics, attr) for attr in _attrs()]


def test_expected_counts_sums_and_buckets() -> None:
    metrics = Metrics(process=False)
    metrics.writers.claim()
    drive(metrics, Reference(metrics))
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for s in family.samples
    }

    def value(name: str, **labels: str) -> float:
        return got[(name, tuple(sorted(labels.items())))]

    chat = {"method": "POST", "route": "/v1/chat/completions"}
    latency = "agentstation_http_request_duration_seconds"
    assert value("agentstation_http_requests_total", **chat, status="200") == 2
    assert value("agentstation_http_requests_total", **chat, status="429") == 1
    assert value(f"{latency}_count", **chat) == 4
    assert value(f"{latency}_sum", **chat) == 0.0001 + 1.0 + 300.0 + 0.0
    assert value(f"{latency}_bucket", **chat, le="0.005") == 2  # 0.0001 and 0.0
    assert value(f"{latency}_bucket", **chat, le="0.5") == 2
    assert value(f"{latency}_bucket", **chat, le="1.0") == 3  # a value on a bound is in it
    assert value(f"{latency}_bucket", **chat, le="300.0") == 4
    models = {"method": "GET", "route": "/v1/models"}
    assert value(f"{latency}_bucket", **models, le="0.005") == 1
    assert value(f"{latency}_bucket", **models, le="0.01") == 2
    unmatched = {"method": "GET", "route": "<unmatched>"}
    assert value(f"{latency}_bucket", **unmatched, le="300.0") == 0
    assert value(f"{latency}_bucket", **unmatched, le="+Inf") == 1
    assert value("agentstation_tokens_total", model="qwen", kind="prompt") == 100 + 10**9
    assert value("agentstation_tokens_total", model="qwen", kind="completion") == 36
    qwen = dict(zip(GENAI, ("chat", "vllm", "qwen"), strict=True))
    usage = "gen_ai_client_token_usage"
    assert value(f"{usage}_count", **qwen, gen_ai_token_type="input") == 3
    assert value(f"{usage}_bucket", **qwen, gen_ai_token_type="input", le="1.0") == 1  # the 0
    assert value(f"{usage}_bucket", **qwen, gen_ai_token_type="input", le="6.7108864e+07") == 2
    assert value(f"{usage}_bucket", **qwen, gen_ai_token_type="input", le="+Inf") == 3
    mock = dict(zip(GENAI, ("chat", "openai", "mock"), strict=True))
    assert value(f"{usage}_bucket", **mock, gen_ai_token_type="input", le="4.0") == 1
    assert value(f"{usage}_bucket", **mock, gen_ai_token_type="input", le="6.7108864e+07") == 2
    assert value(f"{usage}_sum", **mock, gen_ai_token_type="output") == 6
    ttft = "agentstation_time_to_first_token_seconds"
    assert value(f"{ttft}_count", model="qwen") == 3
    assert value(f"{ttft}_sum", model="qwen") == 0.001  # the negative and the NaN count as 0
    assert value(f"{ttft}_bucket", model="qwen", le="0.01") == 3
    genai_ttft = "gen_ai_server_time_to_first_token_seconds"
    assert value(f"{genai_ttft}_bucket", **qwen, le="0.001") == 3
    assert value(f"{genai_ttft}_bucket", **mock, le="0.01") == 0
    assert value(f"{genai_ttft}_bucket", **mock, le="0.02") == 1
    assert value(f"{genai_ttft}_bucket", **mock, le="10.0") == 1
    assert value(f"{genai_ttft}_bucket", **mock, le="+Inf") == 2


def test_negative_token_counts_are_refused_as_counters_refuse_them() -> None:
    metrics = Metrics(process=False)
    with pytest.raises(ValueError):
        metrics.tokens("qwen", -1, 2)


@pytest.fixture
def tiny_switch_interval() -> Iterator[None]:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch as often as they can: lost updates would show
    try:
        yield
    finally:
        sys.setswitchinterval(old)


@pytest.mark.usefixtures("tiny_switch_interval")
def test_updates_from_many_threads_at_once_are_all_counted() -> None:
    metrics = Metrics(process=False)
    metrics.writers.claim()
    n, threads = 3000, 4
    start = threading.Barrier(threads + 1)

    def work() -> None:
        start.wait()
        for _ in range(n):
            metrics.tokens("qwen", 1, 2, "vllm")
            metrics.time_to_first_token("qwen", 0.03, "vllm")
            metrics.http_request("POST", "/v1/chat/completions", 200, 0.02)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    work()  # the owner thread, lock-free, at the same time
    for worker in workers:
        worker.join()
    total = n * (threads + 1)
    assert metrics.tokens_total.value("qwen", "prompt") == [total]
    assert metrics.tokens_total.value("qwen", "completion") == [2 * total]
    usage = metrics.genai_token_usage.value("chat", "vllm", "qwen", "output")
    assert usage[1] == total and usage[-1] == 2 * total  # bucket le=4, the sum
    assert metrics.ttft.value("qwen")[2] == total  # le=0.05
    assert metrics.http_requests.value("POST", "/v1/chat/completions", "200") == [total]
    latency = metrics.http_latency.value("POST", "/v1/chat/completions")
    assert latency[2] == total and latency[-1] == pytest.approx(0.02 * total)
    # Both cell sets took part: the owner's and the other threads'.
    assert metrics.tokens_total.shards[OWNER] and metrics.tokens_total.shards[OTHERS]


def make_app() -> tuple[FastAPI, Metrics]:
    app = FastAPI()
    metrics = Metrics(process=False)

    @app.get("/v1/runs/{run_id}")
    async def get_run(run_id: str) -> dict[str, str]:
        if run_id == "missing":
            raise HTTPException(404)
        # A sync agent's model call on a worker thread, while the loop serves this request.
        await asyncio.to_thread(metrics.tokens, "qwen", 3, 4, "vllm")
        metrics.time_to_first_token("qwen", 0.2, "vllm")  # the loop's thread
        return {"id": run_id}

    app.add_middleware(MetricsMiddleware, metrics=metrics)
    return app, metrics


async def test_requests_through_the_middleware_from_the_loop_and_a_worker_thread() -> None:
    app, metrics = make_app()
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        for run_id in ("a", "b", "missing"):
            await client.get(f"/v1/runs/{run_id}")
        text = (await client.get("/metrics")).text
    # The middleware bound the event loop's thread: its updates took the lock-free cells.
    assert metrics.writers.owner == threading.get_ident()
    assert metrics.http_requests.shards[OWNER] and not metrics.http_requests.shards[OTHERS]
    assert metrics.ttft.shards[OWNER] and not metrics.ttft.shards[OTHERS]
    assert metrics.tokens_total.shards[OTHERS] and not metrics.tokens_total.shards[OWNER]
    got = {(s.name, frozenset(s.labels.items())): s.value for f in
           text_string_to_metric_families(text) for s in f.samples}  # fmt: skip
    route = {("method", "GET"), ("route", "/v1/runs/{run_id}")}
    assert got[("agentstation_http_requests_total", frozenset({*route, ("status", "200")}))] == 2
    assert got[("agentstation_http_requests_total", frozenset({*route, ("status", "404")}))] == 1
    assert got[("agentstation_http_request_duration_seconds_count", frozenset(route))] == 3
    tokens = ("agentstation_tokens_total", frozenset({("model", "qwen"), ("kind", "prompt")}))
    assert got[tokens] == 6
    ttft = ("agentstation_time_to_first_token_seconds_sum", frozenset({("model", "qwen")}))
    assert got[ttft] == pytest.approx(0.4)


def test_created_samples_follow_prometheus_clients_switch() -> None:
    metrics = Metrics(process=False)
    metrics.tokens("qwen", 1, 1)
    assert "agentstation_tokens_created" in metrics.render().decode()
    prometheus_metrics.disable_created_metrics()  # type: ignore[no-untyped-call]
    try:
        text = metrics.render().decode()
    finally:
        prometheus_metrics.enable_created_metrics()  # type: ignore[no-untyped-call]
    assert "_created" not in text
    assert 'agentstation_tokens_total{kind="prompt",model="qwen"} 1.0' in text


def test_bucket_bounds_are_the_modules() -> None:
    metrics = Metrics(process=False)
    assert metrics.http_latency.bounds == (*map(float, ops_metrics._LATENCY_BUCKETS), math.inf)
    assert metrics.genai_token_usage.bounds[-2:] == (67108864.0, math.inf)
