"""/v1/runs: read, cancel and follow runs."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Query
from fastapi.responses import JSONResponse

from app.api.sse import MAX_SEQ, SSE_RESPONSES, parse_after, run_event_response
from app.deps import DbDep, PrincipalDep, RunsDep, StateDep
from app.runtime.public import run_public
from app.schemas.sessions import ResumeRequest, RunPublic
from app.schemas.vocab import CancelMode
from app.services import approvals
from app.services import runs as service

router = APIRouter(prefix="/v1/runs", tags=["runs"])


@router.get("/{run_id}")
async def get_run(run_id: str, db: DbDep, who: PrincipalDep) -> RunPublic:
    """One run."""
    return RunPublic.model_validate(run_public(await service.get_run(db, who.tenant_id, run_id)))


@router.post("/{run_id}/cancel")
async def cancel_run(run_id: str, who: PrincipalDep, runs: RunsDep, state: StateDep) -> RunPublic:
    """Cancel the run (a finished run is returned as it is)."""
    async with state.sessionmaker() as db:
        await service.get_run(db, who.tenant_id, run_id)
    await runs.cancel(run_id, CancelMode.CANCELLED)
    async with state.sessionmaker() as db:
        run = await service.get_run(db, who.tenant_id, run_id)
    return RunPublic.model_validate(run_public(run))


@router.get("/{run_id}/events", response_model=None, responses=SSE_RESPONSES)
async def run_events(
    run_id: str,
    who: PrincipalDep,
    runs: RunsDep,
    state: StateDep,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
    after: Annotated[int | None, Query(ge=0, le=MAX_SEQ)] = None,
) -> Any:
    """The run's events as SSE: stored ones after Last-Event-ID (or ?after=), then live ones."""
    async with state.sessionmaker() as db:
        await service.get_run(db, who.tenant_id, run_id)
    start = parse_after(last_event_id, after)
    return run_event_response(runs, run_id, start, state.settings)


@router.post(
    "/{run_id}/resume",
    status_code=202,
    response_model=None,
    responses={202: {"model": RunPublic}, **SSE_RESPONSES},
)
async def resume_run(
    run_id: str, body: ResumeRequest, who: PrincipalDep, runs: RunsDep, state: StateDep
) -> Any:
    """Decide about a waiting run's tool calls (approve, deny, edit); it goes on at once.

    202 with the run (``queued``), or with ``"stream": true`` its new events as SSE, as a
    message's stream (the ids go on from the event that paused it). 409 ``run_not_waiting``
    when the run does not wait; 422 naming the field of a bad decision."""
    decisions = approvals.resume_body(body)
    run = await approvals.resume_run(state, who.tenant_id, run_id, decisions)
    after = runs.stored_seq(run_id)  # its log so far: the stream sends what comes next
    if body.stream:
        on_drop = None
        if body.on_disconnect == "cancel":

            def on_drop() -> None:
                runs.cancel_soon(run_id, CancelMode.CLIENT_DISCONNECTED)

        return run_event_response(
            runs, run_id, after, state.settings, on_drop, {"Content-Location": f"/v1/runs/{run_id}"}
        )
    return JSONResponse(run_public(run), status_code=202)
