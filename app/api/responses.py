"""The OpenAI Responses API: ``/v1/responses`` (docs/responses.md).

``POST /v1/responses`` is a fast-path route (app/api/fastpath.py: it carries every turn of a
Responses client); the others are declared. Every answer about a response carries
``X-Session-Id``: the session that runs it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from app.api.event_stream import EventStreamResponse
from app.api.fastpath import RequestOnlyRoute, documented, header_parameter
from app.api.sse import SSE_RESPONSES, event_frame, frame
from app.deps import PrincipalDep, StateDep, app_state, authenticate, json_body, validated_body
from app.errors import AppError, BadRequest, public_error
from app.models.encoded import dumps
from app.schemas.responses import ResponseCreate, ResponseCreateDoc
from app.schemas.vocab import RunStatus
from app.services import responses as service
from app.services import responses_ids as ids
from app.services import responses_plan as planning
from app.services import responses_read as read
from app.services import responses_resumed as continued
from app.services import responses_stateless as stateless
from app.services import responses_stateless_stream as stateless_stream
from app.services.chat import preflight_tenant
from app.services.responses_ids import ROUTE_KEY_HEADER
from app.services.responses_input import parse_input
from app.state import AppState

router = APIRouter(prefix="/v1", tags=["responses"])
log = logging.getLogger(__name__)
SESSION_HEADER = "X-Session-Id"
ROUTE_KEY_MAX = 128

_CREATE_DOC = documented(
    ResponseCreateDoc,
    header_parameter(
        ROUTE_KEY_HEADER,
        {"type": "string", "maxLength": ROUTE_KEY_MAX},
        "The route key of new ids (set by the load balancer; docs/responses.md)",
        titled=False,
    ),
)


def _json(body: dict[str, Any], session_id: str | None, status: int = 200) -> Response:
    headers = {SESSION_HEADER: session_id} if session_id else None
    return Response(dumps(body), status_code=status, media_type="application/json", headers=headers)


def event_stream(
    state: AppState,
    events: AsyncIterator[list[dict[str, Any]]],
    session_id: str | None,
    on_drop: Any = None,
) -> EventStreamResponse:
    """Responses stream events as SSE (``event:`` its type, ``data:`` the event); each list
    of ``events`` (those of one run event) is one write: the frames are the same, the
    writes, with their layers of ASGI ``send`` wrappers, fewer (issue 25)."""

    async def frames() -> AsyncGenerator[bytes, None]:
        ended = False
        try:
            async for batch in events:
                if len(batch) == 1:
                    last = batch[0]
                    yield _frame(last)
                else:
                    yield b"".join([_frame(e) for e in batch])
                    last = batch[-1]
                ended = last["type"] in _TERMINAL
            ended = True
        except Exception as exc:  # headers are sent: report in-stream, then end
            ended = True
            yield _error_frame(exc)
        finally:
            if not ended and on_drop is not None:
                on_drop()

    headers = {"Cache-Control": "no-cache"}
    if session_id:  # none for a store: false answer that ran in no session
        headers[SESSION_HEADER] = session_id
    return EventStreamResponse(frames(), state.settings.sse_ping_s, headers)


_TERMINAL = ("response.completed", "response.incomplete", "response.failed", "error")
_TEXT_DELTA = "response.output_text.delta"
# A text delta's frame, ``event_frame(type, dumps(event))`` byte for byte for the event
# ``ResponseStream`` makes (its keys in this order, ``logprobs`` empty), with only the
# JSON-escaped strings spliced in: most of a streamed Response's frames (issue 25).
_TEXT_DELTA_FRAME = (
    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
    b'"sequence_number":%d,"item_id":%s,"output_index":%d,"content_index":%d,"delta":%s,'
    b'"logprobs":[]}\n\n'
)
_escape = json.encoder.encode_basestring  # C; how ``dumps`` writes a string (UTF-8 kept)


def _frame(event: dict[str, Any]) -> bytes:
    """One stream event's SSE frame."""
    if event["type"] == _TEXT_DELTA and not event["logprobs"] and len(event) == 7:
        return _TEXT_DELTA_FRAME % (
            event["sequence_number"],
            _escape(event["item_id"]).encode(),
            event["output_index"],
            event["content_index"],
            _escape(event["delta"]).encode(),
        )
    return event_frame(event["type"], dumps(event))


def _frame_stream(frames: AsyncIterator[bytes]) -> EventStreamResponse:
    """A stateless answer's stream (SSE frames already encoded): like a chat completion's,
    no pings, and it ends with its answer at shutdown."""

    async def body() -> AsyncGenerator[bytes, None]:
        try:
            async for chunk in frames:
                yield chunk
        except Exception as exc:  # headers are sent: report in-stream, then end
            yield _error_frame(exc)

    return EventStreamResponse(body(), 0, {"Cache-Control": "no-cache"}, end_at_shutdown=False)


def _error_frame(exc: Exception) -> bytes:
    """The ``error`` event of a stream that could not go on."""
    if not isinstance(exc, AppError):
        log.exception("responses stream failed")
    error = public_error(exc)
    body = {"type": "error", "code": error.get("code"), "message": error.get("message"),
            "param": error.get("param"), "sequence_number": -1}  # fmt: skip
    return frame(dumps(body), event="error")


