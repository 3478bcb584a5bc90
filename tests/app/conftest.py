"""Gateway fixtures: an app on SQLite, and on PostgreSQL (AGENTSTATION_TEST_DATABASE_URL)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import sqlalchemy as sa
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import create_async_engine

from app.db.migrate import upgrade
from app.main import create_app
from app.settings import Settings
from tests.lifespan import LifespanManager

PG_URL = os.environ.get("AGENTSTATION_TEST_DATABASE_URL")
KEY_A, KEY_B = "key-tenant-a", "key-tenant-b"

MODELS = [
    {"name": "echo", "backend": "scripted"},
    {"name": "poet", "backend": "scripted", "replies": ["Roses are red.", "Violets are blue."]},
    {
        "name": "slow",
        "backend": "scripted",
        "replies": ["one two three four five six seven eight nine ten"],
        "chunk_delay_s": 0.2,
    },
]


def _backends() -> list[Any]:
    params: list[Any] = ["sqlite"]
    params.append(pytest.param("postgres", marks=[pytest.mark.postgres]))
    return params


async def _fresh_pg_database() -> str:
    """A new, empty database next to the test one (dropped at the end of the session)."""
    assert PG_URL is not None
    name = f"agentstation_t_{uuid.uuid4().hex[:12]}"
    admin = create_async_engine(PG_URL, isolation_level="AUTOCOMMIT")
    async with admin.connect() as conn:
        await conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    await admin.dispose()
    return PG_URL.rsplit("/", 1)[0] + "/" + name


async def _drop_pg_database(url: str) -> None:
    assert PG_URL is not None
    name = url.rsplit("/", 1)[1]
    admin = create_async_engine(PG_URL, isolation_level="AUTOCOMMIT")
    async with admin.connect() as conn:
        await conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    await admin.dispose()


@pytest.fixture(params=_backends())
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A migrated, empty database: SQLite in tmp_path, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'test.db'}"
        await asyncio.to_thread(upgrade, url)
        yield url
        return
    async with migrated_pg_database() as url:
        yield url


@asynccontextmanager
async def migrated_pg_database() -> AsyncIterator[str]:
    """A fresh, migrated PostgreSQL database, dropped after the block."""
    if not PG_URL:
        pytest.fail("AGENTSTATION_TEST_DATABASE_URL is not set (deselect with -m 'not postgres')")
    url = await _fresh_pg_database()
    try:
        await asyncio.to_thread(upgrade, url)
        yield url
    finally:
        await _drop_pg_database(url)


def make_settings(database_url: str, **overrides: Any) -> Settings:
    """Test settings: two tenants, scripted models, no sandbox, fast flushes."""
    values: dict[str, Any] = {
        "database_url": database_url,
        "models": json.dumps(MODELS),
        "api_keys": f"a:{KEY_A},b:{KEY_B}",
        "sandbox_enabled": False,
        "access_log": False,
        "event_flush_s": 0.05,
        "event_store_s": 0.05,
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
def settings_factory(database_url: str) -> Callable[..., Settings]:
    """Build settings on the test database."""
    return lambda **kw: make_settings(database_url, **kw)


@pytest.fixture
async def app(settings_factory: Callable[..., Settings]) -> AsyncIterator[FastAPI]:
    """A started app."""
    application = create_app(settings_factory())
    async with LifespanManager(application):
        yield application


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """Tenant ``a``'s client."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://test", headers={"Authorization": f"Bearer {KEY_A}"}
    ) as c:
        yield c


def client_for(app: FastAPI, key: str = KEY_A) -> openai.AsyncOpenAI:
    """The official ``openai`` client on the app, with ``key``."""
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t/v1")
    return openai.AsyncOpenAI(api_key=key, base_url="http://t/v1", http_client=http)


@pytest.fixture
async def oai(app: FastAPI) -> AsyncIterator[openai.AsyncOpenAI]:
    """Tenant ``a``'s ``openai`` client."""
    client = client_for(app)
    yield client
    await client.close()


@pytest.fixture
async def client_b(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """Tenant ``b``'s client."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://test", headers={"Authorization": f"Bearer {KEY_B}"}
    ) as c:
        yield c


@pytest.fixture
async def replicas() -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    """Two apps (replicas) on one fresh PostgreSQL database, a client for each."""
    if not PG_URL:
        pytest.fail("AGENTSTATION_TEST_DATABASE_URL is not set (deselect with -m 'not postgres')")
    url = await _fresh_pg_database()
    await asyncio.to_thread(upgrade, url)
    one, two = create_app(make_settings(url)), create_app(make_settings(url))
    headers = {"Authorization": f"Bearer {KEY_A}"}
    try:
        async with LifespanManager(one), LifespanManager(two):
            async with (
                httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=one), base_url="http://1", headers=headers
                ) as c1,
                httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=two), base_url="http://2", headers=headers
                ) as c2,
            ):
                yield c1, c2
    finally:
        await _drop_pg_database(url)


async def make_agent(
    client: httpx.AsyncClient, name: str = "helper", model: str = "echo", **spec: Any
) -> dict[str, Any]:
    """Create an agent and return it."""
    resp = await client.post(
        "/v1/agents", json={"name": name, "spec": {"kind": "agent", "model": model, **spec}}
    )
    assert resp.status_code == 201, resp.text
    data: dict[str, Any] = resp.json()
    return data


async def make_session(client: httpx.AsyncClient, agent: str = "helper", **body: Any) -> str:
    """Create a session and return its id."""
    resp = await client.post("/v1/sessions", json={"agent": agent, **body})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


def parse_sse(text: str) -> list[dict[str, Any]]:
    """SSE frames as dicts (id, event, data parsed as JSON, retry, comment)."""
    frames = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        frame: dict[str, Any] = {}
        for line in block.split("\n"):
            if not line:
                continue
            if line.startswith(":"):
                frame["comment"] = line[1:].strip()
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            frame[field] = json.loads(value) if field == "data" else value
        if frame:
            frames.append(frame)
    return frames


async def wait_runs(client: httpx.AsyncClient, sid: str, count: int) -> None:
    """Until the session has ``count`` runs (queued ones included)."""
    for _ in range(1000):
        if len((await client.get(f"/v1/sessions/{sid}/runs")).json()["data"]) >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"session {sid} never had {count} runs")


@pytest.fixture
def base_dir() -> Iterator[Path]:
    """A sandbox base directory (set it as ``AGENTSTATION_SANDBOX_BASE_DIR``)."""
    base = Path(tempfile.mkdtemp(prefix="agentstation-app-"))
    base.chmod(0o711)  # sandbox uids must traverse it
    yield base
    shutil.rmtree(base, ignore_errors=True)


@asynccontextmanager
async def sandboxed_client(app: FastAPI, wait: bool = True) -> AsyncIterator[httpx.AsyncClient]:
    """The app started (kernel pool included) and a client with tenant A's key; ``wait``: until
    the pool's self-test, which runs in the background, has set the sandbox level."""
    async with LifespanManager(app, startup_timeout=60, shutdown_timeout=30):
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {KEY_A}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://t", headers=headers, timeout=60
        ) as c:
            for _ in range(600 if wait else 0):
                if (await c.get("/readyz")).json()["sandbox"]["level"] is not None:
                    break
                await asyncio.sleep(0.05)
            yield c
