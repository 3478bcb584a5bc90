"""agentstation_admit answers a known Idempotency-Key: idempotency is part of admission

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26 00:00:00

A run admitted with an ``Idempotency-Key`` the tenant used before is not inserted: the function
answers ``o_status = 'existing'`` and the earlier run's id in the new column ``o_found`` (also
when a concurrent admission with the same key, on another session, inserted it first: the
unique constraint's violation is caught and the run lock it may have taken is let go). Before,
a request with a key went through a second admission path (the ORM) on PostgreSQL.
"""

import importlib.util
from collections.abc import Sequence
from pathlib import Path

from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ARGS = (
    "text, boolean, boolean, bigint, bigint, text, text, text, text, integer, json, json, text, "
    "timestamptz, boolean"
)

ADMIT = """
CREATE OR REPLACE FUNCTION agentstation_admit(
    p_session_pk text, p_reject boolean, p_take_lock boolean,
    p_admit_key bigint, p_run_key bigint,
    p_id text, p_tenant_id text, p_session_id text, p_agent text, p_agent_version integer,
    p_input json, p_options json, p_idempotency_key text, p_now timestamptz,
    p_wait_busy boolean)
RETURNS TABLE (o_rev integer, o_active text[], o_status text, o_found text)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_rev integer;
    v_active text[];
    v_waiting boolean;
    v_found text;
    v_status text := 'queued';
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM pg_advisory_xact_lock(p_admit_key);
    IF p_idempotency_key IS NOT NULL THEN
        SELECT r.id INTO v_found FROM runs r
         WHERE r.tenant_id = p_tenant_id AND r.idempotency_key = p_idempotency_key;
        IF FOUND THEN
            RETURN QUERY SELECT 0, ARRAY[]::text[], 'existing'::text, v_found;
            RETURN;
        END IF;
    END IF;
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
        RETURN QUERY SELECT v_rev, v_active, NULL::text, NULL::text;
        RETURN;
    END IF;
    IF cardinality(v_active) = 0 AND p_take_lock AND pg_try_advisory_lock(p_run_key) THEN
        v_status := 'running';
    END IF;
    IF p_idempotency_key IS NULL THEN
        INSERT INTO runs (id, tenant_id, session_pk, session_id, agent, agent_version, status,
                          input, options, prompt_tokens, completion_tokens, idempotency_key,
                          created_at, started_at)
        VALUES (p_id, p_tenant_id, p_session_pk, p_session_id, p_agent, p_agent_version,
                v_status, p_input, p_options, 0, 0, NULL, p_now,
                CASE WHEN v_status = 'running' THEN p_now END);
    ELSE
        BEGIN
            INSERT INTO runs (id, tenant_id, session_pk, session_id, agent, agent_version,
                              status, input, options, prompt_tokens, completion_tokens,
                              idempotency_key, created_at, started_at)
            VALUES (p_id, p_tenant_id, p_session_pk, p_session_id, p_agent, p_agent_version,
                    v_status, p_input, p_options, 0, 0, p_idempotency_key, p_now,
                    CASE WHEN v_status = 'running' THEN p_now END);
        EXCEPTION WHEN unique_violation THEN
            -- A concurrent admission with the same key (another session) inserted first.
            IF v_status = 'running' THEN
                PERFORM pg_advisory_unlock(p_run_key);
            END IF;
            SELECT r.id INTO v_found FROM runs r
             WHERE r.tenant_id = p_tenant_id AND r.idempotency_key = p_idempotency_key;
            RETURN QUERY SELECT 0, ARRAY[]::text[], 'existing'::text, v_found;
            RETURN;
        END;
    END IF;
    RETURN QUERY SELECT v_rev, v_active, v_status, NULL::text;
END
$$
"""


def _migration_0007_admit() -> str:
    path = Path(__file__).with_name("2026_11_25_2030-0007_run_pending_approval.py")
    spec = importlib.util.spec_from_file_location("migration_0007", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.ADMIT)


def upgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        # The result columns change: CREATE OR REPLACE cannot change a function's row type.
        op.execute(f"DROP FUNCTION IF EXISTS agentstation_admit({ARGS})")
        op.execute(ADMIT)


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS agentstation_admit({ARGS})")
        op.execute(_migration_0007_admit())
