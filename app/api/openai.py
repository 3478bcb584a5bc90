"""OpenAI-compatible /v1/chat/completions and /v1/models (agents and raw models)."""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from app.api.fastpath import RequestOnlyRoute, documented, header_parameter
from app.api.sessions import IDEMPOTENCY_KEY_HEADER, IDEMPOTENCY_KEY_MAX_LENGTH
from app.api.sse import SSE_RESPONSES, chunk_stream
from app.deps import (
    PrincipalDep,
    StateDep,
    app_state,
    authenticate,
    json_body,
    validated_body,
)
from app.errors import BadRequest, NotFound, Unavailable
from app.models.encoded import EncodedJSON, dumps
from app.schemas.common import NAME_PATTERN
from app.schemas.openai import ChatCompletionRequest
from app.schemas.vocab import MultitaskStrategy
from app.services import chat, chat_approvals, chat_pieces, chat_sessions, raw_usage
from app.services.agent_directory import AgentInfo
from app.state import AppState

router = APIRouter(prefix="/v1", tags=["openai"])
log = logging.getLogger(__name__)


def _model_entry(name: str, created: int, kind: str) -> dict[str, Any]:
    return {
        "id": name,
        "object": "model",
        "created": created,
        "owned_by": "agentstation",
        "kind": kind,
    }


async def _agents(state: AppState, tenant_id: str) -> dict[str, AgentInfo]:
    """The tenant's agents by name, newest first (cached per replica, app.services.agents)."""
    return await state.agents.agents(state.sessionmaker, tenant_id)


SESSION_ID_HEADER = "X-Session-Id"
SESSION_ID_MAX_LENGTH = 128
STRATEGY_HEADER = "X-Multitask-Strategy"
STRATEGIES = tuple(MultitaskStrategy)
SESSION_ID_PATTERN = re.compile(NAME_PATTERN)  # as Name (schemas.common)
# What the endpoint reads itself, documented as FastAPI documents a ``Header()`` and a body.
_CHAT_DOC = documented(
    ChatCompletionRequest,
    header_parameter(
        SESSION_ID_HEADER,
        {  # a session id, as session_id_header checks it; empty: none
            "type": "string",
            "maxLength": SESSION_ID_MAX_LENGTH,
            "pattern": f"^({NAME_PATTERN.removeprefix('^').removesuffix('$')})?$",
        },
    ),
    header_parameter(
        STRATEGY_HEADER,
        {"type": "string", "enum": list(STRATEGIES)},
        "With X-Session-Id: what a message to a busy session does",
        titled=False,
    ),
    header_parameter(
        IDEMPOTENCY_KEY_HEADER,
        {"type": "string", "maxLength": IDEMPOTENCY_KEY_MAX_LENGTH},
        "With X-Session-Id: a key sent again answers the turn it started (as POST /messages)",
        titled=False,
    ),
)


# The three optional headers of a chat completion, read in one pass over the request's headers
# (``request.headers.get`` scans them once per name: three scans cost as much as validating a
# small body). Names as ASGI delivers them (lower case); the first of a repeated header wins,
# as with ``request.headers.get``.
_TURN_HEADERS = {b"x-session-id": 0, b"x-multitask-strategy": 1, b"idempotency-key": 2}


def turn_headers(request: Request) -> list[str | None]:
    """``X-Session-Id``, ``X-Multitask-Strategy`` and ``Idempotency-Key`` (None if absent)."""
    found: list[str | None] = [None, None, None]
    for name, value in request.scope["headers"]:
        i = _TURN_HEADERS.get(name)
        if i is not None and found[i] is None:
            found[i] = value.decode("latin-1")
    return found


def idempotency_key_header(value: str | None) -> str | None:
    """``Idempotency-Key`` (400 over 256 characters; empty: none)."""
    value = value or None
    if value is not None and len(value) > IDEMPOTENCY_KEY_MAX_LENGTH:
        raise BadRequest(
            f"{IDEMPOTENCY_KEY_HEADER}: String should have at most "
            f"{IDEMPOTENCY_KEY_MAX_LENGTH} characters",
            param=IDEMPOTENCY_KEY_HEADER,
            code="invalid_value",
        )
    return value


def session_id_header(value: str | None) -> str | None:
    """``X-Session-Id`` (400 over 128 characters, as a ``Header(max_length=128)`` would, and
    for anything a session id cannot be)."""
    if value is not None and len(value) > SESSION_ID_MAX_LENGTH:
        raise BadRequest(
            f"{SESSION_ID_HEADER}: String should have at most {SESSION_ID_MAX_LENGTH} characters",
            param=SESSION_ID_HEADER,
            code="invalid_value",
        )
    if value and not SESSION_ID_PATTERN.fullmatch(value):
        raise BadRequest(
            f"{SESSION_ID_HEADER}: a session id is letters, digits, '.', '_' and '-', "
            "starting with a letter or digit",
            param=SESSION_ID_HEADER,
            code="invalid_value",
        )
    return value


def strategy_header(value: str | None) -> str | None:
    """``X-Multitask-Strategy``: what a message to a busy session does (as REST's
    ``multitask_strategy``); None: the agent's default, else ``reject``."""
    if value is None or value == "":
        return None
    if value not in STRATEGIES:
        raise BadRequest(
            f"{STRATEGY_HEADER} must be one of {', '.join(STRATEGIES)}",
            param=STRATEGY_HEADER,
            code="invalid_value",
        )
    return value


