"""The run vocabulary, defined once: a run's statuses, the types of its stream's events, the
multitask strategies, the modes a run is cancelled with and the reasons a run stops.

Everything else derives from these enums: the active and terminal status sets, which events
end a stream and which status each run-ending event reports, the final status of each cancel
mode. Adding an event type is one member here (with its ``ends_stream`` flag) and the code
that emits it; followers, the OpenAI front door and A2A read the flags, not lists of strings.
The SQL admission function (``agentstation_admit``, migrations) uses the same strings;
tests/app/test_vocab.py checks it against these enums.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal


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


class MultitaskStrategy(StrEnum):
    """What a new message does to a busy session (docs/api.md, "Multitasking"): ``reject``
    (409 ``session_busy``), ``enqueue`` (runs after the session's runs), ``interrupt`` (the
    running run stops, keeping what it completed), ``rollback`` (it stops and is undone)."""

    REJECT = "reject"
    ENQUEUE = "enqueue"
    INTERRUPT = "interrupt"
    ROLLBACK = "rollback"


# The strategies as request schemas declare them (plain strings in the OpenAPI document);
# tests/app/test_vocab.py checks they are the members above.
StrategyName = Literal["reject", "enqueue", "interrupt", "rollback"]


class CancelMode(StrEnum):
    """Why a run was stopped from outside: its ``stop_reason``. A member is the mode, the final
    status it gives the run, and whether the messages the run completed stay in memory."""

    status: RunStatus
    keeps_messages: bool

    def __new__(cls, value: str, status: RunStatus, keeps_messages: bool) -> CancelMode:
        member = str.__new__(cls, value)
        member._value_ = value
        member.status = status
        member.keeps_messages = keeps_messages
        return member

    CANCELLED = "cancelled", RunStatus.CANCELLED, False  # POST /v1/runs/{id}/cancel, A2A, ...
    CLIENT_DISCONNECTED = "client_disconnected", RunStatus.CANCELLED, False  # on_disconnect
    ROLLBACK = "rollback", RunStatus.CANCELLED, False  # a new message's ``rollback``
    APPROVAL_TIMEOUT = "approval_timeout", RunStatus.CANCELLED, False  # nobody decided in time
    INTERRUPT = "interrupt", RunStatus.INTERRUPTED, True  # a new message's ``interrupt``
    SHUTDOWN = "shutdown", RunStatus.INTERRUPTED, False  # this server stopped
    SERVER_RESTART = "server_restart", RunStatus.INTERRUPTED, False  # left by a dead process
    REPLICA_LOST = "replica_lost", RunStatus.INTERRUPTED, False  # its replica stopped beating

    @classmethod
    def parse(cls, value: str) -> CancelMode | None:
        """The member named by ``value`` (a stored or published string), None if unknown."""
        member = cls._value2member_map_.get(value)
        return member if isinstance(member, CancelMode) else None


def cancel_outcome(mode: str) -> tuple[RunStatus, bool]:
    """(final status, messages kept) of a run stopped with ``mode`` (an unknown mode:
    ``interrupted``, nothing kept)."""
    member = CancelMode.parse(mode)
    if member is None:
        return RunStatus.INTERRUPTED, False
    return member.status, member.keeps_messages


class StopReason(StrEnum):
    """A run's ``stop_reason``: how it ended (or paused). Every ``CancelMode`` is one too."""

    END = "end"  # the agent answered
    LENGTH = "length"  # the answer's model call hit its max tokens
    REQUIRES_ACTION = "requires_action"  # waits for a person's decision about tool calls
    BUDGET_EXCEEDED = "budget_exceeded"  # a token budget was spent (what it produced is kept)
    ERROR = "error"  # it failed (``error`` says why)
    CANCELLED = CancelMode.CANCELLED.value
    CLIENT_DISCONNECTED = CancelMode.CLIENT_DISCONNECTED.value
    ROLLBACK = CancelMode.ROLLBACK.value
    APPROVAL_TIMEOUT = CancelMode.APPROVAL_TIMEOUT.value
    INTERRUPT = CancelMode.INTERRUPT.value
    SHUTDOWN = CancelMode.SHUTDOWN.value
    SERVER_RESTART = CancelMode.SERVER_RESTART.value
    REPLICA_LOST = CancelMode.REPLICA_LOST.value
