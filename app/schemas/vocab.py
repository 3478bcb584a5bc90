"""The run vocabulary, defined once: a run's statuses and the types of its stream's events.

Everything else derives from these two enums: the active and terminal status sets, which
events end a stream and which status each run-ending event reports. Adding an event type is
one member here (with its ``ends_stream`` flag) and the code that emits it; followers, the
OpenAI front door and A2A read the flags, not lists of strings.
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """Where a run is. ``queued`` and ``running`` are active; ``requires_action`` waits for a
    person's decision about tool calls (no task, nothing held; the session stays busy); the
    rest are final."""

    QUEUED = "queued"
    RUNNING = "running"
    REQUIRES_ACTION = "requires_action"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"

    @property
    def active(self) -> bool:
        return self in ACTIVE

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


ACTIVE: tuple[RunStatus, ...] = (RunStatus.QUEUED, RunStatus.RUNNING)
# Stopped before tool calls until a person decides (POST /v1/runs/{id}/resume).
WAITING: tuple[RunStatus, ...] = (RunStatus.REQUIRES_ACTION,)
# The statuses that keep a session busy (new messages follow the multitask strategy).
BUSY: tuple[RunStatus, ...] = (*ACTIVE, *WAITING)
TERMINAL: tuple[RunStatus, ...] = tuple(s for s in RunStatus if s not in BUSY)


class EventType(StrEnum):
    """The ``event:`` of a run's SSE stream (docs/api.md, "Events"). A member is its type and
    whether a follower stops after it (the run, or its stream, has ended)."""

    ends_stream: bool

    def __new__(cls, value: str, ends_stream: bool = False) -> EventType:
        member = str.__new__(cls, value)
        member._value_ = value
        member.ends_stream = ends_stream
        return member

    RUN_CREATED = "run.created"
    MESSAGE_DELTA = "message.delta"
    MESSAGE = "message"
    RUN_GAP = "run.gap"
    # A tool's kernel was started afresh where the session had one before (its replica died or
    # changed, or the kernel stopped): earlier variables are gone (app/runtime/kernels.py).
    KERNEL_RESTARTED = "kernel.restarted"
    RUN_COMPLETED = "run.completed", True
    RUN_FAILED = "run.failed", True
    RUN_CANCELLED = "run.cancelled", True
    # The run stopped before tool calls a person must decide about; it goes on after
    # POST /v1/runs/{id}/resume, on the same event log (this stream ends here).
    RUN_REQUIRES_ACTION = "run.requires_action", True
    ERROR = "error", True  # a stream that could not go on (the run's own end is one of the above)


ENDS_STREAM: frozenset[EventType] = frozenset(e for e in EventType if e.ends_stream)
# The event that ends a run stream for each final status (an interrupted run reports
# run.cancelled with its status: the run stopped by request, not by a fault).
END_EVENT: dict[RunStatus, EventType] = {
    RunStatus.COMPLETED: EventType.RUN_COMPLETED,
    RunStatus.FAILED: EventType.RUN_FAILED,
    RunStatus.CANCELLED: EventType.RUN_CANCELLED,
    RunStatus.INTERRUPTED: EventType.RUN_CANCELLED,
    RunStatus.REQUIRES_ACTION: EventType.RUN_REQUIRES_ACTION,
}


def ends_stream(type_: str) -> bool:
    """Whether a stored or live event's type ends its stream (unknown types do not)."""
    return type_ in ENDS_STREAM
