"""Reading responses back: a stored response by its id (a run, or a continuation: a segment of
a run that went on after approval), its Response (from the run's event log), its stream from
any point (``starting_after``), its input items."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from app.db.models import ResponseContinuation, Run, RunEvent
from app.db.models import Session as SessionRow
from app.errors import BadRequest, NotFound
from app.schemas.vocab import END_EVENT, EventType, RunStatus
from app.services import responses_ids as ids
from app.services import responses_resumed as continued
from app.services.responses_events import ResponseStream, response_status, usage_of
from app.state import AppState


@dataclass
class Stored:
    """A stored response: its run and the segment of the run's log it is (0: the run's own
    response; ``k``: the continuation that answered the run's ``k``-th pause)."""

    id: str
    run: Run
    segment: int = 0
    meta: dict[str, Any] | None = None  # its request's fields (None: the run's own)
    created: datetime | None = None  # a continuation's creation (None: the run's)

    @property
    def request(self) -> dict[str, Any]:
        """What the Response repeats of its request (``responses.response_meta``)."""
        if self.meta is not None:
            return self.meta
        return (self.run.options or {}).get("response") or {}


def of_run(run: Run) -> Stored:
    """A run's own response (segment 0), as it starts."""
    return Stored(run.id, run)


def not_found(response_id: str, param: str) -> NotFound:
    """404 naming the id (OpenAI's message)."""
    return NotFound(
        f"Response with id '{response_id}' not found.", param=param, code="response_not_found"
    )


async def find(
    state: AppState, tenant_id: str, response_id: str, param: str, forgotten: bool = False
) -> Stored:
    """The tenant's stored response ``response_id``: a run's own, or a continuation; 404
    naming the id otherwise (``param``: where the request named it). A ``store: false``
    answer that ended is not found (``forgotten``: found, to answer its approval requests)."""
    if not response_id.startswith(ids.RESPONSE):
        raise not_found(response_id, param)
    async with state.sessionmaker() as db:
        run = await db.get(Run, response_id)
        cont = None if run is not None else await db.get(ResponseContinuation, response_id)
        if cont is not None:
            run = await db.get(Run, cont.run_id)
        if run is None or run.tenant_id != tenant_id:
            raise not_found(response_id, param)
    if cont is None:
        if ((run.options or {}).get("response") or {}).get("deleted"):
            raise not_found(response_id, param)  # deleted; a continuation of it stays
        return Stored(run.id, run)
    if (cont.request or {}).get("deleted") and not forgotten:
        raise not_found(response_id, param)
    return Stored(cont.id, run, cont.segment, cont.request, cont.created_at)


async def latest_in(state: AppState, tenant_id: str, conversation: str) -> Stored | None:
    """A conversation's latest response (None: it has none; 404 for an unknown or another
    tenant's conversation)."""
    async with state.sessionmaker() as db:
        session_pk = await db.scalar(
            sa.select(SessionRow.pk).where(
                SessionRow.tenant_id == tenant_id, SessionRow.id == conversation
            )
        )
        if session_pk is None or not conversation.startswith(ids.CONVERSATION):
            raise NotFound(
                f"Conversation with id '{conversation}' not found.",
                param="conversation",
                code="conversation_not_found",
            )
        run = await db.scalar(
            sa.select(Run)
            .where(Run.session_pk == session_pk)
            .order_by(Run.created_at.desc(), Run.id.desc())
            .limit(1)
        )
        if run is None:
            return None
        cont = await db.scalar(
            sa.select(ResponseContinuation)
            .where(ResponseContinuation.run_id == run.id)
            .order_by(ResponseContinuation.segment.desc())
            .limit(1)
        )
    if cont is None:
        return Stored(run.id, run)
    return Stored(cont.id, run, cont.segment, cont.request, cont.created_at)


