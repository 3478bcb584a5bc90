"""Per-API-key rate limiting as a pure ASGI middleware, over a ``Limiter``.

``TokenBucketLimiter`` counts in this process (SQLite: one process serves). On PostgreSQL the
fleet shares one counter per key (``app.ops.shared_limits.PgRateLimiter``: the same bucket as
GCRA, one statement per admission), so N replicas admit the limit once, not N times.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from starlette.types import ASGIApp, Receive, Scope, Send

from app.ops.errors import error_body, send_error

_PERIODS = {
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "m": 60.0,
    "min": 60.0,
    "minute": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "hour": 3600.0,
}
_SPEC = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([a-z]+)\s*$")

# Paths probes and scrapers hit; limiting them would make a busy key look like a dead server.
DEFAULT_EXEMPT = frozenset({"/healthz", "/readyz", "/metrics"})


def _unit(word: str) -> str | None:
    if word in _PERIODS:
        return word
    # Plurals ("minutes", "hrs"); two letters are too short to be one ("ms" is not minutes).
    if len(word) > 2 and word.endswith("s") and word[:-1] in _PERIODS:
        return word[:-1]
    return None


@dataclass(frozen=True)
class RateLimit:
    """``limit`` requests per ``period_s`` seconds."""

    limit: int
    period_s: float

    @classmethod
    def parse(cls, text: str) -> RateLimit:
        """Parse ``"120/minute"``, ``"10/second"``, ``"1000/hour"`` (also ``10/s``, ``5/2min``)."""
        match = _SPEC.match(text.lower())
        unit = _unit(match.group(3)) if match else None
        if match is None or unit is None:
            raise ValueError(f"invalid rate limit {text!r}; expected N/second, N/minute or N/hour")
        count, multiple = int(match.group(1)), match.group(2)
        if count <= 0:
            raise ValueError(f"invalid rate limit {text!r}; the count must be positive")
        return cls(limit=count, period_s=_PERIODS[unit] * (int(multiple) if multiple else 1))

    def __str__(self) -> str:
        return f"{self.limit}/{self.period_s:g}s"


class Limiter(Protocol):
    """What the middleware asks: admit one request of ``key`` (0) or say how long to wait."""

    rate: RateLimit

    async def admit(self, key: str) -> float:
        """0 if admitted, else the seconds until a request of ``key`` would be."""
        ...


class _Bucket:
    __slots__ = ("tokens", "updated")

    def __init__(self, tokens: float, updated: float) -> None:
        self.tokens = tokens
        self.updated = updated


class TokenBucketLimiter:
    """Token buckets keyed by caller: a burst of ``limit``, refilled at ``limit / period``."""

    def __init__(
        self,
        rate: RateLimit,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 100_000,
    ) -> None:
        self.rate = rate
        self._refill_per_s = rate.limit / rate.period_s
        self._clock = clock
        self._max_keys = max_keys
        self._buckets: dict[str, _Bucket] = {}

    def acquire(self, key: str) -> float:
        """Take one token for ``key``; return 0 if admitted, else the seconds until one is free."""
        now = self._clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= self._max_keys:
                self._prune(now)
            bucket = self._buckets[key] = _Bucket(float(self.rate.limit), now)
        else:
            elapsed = now - bucket.updated
            bucket.tokens = min(self.rate.limit, bucket.tokens + elapsed * self._refill_per_s)
            bucket.updated = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        return (1.0 - bucket.tokens) / self._refill_per_s

    async def admit(self, key: str) -> float:
        """``acquire`` (the ``Limiter`` protocol)."""
        return self.acquire(key)

    def remaining(self, key: str) -> int:
        """Whole tokens left for ``key`` right now (for headers and tests)."""
        bucket = self._buckets.get(key)
        if bucket is None:
            return self.rate.limit
        elapsed = self._clock() - bucket.updated
        return int(min(self.rate.limit, bucket.tokens + elapsed * self._refill_per_s))

    def _prune(self, now: float) -> None:
        # A bucket that has refilled completely carries no state worth keeping.
        full_after = self.rate.period_s
        stale = [k for k, b in self._buckets.items() if now - b.updated >= full_after]
        for key in stale:
            del self._buckets[key]
        if len(self._buckets) >= self._max_keys:
            # Everyone is active (e.g. a flood of random keys): forget the oldest half.
            by_age = sorted(self._buckets, key=lambda k: self._buckets[k].updated)
            for key in by_age[: len(by_age) // 2]:
                del self._buckets[key]


def caller_key(scope: Scope) -> str:
    """Identify the caller: a digest of the bearer key, else the client address."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, credential = value.partition(b" ")
            if scheme.lower() == b"bearer" and credential.strip():
                # A digest so plaintext keys are not kept in a long-lived dict.
                return "key:" + hashlib.blake2b(credential.strip(), digest_size=16).hexdigest()
            break
    client = scope.get("client")
    return f"ip:{client[0]}" if client else "ip:unknown"


def rate_limited_body(rate: RateLimit, retry_after_s: int) -> bytes:
    """The 429 body in the OpenAI error envelope."""
    message = (
        f"Rate limit reached: {rate.limit} requests per {rate.period_s:g} s for this API key. "
        f"Retry after {retry_after_s} s."
    )
    return error_body(message, "requests", "rate_limit_exceeded")


class RateLimitMiddleware:
    """Reject requests over the caller's rate with 429, ``retry-after`` and the OpenAI envelope."""

    def __init__(
        self,
        app: ASGIApp,
        limiter: Limiter,
        exempt_paths: Iterable[str] = DEFAULT_EXEMPT,
        on_limited: Callable[[], None] | None = None,
    ) -> None:
        self.app = app
        self.limiter = limiter
        self.exempt_paths = frozenset(exempt_paths)
        self.on_limited = on_limited

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.exempt_paths:
            await self.app(scope, receive, send)
            return
        wait_s = await self.limiter.admit(caller_key(scope))
        if wait_s <= 0.0:
            await self.app(scope, receive, send)
            return
        if self.on_limited is not None:
            self.on_limited()
        retry_after = max(1, math.ceil(wait_s))
        rate = self.limiter.rate
        headers = [
            (b"retry-after", str(retry_after).encode()),
            (b"x-ratelimit-limit-requests", str(rate.limit).encode()),
            (b"x-ratelimit-remaining-requests", b"0"),
            (b"x-should-retry", b"true"),
        ]
        await send_error(send, 429, rate_limited_body(rate, retry_after), headers)
