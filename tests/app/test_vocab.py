"""The run vocabulary is defined once (app/schemas/vocab.py) and everything reads it."""

from __future__ import annotations

import re
from pathlib import Path

from app.main import create_app
from app.schemas.vocab import (
    ACTIVE,
    BUSY,
    END_EVENT,
    ENDS_STREAM,
    TERMINAL,
    WAITING,
    EventType,
    RunStatus,
    ends_stream,
)

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
