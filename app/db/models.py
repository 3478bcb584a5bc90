"""Tables: tenants, API keys, agents (versioned), sessions, messages, runs and run events,
and the rest of the run store's (replicas, token holds, kernels, response continuations)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, UTCDateTime, utcnow

# Autoincrement 64-bit ids that SQLite also accepts as its rowid alias.
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
# Event ids a run reserves at a time (``Run.seq_reserved``); migration 0005 uses the same.
SEQ_BLOCK = 64


class Tenant(Base):
    """An isolated owner of agents, sessions and runs."""

    __tablename__ = "tenants"

    id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # Token budget over all the tenant's runs (None = unlimited) and the tokens used so far;
    # a counter, so deleting sessions does not give tokens back (app.ops.budget_store).
    token_budget: Mapped[int | None] = mapped_column(sa.BigInteger(), nullable=True)
    tokens_used: Mapped[int] = mapped_column(sa.BigInteger(), default=0, server_default="0")
    # Tokens held by the tenant's model calls in flight (app.ops.token_holds), fleet-wide.
    tokens_held: Mapped[int] = mapped_column(sa.BigInteger(), default=0, server_default="0")


class ApiKey(Base):
    """A tenant's API key, stored as a SHA-256 hash."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(
        sa.ForeignKey("tenants.id", ondelete="CASCADE"), index=True
    )
    key_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    prefix: Mapped[str] = mapped_column(sa.String(16))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    # The raw models this key may use (None: all); agents are the tenant's whatever the key.
    models: Mapped[list[str] | None] = mapped_column(sa.JSON(), nullable=True)


