"""A run's API shape, built straight from its columns (the hot path's answer and final event)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from app.db.models import Run
from app.runtime.approvals import required_action

# The columns ``run_public`` reads. A run whose values are all loaded (the transient run of an
# admission, a run finished here) is read from its instance dict: each ORM attribute read is a
# Python call, ~16 per shape, twice per turn (issue 25); any other goes through the attributes.
_PUBLIC = frozenset(
    {"id", "session_id", "agent", "status", "stop_reason", "input", "output", "error",
     "prompt_tokens", "completion_tokens", "created_at", "started_at", "finished_at", "pending",
     "options"}
)  # fmt: skip


class _Attributes:
    """``run``'s attributes by key (a run whose values are not all loaded)."""

    __slots__ = ("run",)

    def __init__(self, run: Run) -> None:
        self.run = run

    def __getitem__(self, key: str) -> Any:
        return getattr(self.run, key)


def run_public(run: Run) -> dict[str, Any]:
    """The API shape of a run (JSON-ready): ``RunPublic(...).model_dump(mode="json")``, built
    directly (the run's JSON columns already hold JSON-ready values; tests check both agree)."""
    state: Any = run.__dict__
    col = state if _PUBLIC <= state.keys() else _Attributes(run)
    prompt, completion = col["prompt_tokens"], col["completion_tokens"]
    return {
        "id": col["id"],
        "session_id": col["session_id"],
        "agent": col["agent"],
        "status": col["status"],
        "stop_reason": col["stop_reason"],
        "input": col["input"],
        "output": col["output"],
        "error": col["error"],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
        "created_at": iso(col["created_at"]),
        "started_at": iso(col["started_at"]),
        "finished_at": iso(col["finished_at"]),
        "required_action": required_action(col["pending"]),
        "trace_id": (col["options"] or {}).get("trace_id"),  # set when tracing is on
    }


def iso(value: datetime | None) -> str | None:
    """A datetime as pydantic's JSON mode writes it (UTC as ``Z``)."""
    if value is None:
        return None
    text = value.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


_KEYS: list[tuple[str, ...]] = []  # Run's column keys, in the mapper's order (once mapped)


def columns(run: Run) -> dict[str, Any]:
    """Every column of ``run`` (a Core insert of a transient Run)."""
    if not _KEYS:
        _KEYS.append(tuple(column.key for column in Run.__mapper__.column_attrs))
    keys = _KEYS[0]
    state = run.__dict__
    if state.keys() >= set(keys):  # all set (the admission's run): no attribute reads
        return {key: state[key] for key in keys}
    return {key: getattr(run, key) for key in keys}
