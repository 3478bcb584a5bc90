"""The raw statements' connections (``raw.checkout``, ``raw.pooled``) fail as ``engine.connect()``
does when the database refuses new connections (a restart: "the database system is starting
up"): a SQLAlchemy ``DBAPIError``, answered 503 ``database_unavailable``, nothing held after."""

from __future__ import annotations

from typing import Any

import asyncpg
import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.exc import DBAPIError

from app.db import raw
from tests.app.conftest import make_agent, make_session
from tests.app.test_turn_cost import engine_of, settle, turn

pytestmark = pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)


def _refusing(app: FastAPI, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every new checkout fails as a connection attempt during a restart does."""
    sync = engine_of(app).sync_engine

    def refuse() -> Any:
        # What the asyncpg adapter raises then: its own Error, from the driver's.
        words = "the database system is starting up"
        try:
            raise asyncpg.exceptions.CannotConnectNowError(words)
        except asyncpg.exceptions.CannotConnectNowError as cause:
            raise sync.dialect.loaded_dbapi.Error(words) from cause

    monkeypatch.setattr(sync, "raw_connection", refuse)


async def test_a_checkout_refused_is_a_sqlalchemy_error(
    app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    _refusing(app, monkeypatch)
    with pytest.raises(DBAPIError):
        await raw.checkout(engine_of(app))
    with pytest.raises(DBAPIError):
        async with raw.pooled(engine_of(app)):
            pass


async def test_a_creation_and_a_turn_refused_a_connection_are_503(
    app: FastAPI, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await make_agent(client)
    sid = await make_session(client)
    await turn(client, sid)  # kept in process: the next turn's first statement is its admission
    with monkeypatch.context() as patch:
        _refusing(app, patch)
        created = await client.post("/v1/sessions", json={"agent": "helper"})
        turned = await client.post(f"/v1/sessions/{sid}/messages", json={"message": "hi"})
    for resp in (created, turned):
        assert resp.status_code == 503, resp.text
        assert resp.json()["error"]["code"] == "database_unavailable"
    await turn(client, sid)  # nothing held by the refused requests
    await settle(app)
    assert engine_of(app).sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]
