"""``app.runtime.public``: a run whose columns are all loaded is read from its instance dict;
its shape and its columns are what reading its attributes gives, and a run with columns not
loaded still reads them as attributes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from app.db.base import transient
from app.db.models import Run
from app.runtime.public import columns, run_public

NOW = datetime(2026, 12, 1, 21, 0, tzinfo=UTC)
VALUES: dict[str, Any] = {
    "id": "resp_1",
    "tenant_id": "t",
    "session_pk": "pk",
    "session_id": "chain_1",
    "agent": "responses.m",
    "agent_version": 1,
    "status": "completed",
    "stop_reason": "end",
    "input": {"content": "hi", "sender": "user"},
    "output": {"content": "hello", "sender": "agent"},
    "error": None,
    "options": {"trace_id": "abc", "source": "responses"},
    "prompt_tokens": 3,
    "completion_tokens": 5,
    "idempotency_key": None,
    "created_at": NOW,
    "started_at": NOW,
    "finished_at": NOW,
    "seq_reserved": 64,
    "pending": {"tool_calls": [{"id": "c1", "name": "f", "arguments": "{}"}]},
}


def _by_attributes(run: Run) -> dict[str, Any]:
    return {c.key: getattr(run, c.key) for c in Run.__mapper__.column_attrs}


def test_a_loaded_run_reads_as_through_its_attributes() -> None:
    run = transient(Run, **VALUES)
    assert columns(run) == _by_attributes(run)
    assert list(columns(run)) == [c.key for c in Run.__mapper__.column_attrs]
    shape = run_public(run)
    assert shape["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
    assert shape["trace_id"] == "abc"
    assert shape["finished_at"] == "2026-12-01T21:00:00Z"
    assert shape["required_action"] is not None
    assert shape["output"] == VALUES["output"]


def test_a_run_with_columns_not_loaded_reads_its_attributes() -> None:
    partial = {k: v for k, v in VALUES.items() if k not in ("pending", "seq_reserved", "error")}
    run = transient(Run, **partial)
    assert columns(run) == _by_attributes(run)
    assert columns(run)["pending"] is None and columns(run)["seq_reserved"] is None
    full = run_public(transient(Run, **{**partial, "pending": None, "error": None}))
    assert run_public(run) == full
