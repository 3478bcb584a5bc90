"""A session turn's PostgreSQL statements, sent straight to asyncpg: one round trip each.

- the session's lookup (``LOOKUP``): the session, its agent's name and pinned spec, the
  tenant's budget;
- admission: ``agentstation_admit`` (migrations 0004, 0007, 0008, 0013) takes the session's
  admission lock, answers a known Idempotency-Key with its run, reads the session's memory
  revision and active runs (and whether it still names the run's agent and version), inserts
  the run and, when the session is idle, takes its run lock (session-level, kept by the
  calling connection for the run);
- the run's end: one statement (CTEs) appends the turn's messages, bumps ``memory_rev``,
  stores the unsaved events with the terminal one, charges a tenant with a budget and sets the
  final status; in autocommit, so its one implicit commit makes all of it durable at once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.db import raw
from app.db.models import Run


def _not_json(o: object) -> Any:
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")


# ``json.dumps(value)``'s text for the statements' JSON parameters, from a C encoder made once
# (``json.dumps`` builds a ``JSONEncoder``'s C encoder per call); without the circular-reference
# check, which values decoded from JSON or dumped from models never need.
_ENCODE = json.encoder.c_make_encoder(  # type: ignore[attr-defined]
    None, _not_json, json.encoder.encode_basestring_ascii, None, ": ", ", ", False, False, True
)
_STRING = json.encoder.encode_basestring_ascii  # what ``json.dumps`` writes for a str


def dumps(value: Any) -> str:
    """``json.dumps(value)`` (the same text) for an acyclic value."""
    if isinstance(value, str):
        return str(_STRING(value))
    return "".join(_ENCODE(value, 0))


ADMIT = (
    "SELECT o_rev, o_active, o_status, o_found, o_current FROM agentstation_admit("
    "$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::json, $12::json, $13, $14, $15)"
)
LOOKUP = """\
SELECT s.pk, s.tenant_id, s.id, s.agent_id, s.agent_version, s.metadata, s.created_at,
    s.updated_at, s.memory_rev, a.name, v.spec, t.token_budget, t.tokens_used
FROM sessions s
JOIN agents a ON a.id = s.agent_id
LEFT JOIN agent_versions v ON v.agent_id = s.agent_id AND v.version = s.agent_version
LEFT JOIN tenants t ON t.id = s.tenant_id
WHERE s.tenant_id = $1 AND s.id = $2"""
SESSION_TOKENS = (
    "SELECT coalesce(sum(prompt_tokens + completion_tokens), 0) FROM runs WHERE session_pk = $1"
)
# A new session at its agent's current version: the agent read and the row inserted in one
# statement; no row: no such agent; ``inserted`` 0: the tenant has a session of that id.
_CREATE_SESSION = """\
WITH a AS (SELECT id, version, spec FROM agents WHERE tenant_id = $2 AND name = $4),
ins AS (
    INSERT INTO sessions (pk, tenant_id, id, agent_id, agent_version, metadata, created_at,
        updated_at, memory_rev)
    SELECT $1, $2, $3, a.id, a.version, $5::json, $6, $6, {rev} FROM a
    ON CONFLICT DO NOTHING
    RETURNING pk
){memory}
SELECT a.id, a.version, a.spec::text, (SELECT count(*) FROM ins) FROM a"""
CREATE_SESSION = _CREATE_SESSION.format(rev=0, memory="")
# The same with the session's first memory ($7: rows key, index, data), inserted only with the
# session (a conflict inserts neither), at revision 1; one statement: all of it or nothing.
CREATE_SESSION_MEMORY = _CREATE_SESSION.format(
    rev=1,
    memory=""",
msg AS (
    INSERT INTO messages (session_pk, key, index, data, run_id, created_at)
    SELECT ins.pk, m.key, m.index, m.data, NULL, $6
    FROM ins, json_to_recordset($7::json) AS m(key text, index integer, data json)
)""",
)
LOCK = "SELECT pg_advisory_lock($1)"
UNLOCK = "SELECT pg_advisory_unlock($1)"
DELETE_KEYS = "DELETE FROM messages WHERE session_pk = $1 AND key = ANY($2::text[])"
_END_CTES = """\
WITH msg AS (
    INSERT INTO messages (session_pk, key, index, data, run_id, created_at)
    SELECT $1, m.key, m.index, m.data, $2, $3
    FROM json_to_recordset($4::json) AS m(key text, index integer, data json)
), bump AS (
    UPDATE sessions SET memory_rev = memory_rev + 1 WHERE pk = $1 AND $5::boolean
), ev AS (
    INSERT INTO run_events (run_id, seq, type, data, created_at)
    SELECT $2, e.seq, e.type, e.data, $3
    FROM json_to_recordset($6::json) AS e(seq integer, type text, data json)
), charge AS (
    UPDATE tenants SET tokens_used = tokens_used + $7::bigint WHERE id = $8 AND $7::bigint > 0
)"""
# A run that stops to wait for approval ($9 'requires_action') is not finished: it keeps no
# finished_at, stores its pending calls ($15) and the last id it sent ($16).
_END_RUN = """\
UPDATE runs SET status = $9::text, stop_reason = $10, output = $11::json, error = $12::json,
    prompt_tokens = $13, completion_tokens = $14,
    finished_at = CASE WHEN $9::text = 'requires_action' THEN NULL ELSE $3 END,
    pending = $15::json, seq_reserved = coalesce($16::integer, seq_reserved)
