"""Fixtures for the resilience suite: fresh PostgreSQL databases and a private cluster."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from app.db.migrate import upgrade
from tests.app.conftest import PG_URL, _drop_pg_database, _fresh_pg_database
from tests.resilience.procs import PrivatePostgres


@pytest.fixture
def shared_pg_url() -> Iterator[str]:
    """A new, migrated database on the shared test server (dropped afterwards)."""
    if not PG_URL:
        pytest.fail("AGENTSTATION_TEST_DATABASE_URL is not set (deselect with -m 'not postgres')")
    url = asyncio.run(_fresh_pg_database())
    try:
        upgrade(url)
        yield url
    finally:
        asyncio.run(_drop_pg_database(url))


@pytest.fixture
def private_pg() -> Iterator[PrivatePostgres]:
    """A throw-away PostgreSQL cluster of our own (migrated), safe to stop and restart."""
    pg = PrivatePostgres()
    try:
        pg.init()
        upgrade(pg.url)
        yield pg
    finally:
        pg.destroy()
