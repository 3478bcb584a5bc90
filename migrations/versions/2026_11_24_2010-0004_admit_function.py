"""run admission in one round trip on PostgreSQL (function agentstation_admit)

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24 20:10:00

What ``RunManager.submit`` did in 5 round trips (BEGIN, the session's admission lock, the
memory revision and active runs, INSERT run, COMMIT) as one function call in autocommit: it
takes the admission lock, reads the revision and the active runs in one snapshot, and inserts
the run, ``running`` with the session's run lock (a session-level advisory lock the calling
connection keeps for the run) when the session is idle and the lock is free, else ``queued``.
SQLite has no functions: nothing to do there (its admission stays a transaction).
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ADMIT = """
CREATE OR REPLACE FUNCTION agentstation_admit(
    p_session_pk text, p_reject boolean, p_take_lock boolean,
    p_admit_key bigint, p_run_key bigint,
    p_id text, p_tenant_id text, p_session_id text, p_agent text, p_agent_version integer,
    p_input json, p_options json, p_idempotency_key text, p_now timestamptz)
RETURNS TABLE (o_rev integer, o_active text[], o_status text)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_rev integer;
    v_active text[];
    v_status text := 'queued';
BEGIN
    -- The admission is not flushed to disk before the answer (the run's end is): an OS crash
    -- within ~0.6 s of it may lose the run row of a run whose end could then not be stored.
    PERFORM set_config('synchronous_commit', 'off', true);
    -- Serialises admissions of the session across replicas (same key as app/runtime/locks.py).
    PERFORM pg_advisory_xact_lock(p_admit_key);
    -- One snapshot for both: a run that ended committed its memory_rev bump with its status.
    SELECT s.memory_rev,
           ARRAY(SELECT r.id FROM runs r
                 WHERE r.session_pk = s.pk AND r.status IN ('queued', 'running')
                 ORDER BY r.created_at)
      INTO v_rev, v_active
      FROM sessions s WHERE s.pk = p_session_pk;
    IF NOT FOUND THEN
        RETURN;  -- the session is gone: no row
    END IF;
    IF cardinality(v_active) > 0 AND p_reject THEN
        RETURN QUERY SELECT v_rev, v_active, NULL::text;  -- busy: nothing inserted
        RETURN;
    END IF;
    -- An idle session's run holds the session from here (the caller keeps this connection).
    IF cardinality(v_active) = 0 AND p_take_lock AND pg_try_advisory_lock(p_run_key) THEN
        v_status := 'running';
    END IF;
    INSERT INTO runs (id, tenant_id, session_pk, session_id, agent, agent_version, status,
                      input, options, prompt_tokens, completion_tokens, idempotency_key,
                      created_at, started_at)
    VALUES (p_id, p_tenant_id, p_session_pk, p_session_id, p_agent, p_agent_version, v_status,
            p_input, p_options, 0, 0, p_idempotency_key, p_now,
            CASE WHEN v_status = 'running' THEN p_now END);
    RETURN QUERY SELECT v_rev, v_active, v_status;
END
$$
"""

DROP = (
    "DROP FUNCTION IF EXISTS agentstation_admit(text, boolean, boolean, bigint, bigint, text, "
    "text, text, text, integer, json, json, text, timestamptz)"
)


def upgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute(ADMIT)


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute(DROP)