WHERE id = $2"""
END = f"{_END_CTES}\n{_END_RUN}"
# The same, releasing the session's run lock ($17, session-level) at its commit: a transaction
# lock on the same key is taken first (granted at once: this connection holds the key), then
# the session-level one is released; the transaction lock then holds the session until the
# commit that makes the end visible. The SELECT always runs (unlike a clause of the UPDATE,
# which a deleted run row would skip); it answers whether the lock was held.
END_UNLOCK = f"""{_END_CTES}, fin AS (
{_END_RUN}
)
SELECT pg_advisory_unlock($17) FROM (SELECT pg_advisory_xact_lock($17) OFFSET 0) AS held"""


@dataclass
class Admission:
    """What ``agentstation_admit`` answered."""

    rev: int
    active: list[str]  # the session's queued and running runs before this one, oldest first
    # "running" (the run lock is held), "queued", "existing" (a known Idempotency-Key: ``found``
    # is its run's id), None: busy, not inserted
    status: str | None
    found: str | None = None
    # The session still names the agent and version the run was submitted with (migration
    # 0013): a session kept in process for its turns is confirmed for another while (None:
    # not read, a known Idempotency-Key's answer).
    current: bool | None = None


async def admit(
    pg: Any,
    run: Run,
    reject: bool,
    take_lock: bool,
    admit_key: int,
    run_key: int,
    wait_busy: bool = False,
) -> Admission | None:
    """Admit ``run`` (None: its session no longer exists)."""
    row = await raw.fetchrow(
        pg,
        ADMIT,
        run.session_pk,
        reject,
        take_lock,
        admit_key,
        run_key,
        run.id,
        run.tenant_id,
        run.session_id,
        run.agent,
        run.agent_version,
        dumps(run.input),
        dumps(run.options),
        run.idempotency_key,
        run.created_at,
        wait_busy,
    )
    if row is None:
        return None
    return Admission(int(row[0]), list(row[1]), row[2], row[3], row[4])


async def lock(pg: Any, run_key: int) -> None:
    """Wait for the session's run lock (session-level: held until ``unlock``)."""
    await raw.execute(pg, LOCK, run_key)


async def unlock(pg: Any, run_key: int) -> None:
    """Release the session's run lock."""
    await raw.execute(pg, UNLOCK, run_key)


async def store_end(
    pg: Any,
    run: Run,
    messages: list[dict[str, Any]],
    rewrite: list[str],
    events: list[dict[str, Any]],
    charge: int,
    finished_at: datetime,
    unlock_key: int | None = None,
    seq_reserved: int | None = None,
) -> bool:
    """Store a run's end in one implicit transaction (two statements in an explicit one when
    a memory key was cut and is rewritten, which is rare). ``unlock_key``: also release the
    session's run lock, held by ``pg``, when that transaction commits; returns whether that
    lock was held (False without ``unlock_key``)."""
    args: tuple[Any, ...] = (
        run.session_pk,
        run.id,
        finished_at,
        dumps(messages),
        bool(messages or rewrite),
        events_json(events),
        charge,
        run.tenant_id,
        run.status,
        run.stop_reason,
        None if run.output is None else dumps(run.output),
        None if run.error is None else dumps(run.error),
        run.prompt_tokens,
        run.completion_tokens,
        None if run.pending is None else dumps(run.pending),
        seq_reserved,
    )
    sql = END
    if unlock_key is not None:
        sql, args = END_UNLOCK, (*args, unlock_key)
    if not rewrite:
        return await _end(pg, sql, args)
    try:
        async with pg.transaction():
            await raw.execute(pg, DELETE_KEYS, run.session_pk, rewrite)
            return await _end(pg, sql, args)
    except raw.DRIVER_ERRORS as exc:  # BEGIN or COMMIT
        raise raw.DriverError(f"{type(exc).__name__}: {exc}") from exc


def events_json(events: list[dict[str, Any]]) -> str:
    """The run's last events as one JSON array, each event's ``data`` as already encoded
    (``raw``, shared with its SSE frame) when it is."""
    parts = []
    for e in events:
        raw = e.get("raw")
        data = raw.decode() if raw is not None else dumps(e["data"])
        parts.append(f'{{"seq":{int(e["seq"])},"type":{_STRING(e["type"])},"data":{data}}}')
    return "[" + ",".join(parts) + "]"


async def _end(pg: Any, sql: str, args: tuple[Any, ...]) -> bool:
    if sql is END:
        await raw.execute(pg, sql, *args)
        return False
    row = await raw.fetchrow(pg, sql, *args)
    return bool(row[0])
