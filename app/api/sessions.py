"""/v1/sessions: sessions, their memory and their messages (runs)."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from app.api.fastpath import RequestOnlyRoute, documented, header_parameter
from app.api.pages import After, Limit
from app.api.sse import SSE_RESPONSES, run_event_response
from app.cache import TURN_SESSIONS, invalidate_on_commit
from app.deps import (
    DbDep,
    PrincipalDep,
    RunsDep,
    StateDep,
    app_state,
    authenticate,
    json_body,
    validated_body,
)
from app.errors import ValidationFailed
from app.ops.budget_store import session_usage
from app.runtime.kernels import FleetKernelPool
from app.runtime.runs import run_public
from app.schemas.sessions import (
    RunCreate,
    RunList,
    RunPublic,
    SessionCreate,
    SessionList,
    SessionPublic,
    SessionUpdate,
    UsagePublic,
)
from app.schemas.vocab import CancelMode
from app.services import runs as run_service
from app.services import sessions as service
from app.services.agent_refs import UNBUILDABLE
from app.services.turns import TurnRequest, submit_turn

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])


def _not_json(o: object) -> Any:
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")


# What ``JSONResponse.render`` writes (compact, UTF-8 kept, NaN refused), its C encoder made
# once instead of a ``JSONEncoder`` and a C encoder per response.
_ENCODE = json.encoder.c_make_encoder(  # type: ignore[attr-defined]
    None, _not_json, json.encoder.encode_basestring, None, ":", ",", False, False, False
)


class Created(JSONResponse):
    """A 201 JSON answer: the bytes and headers ``JSONResponse(content, 201)`` sends, encoded
    by ``_ENCODE`` and its two headers written directly."""

    def __init__(self, content: dict[str, Any]) -> None:
        self.status_code, self.background = 201, None
        self.body = body = "".join(_ENCODE(content, 0)).encode()
        self.raw_headers = [
            (b"content-length", str(len(body)).encode()),
            (b"content-type", b"application/json"),
        ]


async def create_session(request: Request) -> Response:
    """Start a session with an agent."""
    # The fast path (as ``post_message``): body, key and validation with plain calls, in
    # FastAPI's order; one statement (``services/sessions.py: new_session``).
    data = await json_body(request)
    who = await authenticate(request)
    body = validated_body(SessionCreate, data)
    return Created(await service.new_session(app_state(request), who.tenant_id, body))


router.add_api_route(  # the fast path (app/api/fastpath.py): every new conversation creates one
    "",
    create_session,
    methods=["POST"],
    status_code=201,
    response_model=SessionPublic,
    openapi_extra=documented(SessionCreate),
    route_class_override=RequestOnlyRoute,
)


@router.get("")
async def list_sessions(
    db: DbDep,
    who: PrincipalDep,
    agent: Annotated[str | None, Query(min_length=1)] = None,
    limit: Limit = 20,
    after: After = None,
) -> SessionList:
    """The tenant's sessions, newest first."""
    rows, more = await service.list_sessions(db, who.tenant_id, agent, limit, after)
    return SessionList(data=[service.to_public(r, name) for r, name in rows], has_more=more)


@router.get("/{session_id}")
async def get_session(session_id: str, db: DbDep, who: PrincipalDep) -> SessionPublic:
    """One session, with its token usage."""
    row, agent = await service.get_session(db, who.tenant_id, session_id)
    public = service.to_public(row, agent.name)
    prompt, completion = await session_usage(db, row.pk)
    public.usage = UsagePublic(
        prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
    )
    return public


@router.patch("/{session_id}")
async def update_session(
    session_id: str, body: SessionUpdate, db: DbDep, who: PrincipalDep
) -> SessionPublic:
    """Change the session's metadata (merged; a key set to null is removed), e.g. its title."""
    row, agent = await service.update_session(db, who.tenant_id, session_id, body)
    invalidate_on_commit(db, TURN_SESSIONS, (who.tenant_id, session_id))  # cached copies
    return service.to_public(row, agent.name)


@router.delete("/{session_id}", status_code=204)
async def delete_session(
    session_id: str, who: PrincipalDep, runs: RunsDep, state: StateDep
) -> Response:
    """Delete the session, its memory, its runs and its kernel.

    The delete is committed before the kernel stops: a write transaction held across the
    stop (~0.25 s) made every other write wait for it, and on SQLite, whose statements run on
    the loop's thread (app/db/sqlite_inline.py), the waiting write blocked the loop itself, so
    the stop never ended and both waited out ``busy_timeout`` (30 s)."""
    async with state.sessionmaker() as db, db.begin():
        row, _ = await service.get_session(db, who.tenant_id, session_id)
        if (active := await service.active_run(db, row.pk)) is not None:
            await runs.cancel(active, CancelMode.CANCELLED)
        await db.delete(row)
        invalidate_on_commit(db, TURN_SESSIONS, (who.tenant_id, session_id))
    await _shutdown_kernel(state, f"{who.tenant_id}:{session_id}")
    return Response(status_code=204)


@router.get("/{session_id}/memory")
async def get_memory(
    session_id: str, db: DbDep, who: PrincipalDep, app_state: StateDep
) -> dict[str, Any]:
    """The agent's state_dict for this session (every key, empty ones included)."""
    row, agent = await service.get_session(db, who.tenant_id, session_id)
    try:
        keys = await service.memory_keys(db, app_state, row, agent)
    except ValidationFailed as exc:
        if exc.code not in UNBUILDABLE:
            raise
        keys = set()  # a participant was deleted: what is stored is still the session's memory
    return await service.get_memory(db, row, keys)