class Agent(Base):
    """An agent definition; ``spec`` is the current version's, older ones in agent_versions."""

    __tablename__ = "agents"
    __table_args__ = (sa.UniqueConstraint("tenant_id", "name"),)

    id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(sa.ForeignKey("tenants.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(sa.String(128))
    description: Mapped[str | None] = mapped_column(sa.Text(), nullable=True)
    version: Mapped[int] = mapped_column(sa.Integer(), default=1)
    spec: Mapped[dict[str, Any]] = mapped_column(sa.JSON())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class AgentVersion(Base):
    """One immutable version of an agent's spec (sessions pin the version they started on)."""

    __tablename__ = "agent_versions"

    agent_id: Mapped[str] = mapped_column(
        sa.ForeignKey("agents.id", ondelete="CASCADE"), primary_key=True
    )
    version: Mapped[int] = mapped_column(sa.Integer(), primary_key=True)
    spec: Mapped[dict[str, Any]] = mapped_column(sa.JSON())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Session(Base):
    """A conversation with one agent; ``id`` is public and unique per tenant."""

    __tablename__ = "sessions"
    __table_args__ = (sa.UniqueConstraint("tenant_id", "id"),)

    pk: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(sa.ForeignKey("tenants.id", ondelete="CASCADE"))
    id: Mapped[str] = mapped_column(sa.String(128))
    agent_id: Mapped[str] = mapped_column(
        sa.ForeignKey("agents.id", ondelete="CASCADE"), index=True
    )
    agent_version: Mapped[int] = mapped_column(sa.Integer())
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", sa.JSON(), default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, index=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # Bumped in every transaction that changes the session's messages: replicas compare it with
    # the revision of the memory they keep in process (app/runtime/memory_cache.py).
    memory_rev: Mapped[int] = mapped_column(sa.Integer(), default=0, server_default="0")


class Message(Base):
    """One stored AgentMessage of a session's state_dict: entry ``index`` of list ``key``."""

    __tablename__ = "messages"
    __table_args__ = (sa.UniqueConstraint("session_pk", "key", "index"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    session_pk: Mapped[str] = mapped_column(sa.ForeignKey("sessions.pk", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(sa.String(256))
    index: Mapped[int] = mapped_column(sa.Integer())
    data: Mapped[dict[str, Any]] = mapped_column(sa.JSON())
    run_id: Mapped[str | None] = mapped_column(sa.String(64), nullable=True, index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Run(Base):
    """One user message processed by a session's agent."""

    __tablename__ = "runs"
    __table_args__ = (
        sa.UniqueConstraint("tenant_id", "idempotency_key"),
        sa.Index("ix_runs_session_pk_status", "session_pk", "status"),
        # A session's latest run (the Responses chain end: app/services/responses_plan.py).
        sa.Index("ix_runs_session_pk_created_at", "session_pk", "created_at", "id"),
        # Runs waiting for approval (few): each replica's deadline check reads them often.
        sa.Index(
            "ix_runs_waiting",
            "status",
            postgresql_where=sa.text("status = 'requires_action'"),
            sqlite_where=sa.text("status = 'requires_action'"),
        ),
        # Active runs of one replica: a live replica sweeps a dead one's (migration 0010).
        sa.Index(
            "ix_runs_replica_active",
            "replica",
            postgresql_where=sa.text("status IN ('queued', 'running')"),
            sqlite_where=sa.text("status IN ('queued', 'running')"),
        ),
    )

    id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(sa.ForeignKey("tenants.id", ondelete="CASCADE"))
    session_pk: Mapped[str] = mapped_column(sa.ForeignKey("sessions.pk", ondelete="CASCADE"))
    session_id: Mapped[str] = mapped_column(sa.String(128))
    agent: Mapped[str] = mapped_column(sa.String(128))
    agent_version: Mapped[int] = mapped_column(sa.Integer())
    status: Mapped[str] = mapped_column(sa.String(16), default="queued")
    stop_reason: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)
    input: Mapped[dict[str, Any]] = mapped_column(sa.JSON())
    output: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON(), nullable=True)
    error: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON(), nullable=True)
    options: Mapped[dict[str, Any]] = mapped_column(sa.JSON(), default=dict)
    prompt_tokens: Mapped[int] = mapped_column(sa.Integer(), default=0)
    completion_tokens: Mapped[int] = mapped_column(sa.Integer(), default=0)
    idempotency_key: Mapped[str | None] = mapped_column(sa.String(256), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    # Event ids (``RunEvent.seq``) up to this one may have been sent to clients: a live run
    # sends no id above it, and recovery numbers its events after it (app/runtime/events.py).
    # New runs start with a block reserved (the default), raised in blocks while they stream.
    seq_reserved: Mapped[int] = mapped_column(
        sa.Integer(), default=SEQ_BLOCK, server_default=str(SEQ_BLOCK)
    )
    # A run waiting for a person (status ``requires_action``): its pending tool calls and where
    # its agent stopped (``app.runtime.approvals``); None otherwise.
    pending: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON(), nullable=True)
    # The replica that runs (or will run) it while active: on PostgreSQL the inserting
    # connection's ``agentstation.replica`` setting (the column's default, migration 0010);
    # set again by a replica that resumes it. None on SQLite (one process).
    replica: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)


class RunEvent(Base):
    """One event of a run's durable log; ``seq`` counts from 1 per run."""

    __tablename__ = "run_events"
    __table_args__ = (sa.UniqueConstraint("run_id", "seq"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(sa.ForeignKey("runs.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(sa.Integer())
    type: Mapped[str] = mapped_column(sa.String(32))
    data: Mapped[dict[str, Any]] = mapped_column(sa.JSON())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class RateLimitState(Base):
    """One rate-limited caller's GCRA state, shared by the fleet (app.ops.shared_limits).

    ``tat``: the theoretical arrival time (seconds since the epoch) of the caller's next
    request; a row whose ``tat`` is past is the same as no row (pruned). Unlogged on
    PostgreSQL (migration 0009): a crash forgets the counts, never a stored fact.
    """

    __tablename__ = "rate_limits"

    key: Mapped[str] = mapped_column(sa.String(200), primary_key=True)
    tat: Mapped[float] = mapped_column(sa.Float(precision=53))


class Replica(Base):
    """A running gateway replica and its heartbeat (app/runtime/liveness.py)."""

    __tablename__ = "replicas"

    id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    state: Mapped[str] = mapped_column(sa.String(16), default="live", server_default="live")
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    beat_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class TokenHold(Base):
    """A model call in flight of a tenant with a token budget: the tokens it holds
    (app/ops/token_holds.py); given back by its end, or by the sweep of its dead replica."""

    __tablename__ = "token_holds"

    id: Mapped[str] = mapped_column(sa.String(32), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(
        sa.String(64), sa.ForeignKey("tenants.id", ondelete="CASCADE")
    )
    replica: Mapped[str] = mapped_column(sa.String(64), index=True)
    tokens: Mapped[int] = mapped_column(sa.BigInteger())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class SessionKernel(Base):
    """The kernel a session's agent last ran code in (``owner``: replica and kernel name): a
    kernel started afresh where one existed before is reported (``kernel.restarted``)."""

    __tablename__ = "session_kernels"

    session_pk: Mapped[str] = mapped_column(
        sa.ForeignKey("sessions.pk", ondelete="CASCADE"), primary_key=True
    )
    agent: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    owner: Mapped[str] = mapped_column(sa.String(160))
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ResponseContinuation(Base):
    """A Responses API response that answered another's approval requests: it is the part of
    its run's log after the run's ``segment``-th pause (``run.requires_action``), up to the next
    pause or the run's end (docs/responses.md, "Agents: server-side tools and approvals").
    ``request``: what the Response repeats of its request (``responses.response_meta``)."""

    __tablename__ = "response_continuations"
    # One response per segment: of two answers to one pause, the second is refused.
    __table_args__ = (sa.UniqueConstraint("run_id", "segment"),)

    id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(sa.ForeignKey("tenants.id", ondelete="CASCADE"))
    run_id: Mapped[str] = mapped_column(sa.ForeignKey("runs.id", ondelete="CASCADE"))
    segment: Mapped[int] = mapped_column(sa.Integer())
    request: Mapped[dict[str, Any]] = mapped_column(sa.JSON())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