async def create_response(request: Request) -> Response:
    """Create a response: run the model or agent on the input, answered whole, streamed, or
    at once (``background``)."""
    data = await json_body(request)
    who = await authenticate(request)
    route_header = request.headers.get(ROUTE_KEY_HEADER)
    if route_header is not None and len(route_header) > ROUTE_KEY_MAX:
        raise BadRequest(
            f"{ROUTE_KEY_HEADER}: String should have at most {ROUTE_KEY_MAX} characters",
            param=ROUTE_KEY_HEADER,
            code="invalid_value",
        )
    req = validated_body(ResponseCreate, data)
    state = app_state(request)
    inp = parse_input(req.items())  # 400 naming the item before anything is stored
    if inp.approvals:  # decisions about a waiting agent's calls: a new response goes on
        return await _approved(state, who, req, inp, route_header)
    if planning.stateless(req) and (handle := await planning.raw_model(state, who, req.model)):
        # Nothing to keep or continue: the raw model answers in the request (no session).
        rid = ids.mint(ids.RESPONSE, ids.route_key(route_header))
        budget = await preflight_tenant(state, who.tenant_id)  # 429 before anything runs
        if req.stream:
            frames = stateless_stream.stream_frames(
                state, who.tenant_id, handle, req, inp, rid, budget
            )
            return _frame_stream(frames)
        raw = await stateless.whole_response(state, who.tenant_id, handle, req, inp, rid, budget)
        return Response(raw, media_type="application/json")  # encoded once, no session
    agent = await planning.agent_for(state, who, req.model)
    planned = await planning.plan(state, who, req, agent, route_header)
    try:
        turn = await service.start(state, who, req, planned, inp)
    except AppError:  # refused (budget, readiness, a busy session): no empty session stays
        if planned.new:
            await service.forget_session(state, who.tenant_id, planned.session_id)
        raise
    run = turn.run
    if planned.forget and not turn.inline:
        service.forget_later(state, who.tenant_id, planned.session_id, run.id)
    if req.stream:
        events = read.response_events(state, read.of_run(run))
        return event_stream(state, events, planned.session_id, turn.on_drop)
    if req.background:
        body = read.response_base(read.of_run(run))
        body["status"] = "queued" if run.status == RunStatus.QUEUED else "in_progress"
        return _json(body, planned.session_id)
    end = await turn.finish(request.is_disconnected)
    if planned.agent.spec.kind == "model":  # one reply: the Response from the end in memory
        body = read.from_end(run, end.run, end.public)
    else:
        body = await read.final_response(state, read.of_run(run))
    if planned.forget:
        await service.forget_session(state, who.tenant_id, planned.session_id)
    return _json(body, planned.session_id)


async def _approved(
    state: AppState, who: Any, req: ResponseCreate, inp: Any, route_header: str | None
) -> Response:
    """The response that answers another's approval requests: its run going on."""
    found = await service.answer_approvals(state, who, req, inp, route_header)
    session_id = found.run.session_id
    if req.stream:
        if not req.store:  # not found once its part of the run has ended
            continued.forget_later(state, found.run.id, found.id)
        return event_stream(state, read.response_events(state, found), session_id)
    if req.background:
        body = read.response_base(found)  # it goes on; poll it
        return _json(body, session_id)
    await state.run_manager.wait(found.run.id)
    body = await read.final_response(state, found)
    if not req.store:
        await continued.forget(state, found.id)
    return _json(body, session_id)


router.add_api_route(
    "/responses",
    create_response,
    methods=["POST"],
    response_model=None,
    responses=SSE_RESPONSES,
    openapi_extra=_CREATE_DOC,
    route_class_override=RequestOnlyRoute,
    summary="Create a response",
)


@router.get("/responses/{response_id}", response_model=None, responses=SSE_RESPONSES)
async def get_response(
    response_id: str,
    state: StateDep,
    who: PrincipalDep,
    stream: bool = False,
    starting_after: Annotated[int | None, Query(ge=-1)] = None,
    include: Annotated[list[str] | None, Query(alias="include[]")] = None,
) -> Response:
    """A response; with ``stream=true`` its events after ``starting_after``, live until it
    ends."""
    found = await read.find(state, who.tenant_id, response_id, "response_id")
    session_id = found.run.session_id
    if stream:
        after = -1 if starting_after is None else starting_after
        return event_stream(state, read.response_events(state, found, after), session_id)
    return _json(await read.response_now(state, found), session_id)


@router.delete("/responses/{response_id}", response_model=None)
async def delete_response(response_id: str, state: StateDep, who: PrincipalDep) -> Response:
    """Delete a response (a running one is cancelled first); its turn stays in the session's
    memory (the chain's later responses still see it)."""
    found = await read.find(state, who.tenant_id, response_id, "response_id")
    await service.delete_response(state, found)
    body = {"id": response_id, "object": "response.deleted", "deleted": True}
    return _json(body, found.run.session_id)


@router.post("/responses/{response_id}/cancel", response_model=None)
async def cancel_response(response_id: str, state: StateDep, who: PrincipalDep) -> Response:
    """Cancel a background response (its model call and tools stop); a finished one cannot
    be cancelled."""
    found = await read.find(state, who.tenant_id, response_id, "response_id")
    found = await service.cancel_response(state, found)
    return _json(await read.response_now(state, found), found.run.session_id)


@router.get("/responses/{response_id}/input_items", response_model=None)
async def list_input_items(
    response_id: str,
    state: StateDep,
    who: PrincipalDep,
    order: Literal["asc", "desc"] = "desc",
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> Response:
    """The response's input items."""
    found = await read.find(state, who.tenant_id, response_id, "response_id")
    return _json(read.input_items(found, order, after, limit), found.run.session_id)