@router.put("/{session_id}/memory")
async def put_memory(
    session_id: str,
    who: PrincipalDep,
    app_state: StateDep,
    state: Annotated[dict[str, Any], Body()],
) -> dict[str, Any]:
    """Replace the session's state_dict (load_state_dict); 409 ``session_busy`` while a run
    of the session is queued or running (admitted like a run)."""
    runs = app_state.run_manager
    async with app_state.sessionmaker() as db:
        row, agent = await service.get_session(db, who.tenant_id, session_id)
        keys = await service.memory_keys(db, app_state, row, agent)
    async with runs.writing_memory(row.pk, session_id) as db:
        return await service.replace_memory(db, row, state, keys, runs.keep_memory)


@router.post("/{session_id}/reset")
async def reset_session(session_id: str, who: PrincipalDep, state: StateDep) -> SessionPublic:
    """Forget the session's memory and restart its kernel (409 ``session_busy`` while a run
    of the session is queued or running)."""
    async with state.sessionmaker() as db:
        row, agent = await service.get_session(db, who.tenant_id, session_id)
    async with state.run_manager.writing_memory(row.pk, session_id) as db:
        await service.reset_memory(db, row)
    await _shutdown_kernel(state, f"{who.tenant_id}:{session_id}")
    if isinstance(state.kernel_pool, FleetKernelPool):  # a fresh kernel asked for: no restart
        await state.kernel_pool.forget_session(row.pk)
    return service.to_public(row, agent.name)


@router.get("/{session_id}/runs")
async def list_runs(
    session_id: str, db: DbDep, who: PrincipalDep, limit: Limit = 20, after: After = None
) -> RunList:
    """The session's runs, newest first."""
    rows, more = await run_service.list_runs(db, who.tenant_id, session_id, limit, after)
    return RunList(data=[RunPublic.model_validate(run_public(r)) for r in rows], has_more=more)


IDEMPOTENCY_KEY_HEADER, IDEMPOTENCY_KEY_MAX_LENGTH = "Idempotency-Key", 256
# What post_message reads itself, documented as FastAPI documents a ``Header()`` and a body.
_MESSAGE_DOC = documented(
    RunCreate,
    header_parameter(
        IDEMPOTENCY_KEY_HEADER,
        {"anyOf": [{"type": "string", "maxLength": IDEMPOTENCY_KEY_MAX_LENGTH}, {"type": "null"}]},
    ),
)


def _idempotency_key(request: Request) -> tuple[str | None, list[dict[str, Any]]]:
    """The ``Idempotency-Key`` header, and the error a ``Header(max_length=256)`` would give."""
    value = request.headers.get(IDEMPOTENCY_KEY_HEADER) or None  # an empty one: no key
    if value is None or len(value) <= IDEMPOTENCY_KEY_MAX_LENGTH:
        return value, []
    error = {
        "type": "string_too_long",
        "loc": ("header", IDEMPOTENCY_KEY_HEADER),
        "msg": f"String should have at most {IDEMPOTENCY_KEY_MAX_LENGTH} characters",
        "input": value,
        "ctx": {"max_length": IDEMPOTENCY_KEY_MAX_LENGTH},
    }
    return None, [error]


async def post_message(session_id: str, request: Request) -> Response:
    """Send a message: one run; JSON when it ends, or its events as SSE."""
    # A turn's hot path reads its body, headers and key with plain calls (as the chat endpoint
    # does) rather than a declared body, Header()s and dependencies, whose solving was the
    # largest Python cost of a turn's request. FastAPI's order: JSON syntax, key, then the
    # header's and the body's errors together.
    data = await json_body(request)
    who = await authenticate(request)
    idempotency_key, errors = _idempotency_key(request)
    try:
        body = validated_body(RunCreate, data)
    except RequestValidationError as exc:
        raise RequestValidationError([*errors, *exc.errors()]) from None
    if errors:
        raise RequestValidationError(errors)
    state = app_state(request)
    # One turn (app/services/turns.py): lease, lookup, admission; a JSON answer waits for the
    # run's end anyway, so a new run runs in this request's task (``finish``).
    turn = await submit_turn(
        state, who.tenant_id, session_id, TurnRequest.of(body, idempotency_key)
    )
    if body.stream:
        on_drop = turn.on_drop if body.on_disconnect == "cancel" else None
        location = {"Content-Location": f"/v1/runs/{turn.run_id}"}
        return run_event_response(
            state.run_manager, turn.run_id, 0, state.settings, on_drop, location
        )
    end = await turn.finish(request.is_disconnected)
    # RunResult's JSON, from the dict the run's terminal event already holds.
    return JSONResponse({"run": end.public, "message": end.run.output})


router.add_api_route(  # the fast path (app/api/fastpath.py): a turn's hot route
    "/{session_id}/messages",
    post_message,
    methods=["POST"],
    response_model=None,
    responses=SSE_RESPONSES,
    openapi_extra=_MESSAGE_DOC,
    route_class_override=RequestOnlyRoute,
)


async def _shutdown_kernel(state: Any, session_key: str) -> None:
    """The session's tools end with it: its MCP connections, then its kernels."""
    from agents.actions.mcp_conn import CONNECTIONS

    await CONNECTIONS.close_session(session_key)
    pool = state.kernel_pool
    if pool is not None:
        await pool.shutdown_session(session_key)
