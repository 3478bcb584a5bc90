"""An experiment, not the product: the gateway with the hot-spot fixes the profiles suggest.

``python -m bench.patched_gateway serve`` runs ``agentstation serve`` after monkeypatching, in
this process only, the fixes listed in bench/README.md (hot spots), so their effect can be
measured before anyone edits app/: ``BENCH_GATEWAY_PATCHED=1 python -m bench gateway proxy``.
Each patch is named in ``BENCH_GATEWAY_PATCHED`` (comma list, or 1 for all): ``auth``,
``agents``, ``pool``. (The ``aiohttp`` patch became real: app/models/openai_backend.py.)
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

TTL_S = 2.0


def patch_auth() -> None:
    """Cache ``any_stored_key`` for TTL_S (one SELECT per request today)."""
    from app.services.auth import Authenticator

    original = Authenticator.any_stored_key
    cache: dict[int, tuple[float, bool]] = {}

    async def any_stored_key(self: Authenticator, db: Any) -> bool:
        hit = cache.get(id(self))
        if hit is not None and time.monotonic() - hit[0] < TTL_S:
            return hit[1]
        found = await original(self, db)
        cache[id(self)] = (time.monotonic(), found)
        return found

    Authenticator.any_stored_key = any_stored_key  # type: ignore[method-assign]


def patch_agents() -> None:
    """Cache each tenant's agents for TTL_S (every chat request loads them all today)."""
    from app.api import openai

    original = openai._agents
    cache: dict[str, tuple[float, Any]] = {}

    async def agents(state: Any, tenant_id: str) -> Any:
        hit = cache.get(tenant_id)
        if hit is not None and time.monotonic() - hit[0] < TTL_S:
            return hit[1]
        rows = await original(state, tenant_id)
        cache[tenant_id] = (time.monotonic(), rows)
        return rows

    openai._agents = agents


def patch_pool() -> None:
    """SQLite: one pooled connection (writers queue in-process); PostgreSQL: a larger pool."""
    import app.main
    from app.db import engine as db_engine

    original = db_engine.create_engine

    def create_engine(url: str, **kwargs: Any) -> Any:
        if url.startswith("sqlite"):
            kwargs.setdefault("pool_size", 1)
            kwargs.setdefault("max_overflow", 0)
        else:
            kwargs.setdefault("pool_size", 40)
            kwargs.setdefault("max_overflow", 20)
        return original(url, **kwargs)

    db_engine.create_engine = create_engine
    app.main.create_engine = create_engine  # type: ignore[attr-defined]


PATCHES = {"auth": patch_auth, "agents": patch_agents, "pool": patch_pool}


def main() -> int:
    """Apply the selected patches, then run the real CLI."""
    chosen = os.environ.get("BENCH_GATEWAY_PATCHED", "1")
    names = list(PATCHES) if chosen in ("1", "all") else chosen.split(",")
    for name in names:
        PATCHES[name.strip()]()
    print(f"bench.patched_gateway: patches {names}", file=sys.stderr)
    from app.cli import main as cli_main

    return int(cli_main(sys.argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
