"""runs.pending: tool calls a run waits on (status requires_action); waiting runs keep a session busy

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25 20:30:00

A run stopped before tool calls that need a person's approval stores them in ``pending``
(JSON: the calls, where its agent stopped, since when and until when it waits); it holds no
task, connection or lock meanwhile. ``agentstation_admit`` (PostgreSQL) counts a waiting run as
busy (it is among the active runs it returns, so interrupt/rollback cancel it) and, with the
new last argument ``p_wait_busy`` (the ``enqueue`` strategy), refuses a run behind it rather
than queueing it behind a decision that may never come.
"""

import importlib.util
from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ADMIT = """
CREATE OR REPLACE FUNCTION agentstation_admit(
    p_session_pk text, p_reject boolean, p_take_lock boolean,
    p_admit_key bigint, p_run_key bigint,
    p_id text, p_tenant_id text, p_session_id text, p_agent text, p_agent_version integer,
    p_input json, p_options json, p_idempotency_key text, p_now timestamptz,
    p_wait_busy boolean)
RETURNS TABLE (o_rev integer, o_active text[], o_status text)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_rev integer;
    v_active text[];
    v_waiting boolean;
    v_status text := 'queued';
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM pg_advisory_xact_lock(p_admit_key);
    SELECT s.memory_rev,
           ARRAY(SELECT r.id FROM runs r
                 WHERE r.session_pk = s.pk
                   AND r.status IN ('queued', 'running', 'requires_action')
                 ORDER BY r.created_at),
           EXISTS(SELECT 1 FROM runs r
                  WHERE r.session_pk = s.pk AND r.status = 'requires_action')
      INTO v_rev, v_active, v_waiting
      FROM sessions s WHERE s.pk = p_session_pk;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF cardinality(v_active) > 0 AND (p_reject OR (v_waiting AND p_wait_busy)) THEN
        RETURN QUERY SELECT v_rev, v_active, NULL::text;
        RETURN;
    END IF;
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

DROP_NEW = (
    "DROP FUNCTION IF EXISTS agentstation_admit(text, boolean, boolean, bigint, bigint, text, "
    "text, text, text, integer, json, json, text, timestamptz, boolean)"
)
DROP_OLD = (
    "DROP FUNCTION IF EXISTS agentstation_admit(text, boolean, boolean, bigint, bigint, text, "
    "text, text, text, integer, json, json, text, timestamptz)"
)


WAITING = sa.text("status = 'requires_action'")


def upgrade() -> None:
    op.add_column("runs", sa.Column("pending", sa.JSON(), nullable=True))
    # Each replica's approval deadline check reads the waiting runs every second or so.
    op.create_index(
        "ix_runs_waiting", "runs", ["status"], postgresql_where=WAITING, sqlite_where=WAITING
    )
    if op.get_context().dialect.name == "postgresql":
        op.execute(DROP_OLD)
        op.execute(ADMIT)


def downgrade() -> None:
    op.drop_index("ix_runs_waiting", table_name="runs")
    if op.get_context().dialect.name == "postgresql":
        op.execute(DROP_NEW)
        path = Path(__file__).with_name("2026_11_24_2010-0004_admit_function.py")
        spec = importlib.util.spec_from_file_location("migration_0004", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        op.execute(module.ADMIT)
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("pending")
