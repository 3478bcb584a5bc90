"""A run's API shape, built straight from its columns (the hot path's answer and final event)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from app.db.models import Run
from app.runtime.approvals import required_action


def run_public(run: Run) -> dict[str, Any]:
    """The API shape of a run (JSON-ready): ``RunPublic(...).model_dump(mode="json")``, built
    directly (the run's JSON columns already hold JSON-ready values; tests check both agree)."""
    prompt, completion = run.prompt_tokens, run.completion_tokens
    return {
        "id": run.id,
        "session_id": run.session_id,
        "agent": run.agent,
        "status": run.status,
        "stop_reason": run.stop_reason,
        "input": run.input,
        "output": run.output,
        "error": run.error,
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
        "created_at": iso(run.created_at),
        "started_at": iso(run.started_at),
        "finished_at": iso(run.finished_at),
        "required_action": required_action(run.pending),
        "trace_id": (run.options or {}).get("trace_id"),  # set when tracing is on
    }


def iso(value: datetime | None) -> str | None:
    """A datetime as pydantic's JSON mode writes it (UTC as ``Z``)."""
    if value is None:
        return None
    text = value.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def columns(run: Run) -> dict[str, Any]:
    """Every column of ``run`` (a Core insert of a transient Run)."""
    return {column.key: getattr(run, column.key) for column in Run.__mapper__.column_attrs}