async def last_segment(state: AppState, run_id: str) -> int:
    """The segment of a run's latest response (0: the run's own; none answered its pauses)."""
    async with state.sessionmaker() as db:
        last = await db.scalar(
            sa.select(sa.func.max(ResponseContinuation.segment)).where(
                ResponseContinuation.run_id == run_id
            )
        )
    return int(last or 0)


def response_base(found: Stored) -> dict[str, Any]:
    """The Response before any event: its request's fields."""
    created = found.created or found.run.created_at
    return base_of(found.id, int(created.timestamp()), found.request, found.run.agent)


def base_of(response_id: str, created_at: int, meta: dict[str, Any], agent: str) -> dict[str, Any]:
    """The Response before any event, from its request's fields (``responses.response_meta``)."""
    conversation = meta.get("conversation")
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": "in_progress",
        "model": meta.get("model") or agent,
        "output": [],
        "instructions": meta.get("instructions"),
        "tools": meta.get("tools") or [],
        "tool_choice": meta.get("tool_choice") or "auto",
        "parallel_tool_calls": bool(meta.get("parallel_tool_calls", True)),
        "temperature": meta.get("temperature"),
        "top_p": meta.get("top_p"),
        "max_output_tokens": meta.get("max_output_tokens"),
        "previous_response_id": meta.get("previous_response_id"),
        "conversation": {"id": conversation} if conversation else None,
        "metadata": meta.get("metadata") or {},
        "text": meta.get("text") or {"format": {"type": "text"}},
        "background": bool(meta.get("background")),
        "prompt_cache_key": meta.get("prompt_cache_key"),
        "user": meta.get("user"),
        "truncation": "disabled",
        "error": None,
        "incomplete_details": None,
        "usage": None,
    }


def stream_of(found: Stored, quiet: bool = False) -> ResponseStream:
    """A fresh mapper of the response's events (``quiet``: for its Response only); how the
    run's messages stream and its MCP servers' tools are the run's."""
    run = found.run
    meta = (run.options or {}).get("response") or {}
    base = response_base(found)
    hold = bool(meta.get("hold"))
    decided = decisions_in(found.request.get("input") or []) if found.segment else None
    return ResponseStream(base, run.agent, hold, quiet, meta.get("mcp"), found.segment, decided)


def decisions_in(items: list[dict[str, Any]]) -> dict[str, bool]:
    """A continuation's decisions: approval request id → approved."""
    return {
        str(item.get("approval_request_id")): bool(item.get("approve"))
        for item in items
        if isinstance(item, dict) and item.get("type") == "mcp_approval_response"
    }


async def stored_events(state: AppState, run_id: str) -> list[tuple[int, str, dict[str, Any]]]:
    """A run's stored events, in order."""
    async with state.sessionmaker() as db:
        rows = await db.execute(
            sa.select(RunEvent.seq, RunEvent.type, RunEvent.data)
            .where(RunEvent.run_id == run_id)
            .order_by(RunEvent.seq)
        )
        return [(int(seq), str(type_), data) for seq, type_, data in rows]


async def response_now(state: AppState, found: Stored) -> dict[str, Any]:
    """The Response as stored now (a running one: what its stored events show so far)."""
    run = found.run
    stream = stream_of(found, quiet=True)
    for _, type_, data in await stored_events(state, run.id):
        stream.feed(type_, data)
        if stream.ended:
            break
    response = stream.response
    if stream.paused:  # answered another way: the run's next response is named
        after = await continued.following(state, run.id, found.segment)
        if after is not None and after[1].get("resumed_by") and not after[1].get("deleted"):
            response["metadata"] = {
                **(response.get("metadata") or {}),
                continued.NEXT_KEY: after[0],
            }
    if not stream.ended:
        response["status"] = response_status(run.status, run.stop_reason)
        if RunStatus(run.status).terminal:  # ended without its event stored (a crash)
            prompt, completion = stream.spent
            used = {
                "prompt_tokens": run.prompt_tokens - prompt,
                "completion_tokens": run.completion_tokens - completion,
            }
            response["usage"] = usage_of({"usage": used})
    return response


