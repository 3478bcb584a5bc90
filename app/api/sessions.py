"""/v1/sessions: sessions, their memory and their messages (runs)."""

from __future__ import annotations

import asyncio
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
from app.runtime.runs import RunManager, run_public
from app.schemas.sessions import (
    RunCreate,
    RunList,
    RunPublic,
    RunResult,
    SessionCreate,
    SessionList,
    SessionPublic,
    SessionUpdate,
    UsagePublic,
)
from app.services import runs as run_service
from app.services import sessions as service
from app.services.agent_refs import UNBUILDABLE

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])


@router.post("", status_code=201)
async def create_session(
    body: SessionCreate, db: DbDep, who: PrincipalDep, state: StateDep
) -> SessionPublic:
    """Start a session with an agent."""
    row, agent = await service.create_session(db, who.tenant_id, body)
    run_service.remember_created(state, db, row, agent)  # its first turn needs no lookup
    public = service.to_public(row, agent.name)
    public.usage = UsagePublic(prompt_tokens=0, completion_tokens=0, total_tokens=0)  # new
    return public


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
    session_id: str, db: DbDep, who: PrincipalDep, runs: RunsDep, state: StateDep
) -> Response:
    """Delete the session, its memory, its runs and its kernel."""
    row, _ = await service.get_session(db, who.tenant_id, session_id)
    if (active := await service.active_run(db, row.pk)) is not None:
        await runs.cancel(active, "cancelled")
    await db.delete(row)
    await db.flush()
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
        return await service.replace_memory(db, row, state, keys, runs.memory)


@router.post("/{session_id}/reset")
async def reset_session(session_id: str, who: PrincipalDep, state: StateDep) -> SessionPublic:
    """Forget the session's memory and restart its kernel (409 ``session_busy`` while a run
    of the session is queued or running)."""
    async with state.sessionmaker() as db:
        row, agent = await service.get_session(db, who.tenant_id, session_id)
    async with state.run_manager.writing_memory(row.pk, session_id) as db:
        await service.reset_memory(db, row)
    await _shutdown_kernel(state, f"{who.tenant_id}:{session_id}")
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
    runs = state.run_manager
    # The turn's lease: its lookup's connection goes on to the admission (PostgreSQL).
    async with runs.store.lease() as lease:
        sub = await run_service.prepare_submission(
            state, lease, who.tenant_id, session_id, body, idempotency_key
        )
        # A JSON answer waits for the run's end anyway: a new run runs in this request's task.
        run, created = await runs.submit(sub, lease, inline=not body.stream)
    if body.stream:
        on_drop = None
        if body.on_disconnect == "cancel":

            def on_drop() -> None:
                runs.cancel_soon(run.id, "client_disconnected")

        stream: Response = run_event_response(
            runs, run.id, 0, state.settings, on_drop, {"Content-Location": f"/v1/runs/{run.id}"}
        )
        return stream
    if created:
        await _run_here(runs, run.id, request, body.on_disconnect == "cancel")
    else:  # an earlier request's run (Idempotency-Key)
        await _wait_or_cancel(runs, run.id, request, body.on_disconnect == "cancel")
    final = runs.result(run.id)  # finished here: its final state is in memory
    public = runs.result_public(run.id)
    if final is not None and public is not None:
        # RunResult's JSON, from the dict the run's terminal event already holds.
        return JSONResponse({"run": public, "message": final.output})
    if final is None:
        async with state.sessionmaker() as db:
            final = await run_service.get_run(db, who.tenant_id, run.id)
    result = RunResult(run=RunPublic.model_validate(run_public(final)), message=final.output)
    return JSONResponse(result.model_dump(mode="json"))


router.add_api_route(  # the fast path (app/api/fastpath.py): a turn's hot route
    "/{session_id}/messages",
    post_message,
    methods=["POST"],
    response_model=None,
    responses=SSE_RESPONSES,
    openapi_extra=_MESSAGE_DOC,
    route_class_override=RequestOnlyRoute,
)


async def _run_here(runs: RunManager, run_id: str, request: Request, cancel: bool) -> None:
    """Run the new run here; with ``cancel``, a client gone for good cancels it (checked every
    0.5 s by a watcher started only once the run has lasted 0.5 s)."""
    watcher: asyncio.Task[None] | None = None

    def watch() -> None:
        nonlocal watcher
        watcher = asyncio.create_task(_cancel_when_gone(runs, run_id, request))

    timer = asyncio.get_running_loop().call_later(0.5, watch) if cancel else None
    try:
        await runs.run_here(run_id)
    finally:
        if timer is not None:
            timer.cancel()
        if watcher is not None:
            watcher.cancel()


async def _cancel_when_gone(runs: RunManager, run_id: str, request: Request) -> None:
    while True:  # polled: the request's receive channel is the only sign of a drop
        if await request.is_disconnected():
            runs.cancel_soon(run_id, "client_disconnected")
            return
        await asyncio.sleep(0.5)


async def _wait_or_cancel(runs: RunManager, run_id: str, request: Request, cancel: bool) -> None:
    waiter = asyncio.ensure_future(runs.wait(run_id))
    try:
        while not waiter.done():
            await asyncio.wait({waiter}, timeout=0.5)
            if not waiter.done() and await request.is_disconnected():
                if cancel:
                    runs.cancel_soon(run_id, "client_disconnected")
                return
    finally:
        if not waiter.done():
            waiter.cancel()


async def _shutdown_kernel(state: Any, session_key: str) -> None:
    """The session's tools end with it: its MCP connections, then its kernels."""
    from agents.actions.mcp_conn import CONNECTIONS

    await CONNECTIONS.close_session(session_key)
    pool = state.kernel_pool
    if pool is not None:
        await pool.shutdown_session(session_key)
