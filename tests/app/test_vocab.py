"""The run vocabulary is defined once (app/schemas/vocab.py) and everything reads it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from app.main import create_app
from app.schemas.vocab import (
    ACTIVE,
    BUSY,
    END_EVENT,
    ENDS_STREAM,
    TERMINAL,
    WAITING,
    CancelMode,
    EventType,
    MultitaskStrategy,
    RunStatus,
    StopReason,
    StrategyName,
    cancel_outcome,
    ends_stream,
)
from tests.app.conftest import migrated_pg_database

DOCS = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def test_every_final_status_has_the_event_that_ends_its_stream() -> None:
    assert set(ACTIVE) | set(WAITING) | set(TERMINAL) == set(RunStatus)
    assert not set(ACTIVE) & set(TERMINAL) and not set(WAITING) & set(TERMINAL)
    assert set(BUSY) == set(ACTIVE) | set(WAITING)
    for status in (*TERMINAL, *WAITING):  # a waiting run's stream ends too (it resumes later)
        assert END_EVENT[status].ends_stream, status
    assert set(END_EVENT) == set(TERMINAL) | set(WAITING)


def test_ends_stream_is_derived_from_the_members() -> None:
    assert {e for e in EventType if e.ends_stream} == set(ENDS_STREAM)
    assert ends_stream("run.completed") and ends_stream(EventType.ERROR)
    assert not ends_stream("message.delta") and not ends_stream("no.such.event")


def test_the_published_schema_and_the_docs_use_the_vocabulary() -> None:
    schema = create_app().openapi()
    published = schema["components"]["schemas"]["RunStatus"]["enum"]
    assert published == [s.value for s in RunStatus]
    text = DOCS.read_text()
    missing = [e.value for e in EventType if not re.search(rf"`{re.escape(e.value)}[`\s]", text)]
    assert not missing, f"docs/api.md does not describe the events {missing}"


def test_strategies_cancel_modes_and_stop_reasons_are_one_vocabulary() -> None:
    assert get_args(StrategyName) == tuple(m.value for m in MultitaskStrategy)
    post = create_app().openapi()["paths"]["/v1/sessions/{session_id}/messages"]["post"]
    body = post["requestBody"]["content"]["application/json"]["schema"]
    assert body["properties"]["multitask_strategy"]["enum"] == list(MultitaskStrategy)
    # Every way a run is stopped from outside is a stop reason, and has one final status: the
    # runtime's task (execution) and the closing of a run nobody runs (orphans) both read it.
    assert {m.value for m in CancelMode} <= {r.value for r in StopReason}
    assert all(m.status in TERMINAL for m in CancelMode)
    assert cancel_outcome("approval_timeout") == (RunStatus.CANCELLED, False)
    assert cancel_outcome("client_disconnected") == (RunStatus.CANCELLED, False)
    assert cancel_outcome("interrupt") == (RunStatus.INTERRUPTED, True)
    assert cancel_outcome("no-such-mode") == (RunStatus.INTERRUPTED, False)


@pytest.mark.postgres
async def test_the_sql_admission_function_uses_the_vocabulary() -> None:
    """``agentstation_admit`` (migrations) names statuses in SQL: the busy set it reads is
    ``BUSY``, the waiting one ``WAITING``, and the statuses it writes are active ones."""
    async with migrated_pg_database() as url:
        engine = create_async_engine(url)
        try:
            async with engine.connect() as conn:
                source = await conn.scalar(
                    sa.text("SELECT pg_get_functiondef('agentstation_admit'::regproc)")
                )
        finally:
            await engine.dispose()
    busy = re.search(r"r\.status IN \(([^)]*)\)", source)
    assert busy is not None
    assert re.findall(r"'(\w+)'", busy.group(1)) == [s.value for s in BUSY]
    waiting = re.findall(r"r\.status = '(\w+)'", source)
    assert waiting == [s.value for s in WAITING]
    written = set(re.findall(r"v_status (?::=|=) '(\w+)'", source))
    assert written and written <= {s.value for s in ACTIVE}
    # The strategies reach it as two flags (app/runtime/store/postgres.py): reject, and
    # enqueue behind a run waiting for approval; interrupt and rollback are admitted.
    assert "p_reject boolean" in source and "p_wait_busy boolean" in source
