"""Rate limiting per API key: 429 in the OpenAI envelope with retry-after, buckets refill."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI

from app.ops.ratelimit import RateLimit, RateLimitMiddleware, TokenBucketLimiter


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_app(limit: str, clock: FakeClock) -> tuple[FastAPI, TokenBucketLimiter]:
    app = FastAPI()

    @app.get("/v1/ping")
    async def ping() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/healthz")
    async def healthz() -> dict[str, bool]:
        return {"ok": True}

    limiter = TokenBucketLimiter(RateLimit.parse(limit), clock=clock)
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    return app, limiter


def client(app: FastAPI, key: str | None = None) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    transport = httpx.ASGITransport(app=app)
    return httpx.AsyncClient(transport=transport, base_url="http://test", headers=headers)


@pytest.mark.parametrize(
    ("text", "limit", "period"),
    [
        ("120/minute", 120, 60.0),
        ("10/second", 10, 1.0),
        ("1000/hour", 1000, 3600.0),
        ("5 / 2minutes", 5, 120.0),
        ("3/s", 3, 1.0),
        ("7/HRS", 7, 3600.0),
    ],
)
def test_parse_accepts_counts_per_period(text: str, limit: int, period: float) -> None:
    assert RateLimit.parse(text) == RateLimit(limit, period)


@pytest.mark.parametrize("text", ["", "120", "0/minute", "10/ms", "10/day", "x/minute", "-1/s"])
def test_parse_rejects_malformed_specs(text: str) -> None:
    with pytest.raises(ValueError, match="invalid rate limit"):
        RateLimit.parse(text)


async def test_over_limit_gets_429_envelope_with_retry_after() -> None:
    clock = FakeClock()
    app, _ = make_app("3/minute", clock)
    async with client(app, "sk-alice") as c:
        statuses = [(await c.get("/v1/ping")).status_code for _ in range(3)]
        limited = await c.get("/v1/ping")
    assert statuses == [200, 200, 200]
    assert limited.status_code == 429
    # One token refills every 20 s at 3/minute.
    assert limited.headers["retry-after"] == "20"
    assert limited.headers["content-type"] == "application/json"
    error = limited.json()["error"]
    assert error["code"] == "rate_limit_exceeded"
    assert error["param"] is None
    assert set(error) == {"message", "type", "param", "code"}
    assert "3 requests per 60 s" in error["message"]


async def test_keys_have_separate_buckets_and_refill_over_time() -> None:
    clock = FakeClock()
    app, _ = make_app("2/minute", clock)
    async with client(app, "sk-alice") as alice, client(app, "sk-bob") as bob:
        assert [(await alice.get("/v1/ping")).status_code for _ in range(3)] == [200, 200, 429]
        assert (await bob.get("/v1/ping")).status_code == 200
        clock.now += 29.0  # half a token at 2/minute: still limited, ~1 s to go
        again = await alice.get("/v1/ping")
        assert again.status_code == 429
        assert again.headers["retry-after"] == "1"
        clock.now += 1.0
        assert (await alice.get("/v1/ping")).status_code == 200


async def test_anonymous_callers_are_limited_by_address_and_probes_are_exempt() -> None:
    clock = FakeClock()
    app, _ = make_app("1/hour", clock)
    async with client(app) as anon:
        assert (await anon.get("/v1/ping")).status_code == 200
        assert (await anon.get("/v1/ping")).status_code == 429
        assert [(await anon.get("/healthz")).status_code for _ in range(5)] == [200] * 5


def test_bucket_table_is_bounded_under_a_flood_of_keys() -> None:
    clock = FakeClock()
    limiter = TokenBucketLimiter(RateLimit.parse("5/second"), clock=clock, max_keys=100)
    for i in range(1000):
        assert limiter.acquire(f"k{i}") == 0.0
    assert len(limiter._buckets) <= 100
    # A key that was just used keeps its state when old ones are pruned.
    clock.now += 10
    for i in range(100):
        limiter.acquire(f"fresh{i}")
    assert limiter.remaining("fresh99") == 4