async def chat_completions(request: Request) -> Response:
    """An agent (by name) or a raw model answers, streamed or whole."""
    # The hottest endpoint reads its body, headers and key with plain calls rather than a
    # declared body, Header()s and dependencies: solving those was ~55 of ~165 µs of CPU per
    # request. The order of the checks is FastAPI's: JSON syntax, key, headers, body fields.
    data = await json_body(request)
    who = await authenticate(request)
    session_value, strategy_value, idempotency_value = turn_headers(request)
    x_session_id = session_id_header(session_value)
    strategy = strategy_header(strategy_value)
    idempotency_key = idempotency_key_header(idempotency_value)
    body = validated_body(ChatCompletionRequest, data)
    state = app_state(request)
    agent = (await _agents(state, who.tenant_id)).get(body.model)
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    if agent is not None:
        chat.check_agent_params(body)  # 400 for a field an agent cannot honour
        tools = chat_approvals.trailing_tool_messages(body.messages) if x_session_id else []
        if x_session_id and tools:
            # Decisions about the calls a waiting run of the session asked for (approvals.md).
            run_id, after = await chat_approvals.resume_from_tool_messages(
                state, who.tenant_id, agent, x_session_id, tools
            )
            hold = chat.holds_turns(agent.spec) or chat.wants_json(body)
            pieces = chat_sessions.run_pieces(state, run_id, hold, body, after)
        elif x_session_id:
            # The turn POST /v1/sessions/{id}/messages runs (one submission and admission
            # path; a whole answer runs in this request's task), its events as chat pieces.
            pieces = await chat_sessions.session_pieces(
                state, who.tenant_id, agent, x_session_id, body, strategy, idempotency_key
            )
        else:
            if agent.spec.approval_tools() is not None:
                raise BadRequest(
                    f"agent {agent.name!r} waits for approval of tool calls: send "
                    "X-Session-Id so its run can wait for your decision (docs/approvals.md)",
                    param="X-Session-Id",
                )
            chat.check_ready(state, agent.spec)
            split = chat.split_input(body.messages)  # 400 before any byte is streamed
            budget = await chat.preflight_tenant(state, who.tenant_id)  # 429 for a spent budget
            pieces = chat.stateless_pieces(
                state, agent, body, who.tenant_id, budget, split, deltas=body.stream
            )
        if body.stream:
            return await chunk_stream(chat_pieces.chunks(agent.name, pieces, include_usage))
        final = chat_pieces.Piece()
        async for piece in pieces:
            final = piece if piece.final else final
        # Compact JSON as JSONResponse writes it (same bytes and content type), by the encoder
        # built once rather than one json.dumps encoder per response; FastAPI would first walk
        # the plain dict with jsonable_encoder.
        reply = chat_pieces.completion(
            agent.name, final.answer, final.usage, final.finish_reason, final.tool_calls
        )
        return Response(dumps(reply), media_type="application/json")
    handle = state.models.get(body.model)
    if handle is None or not who.may_use(body.model):  # a key's model list hides the others
        raise NotFound(f"model {body.model!r} not found", param="model", code="model_not_found")
    if not handle.ready:
        raise Unavailable(f"model {body.model!r} is not ready", code="model_not_ready")
    # The tenant's token budget and usage count raw calls as they count agents' (429 first).
    limit, _ = await chat.preflight_tenant(state, who.tenant_id)
    raw_request = body.model_dump(exclude_none=True)
    if body.stream:
        raw_request["stream_options"] = {"include_usage": True}  # to charge; dropped if unasked
        chunks = raw_usage.charged_stream(
            state, who.tenant_id, limit, handle.raw.stream(raw_request), include_usage
        )
        return await chunk_stream(chunks)
    answer = await handle.raw.complete(raw_request)
    await raw_usage.charge(state, who.tenant_id, limit, answer.get("usage"))
    if isinstance(answer, EncodedJSON):  # an upstream's bytes: passed through, not re-encoded
        return Response(answer.raw, media_type="application/json")
    return JSONResponse(answer)


router.add_api_route(
    "/chat/completions",
    chat_completions,
    methods=["POST"],
    response_model=None,
    responses=SSE_RESPONSES,
    openapi_extra=_CHAT_DOC,
    route_class_override=RequestOnlyRoute,
)


# After the chat route: Starlette tries routes in order (the hottest first).
@router.get("/models")
async def list_models(state: StateDep, who: PrincipalDep) -> dict[str, Any]:
    """The tenant's agents and the configured raw models."""
    data = [
        _model_entry(a.name, int(a.created_at.timestamp()), "agent")
        for a in (await _agents(state, who.tenant_id)).values()
    ]
    data += [_model_entry(name, 0, "model") for name in who.visible(state.models.names())]
    return {"object": "list", "data": data}


@router.get("/models/{model_id:path}")
async def get_model(model_id: str, state: StateDep, who: PrincipalDep) -> dict[str, Any]:
    """One agent or raw model."""
    agent = (await _agents(state, who.tenant_id)).get(model_id)
    if agent is not None:
        return _model_entry(agent.name, int(agent.created_at.timestamp()), "agent")
    if model_id in state.models.names() and who.may_use(model_id):
        return _model_entry(model_id, 0, "model")
    raise NotFound(f"model {model_id!r} not found", param="model", code="model_not_found")