async def response_events(
    state: AppState, found: Stored, starting_after: int = -1
) -> AsyncIterator[list[dict[str, Any]]]:
    """The Response's stream events after ``starting_after``, live until it ends (the run's
    whole log replayed through the mapper: the numbers are the ones first sent), those of one
    run event together (one SSE write for all of them: issue 25)."""
    stream = stream_of(found)
    async for event in state.run_manager.follow(found.run.id, 0):
        out = stream.feed(event.type, event.data)
        # One run event's stream events are numbered in order: most are all after the point.
        if out and out[0]["sequence_number"] <= starting_after:
            out = [e for e in out if e["sequence_number"] > starting_after]
        if out:
            yield out
        if stream.ended:
            return  # (at its pause too: the run's log after it is the next response's)


async def final_response(state: AppState, found: Stored) -> dict[str, Any]:
    """The Response once it has ended (its run ended or paused)."""
    stream = stream_of(found, quiet=True)
    async for event in state.run_manager.follow(found.run.id, 0):
        stream.feed(event.type, event.data)
        if stream.ended:
            break
    return stream.response


def from_end(run: Run, final: Run, public: dict[str, Any]) -> dict[str, Any]:
    """The Response of a ``kind: model`` run this process just finished, from its end in
    memory (``final``, its ``public`` shape): its log is ``run.created``, the reply's deltas,
    the reply, the terminal event, and the deltas change nothing in the Response, so this is
    what replaying the stored log gives, without reading it."""
    stream = stream_of(of_run(run), quiet=True)
    stream.feed(EventType.RUN_CREATED, {"run": {"status": "running"}})
    if final.output:
        stream.feed(EventType.MESSAGE, {"index": 0, "message": final.output})
    status = RunStatus(final.status)
    if status.terminal:
        stream.feed(END_EVENT[status], {"run": public, "error": final.error})
    else:  # the client went away before the end (a whole answer is not waited for then)
        stream.response["status"] = response_status(final.status, None)
    return stream.response


def input_items(found: Stored, order: str, after: str | None, limit: int) -> dict[str, Any]:
    """``GET /v1/responses/{id}/input_items``: the request's input as items with ids."""
    if order not in ("asc", "desc"):
        raise BadRequest("order must be asc or desc", param="order")
    if not 1 <= limit <= 100:
        raise BadRequest("limit must be between 1 and 100", param="limit")
    inputs = found.request.get("input") or []
    items = [_as_item(found.id, i, item) for i, item in enumerate(inputs)]
    return item_page(items, order, after, limit)


def item_page(
    items: list[dict[str, Any]], order: str, after: str | None, limit: int
) -> dict[str, Any]:
    """One page of items (``items`` oldest first; ``order=desc`` newest first), after the item
    ``after`` (400 ``invalid_cursor`` if it is not one of them), as OpenAI's list object."""
    if order == "desc":
        items = items[::-1]
    if after is not None:
        at = next((i for i, item in enumerate(items) if item["id"] == after), None)
        if at is None:
            raise BadRequest(f"unknown cursor {after!r}", param="after", code="invalid_cursor")
        items = items[at + 1 :]
    page = items[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(items) > limit,
    }


def _as_item(run_id: str, index: int, item: dict[str, Any]) -> dict[str, Any]:
    """An input item as OpenAI lists it (an id; a message's text as ``input_text`` parts)."""
    suffix = run_id.removeprefix("resp_")
    kind = item.get("type") or "message"
    out = {**item, "type": kind, "id": item.get("id") or f"in_{suffix}_{index}"}
    if kind == "message":
        content = item.get("content")
        role = item.get("role", "user")
        part = "output_text" if role == "assistant" else "input_text"
        if isinstance(content, str):
            content = [{"type": part, "text": content}]
        out["content"] = content or []
        out.setdefault("status", "completed")
        if role == "assistant":
            for p in out["content"]:
                p.setdefault("annotations", [])
    if kind == "function_call_output":
        out.setdefault("status", "completed")
    return out
