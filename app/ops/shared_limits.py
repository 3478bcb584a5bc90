"""Rate limits shared by a fleet of replicas on one PostgreSQL database (no Redis).

``PgRateLimiter`` keeps the token bucket of ``TokenBucketLimiter`` (a burst of ``limit``,
refilled at ``limit / period``) as GCRA: one row per caller holding its *theoretical arrival
time* ``tat``. A request is admitted when ``max(tat, now) + T - now <= period`` (``T`` =
``period / limit``), and then ``tat`` moves to ``max(tat, now) + T``: one
``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` per request, which PostgreSQL runs atomically
per row, so the count is exact whichever replica each request reaches. ``now`` is the
database's clock (one clock for the fleet), unless a ``clock`` is given (tests).

The one speed-up kept per replica is exact too: a refused caller cannot be admitted before
its retry-after (``tat`` only grows), so until then its requests are refused here without a
statement. While the database cannot be reached, each replica counts in process (its own
bucket per caller): requests that need no database (raw models) go on being served and
limited, per replica, instead of failing. The choice between the two limiters is made once, at
start-up (``FleetLimiter``). This is the only module with PostgreSQL-specific rate-limit
statements.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db import raw
from app.ops.ratelimit import RateLimit, TokenBucketLimiter

log = logging.getLogger(__name__)

# $1 key, $2 now (NULL: the database's clock), $3 T = period / limit, $4 period.
# ``ok`` says whether this request was admitted; ``tat`` is the caller's state after it (for a
# refusal, as of the statement's snapshot: never later than the truth, so the retry-after
# derived from it is never too long).
ADMIT = """
WITH now AS (SELECT COALESCE($2::float8, extract(epoch FROM clock_timestamp())::float8) AS t),
up AS (
    INSERT INTO rate_limits AS r (key, tat)
    SELECT $1, now.t + $3::float8 FROM now
    ON CONFLICT (key) DO UPDATE
        SET tat = GREATEST(r.tat, (SELECT t FROM now)) + $3::float8
        WHERE GREATEST(r.tat, (SELECT t FROM now)) + $3::float8 - (SELECT t FROM now)
              <= $4::float8
    RETURNING r.tat
)
SELECT true AS ok, up.tat, (SELECT t FROM now) AS now FROM up
UNION ALL
SELECT false, r.tat, (SELECT t FROM now) FROM rate_limits r
WHERE r.key = $1 AND NOT EXISTS (SELECT 1 FROM up)
"""
# Rows whose tat is past carry nothing (the same as no row).
PRUNE = "DELETE FROM rate_limits WHERE tat < COALESCE($1::float8, extract(epoch FROM now()))"


class PgRateLimiter:
    """GCRA counters in the ``rate_limits`` table (migration 0009), one statement a request."""

    def __init__(
        self,
        rate: RateLimit,
        engine: AsyncEngine,
        clock: Callable[[], float] | None = None,
        prune_every_s: float = 300.0,
        max_blocked: int = 100_000,
    ) -> None:
        self.rate = rate
        self.engine = engine
        self.clock = clock  # None: the database's clock
        self._interval = rate.period_s / rate.limit
        self._blocked: dict[str, float] = {}  # key -> monotonic time before which it is refused
        self._max_blocked = max_blocked
        self._prune_every_s = prune_every_s
        self._next_prune = time.monotonic() + prune_every_s
        self.fallback = TokenBucketLimiter(rate)  # while the database is unreachable
        self._warned_at = -1e9

    def _now(self) -> float | None:
        return self.clock() if self.clock is not None else None

    def _local_now(self) -> float:
        return self.clock() if self.clock is not None else time.monotonic()

    async def admit(self, key: str) -> float:
        """0 if admitted (counted in the database), else the seconds until one would be."""
        until = self._blocked.get(key)
        if until is not None:
            left = until - self._local_now()
            if left > 0:
                return left
            del self._blocked[key]
        try:
            async with raw.pooled(self.engine) as pg:
                row = await raw.fetchrow(
                    pg, ADMIT, key, self._now(), self._interval, self.rate.period_s
                )
                if time.monotonic() >= self._next_prune:
                    self._next_prune = time.monotonic() + self._prune_every_s
                    await raw.execute(pg, PRUNE, self._now())
        except (SQLAlchemyError, OSError, TimeoutError) as exc:
            return self._unshared(key, exc)
        if row is None or row["ok"]:
            return 0.0  # (no row: pruned between the two parts; admitted by the next request)
        wait = float(row["tat"]) + self._interval - self.rate.period_s - float(row["now"])
        wait = max(wait, 0.001)
        if len(self._blocked) >= self._max_blocked:
            self._blocked.clear()  # a cache: forgetting only costs statements
        self._blocked[key] = self._local_now() + wait
        return wait

    def _unshared(self, key: str, exc: BaseException) -> float:
        """Count in this process while the database is unreachable (warned once a minute)."""
        if time.monotonic() - self._warned_at >= 60.0:
            self._warned_at = time.monotonic()
            log.warning("rate limits count per replica: the database is unreachable (%s)", exc)
        return self.fallback.acquire(key)


class FleetLimiter:
    """The middleware's limiter: in this process until ``bind`` sees a PostgreSQL engine.

    The middleware is installed when the app is created, the database engine exists only in
    the lifespan: ``bind`` (at start-up) makes the choice once by replacing ``admit``.
    """

    def __init__(self, rate: RateLimit, clock: Callable[[], float] | None = None) -> None:
        self.rate = rate
        self.clock = clock  # tests: a shared fake clock (seconds); None: the database's
        self.local = TokenBucketLimiter(rate, clock=clock or time.monotonic)
        self.shared: PgRateLimiter | None = None
        self.admit = self.local.admit

    def bind(self, engine: AsyncEngine, shared: bool) -> None:
        """Count in the database when replicas share it (``RunManager.shared``: PostgreSQL;
        the run store decides), the fleet's one counter."""
        if shared:
            self.shared = PgRateLimiter(self.rate, engine, self.clock)
            self.admit = self.shared.admit
        else:
            self.shared = None
            self.admit = self.local.admit
