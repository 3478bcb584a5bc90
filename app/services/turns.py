"""One turn of a session, whichever front door it comes in by: ``submit_turn``.

Every front door parses its own request, then calls ``submit_turn`` and nothing else of the
runtime to start a turn: ``POST /v1/sessions/{id}/messages`` (app/api/sessions.py),
``/v1/chat/completions`` with ``X-Session-Id`` (app/services/chat_sessions.py), A2A
``message/send`` and ``message/stream`` (app/a2a/handler.py), the ``SendMessage`` tool
(app/services/messenger.py) and the Responses API. ``submit_turn`` owns, in this order:

1. the turn's lease (``RunStore.lease()``: on PostgreSQL the lookup's pooled connection goes on
   to the admission and, when the run starts at once, to the run's task);
2. the lookup (``prepare_submission``: the session, its agent's pinned spec, the budget
   preflight, the models' readiness), creating the session on first use when asked;
3. the admission (``RunManager.submit``: the multitask strategy, the Idempotency-Key, the run
   row) and the start of the run;
4. the inline-or-stream choice: a caller that waits for the run's end anyway gets an *inline*
   run, run in its own task by ``SubmittedTurn.finish`` (no task, no wake-up); a caller that
   streams gets a run with its own task and follows it with ``SubmittedTurn.events``.

Example (the whole answer, in memory)::

    turn = await submit_turn(state, tenant_id, session_id, TurnRequest("hello"))
    end = await turn.finish()  # runs it here; end.run.status, end.run.output, end.public

Example (a stream, with a per-turn system message)::

    request = TurnRequest(
        message, gen_params={"temperature": 0.2}, stream=True,
        instructions="Answer in French.", source="responses",
    )
    turn = await submit_turn(state, tenant_id, session_id, request, agent=agent, create=True)
    async for event in turn.events():  # run.created, message.delta, ..., a terminal event
        ...
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from agents.schema import AgentMessage
from app.db.models import Run
from app.errors import Conflict, Unavailable
from app.ops.budget_store import tenant_budget
from app.runtime.admission import Submission
from app.runtime.events import Event
from app.runtime.public import run_public
from app.runtime.store import Found, SessionNotFound, TurnLease
from app.schemas.agents import AgentSpec
from app.schemas.common import MessageIn
from app.schemas.sessions import RunCreate, SessionCreate
from app.schemas.vocab import CancelMode
from app.services.agent_directory import AgentInfo
from app.services.agent_refs import pinned_spec
from app.services.runs import check_session_agent, get_run
from app.services.sessions import new_session
from app.state import AppState

__all__ = [
    "SessionNotFound",
    "SubmittedTurn",
    "TurnEnd",
    "TurnRequest",
    "prepare_submission",
    "submit_turn",
]

Disconnected = Callable[[], Awaitable[bool]]  # e.g. ``request.is_disconnected``


@dataclass(frozen=True)
class TurnRequest:
    """What a turn is asked to do (where it runs, tenant and session, is ``submit_turn``'s).

    ``message``: the turn's input, one message: a string (from ``user``), a ``MessageIn``, an
    AgentMessage's dict (``sender``, ``content``, ``formatted``, ...) or an ``AgentMessage``
    (taken as it is: the caller must not change it afterwards); it is stored as the run's
    ``input`` and added to the session's memory. ``gen_params``: LLM parameters for this
    turn, already validated (``GenParams.to_kwargs()``), over the spec's. ``strategy``: the
    multitask strategy when the session is busy (``reject``, ``enqueue``, ``interrupt``,
    ``rollback``; None: the agent's default, else ``reject``). ``stream``: the caller follows
    the run's events (the run gets its own task) rather than waiting for its end (see
    ``submit_turn``'s ``inline``). ``on_disconnect``: ``cancel`` or ``continue`` when the
    caller's client goes away (``SubmittedTurn.finish``'s ``disconnected``,
    ``SubmittedTurn.on_drop``). ``idempotency_key``: a key seen before answers its earlier run
    (``SubmittedTurn.created`` is then False). ``source``: the front door, kept in the run's
    ``options`` (``openai``, ``a2a``, ``responses``, ...). ``instructions``: a system message
    for this turn only: every model call of the turn sees it after the agent's own system
    messages; never stored in memory (kept in the run's ``options``, so a resumed run sees it
    too). ``run_id``: the new run's id (None: a new ``run_<32 hex>``; the Responses API mints
    ``resp_...``). ``options``: more entries for the run's ``options`` column (e.g. the
    Responses API's ``response`` metadata), read back from the stored run.
    """

    message: MessageIn | str | dict[str, Any] | AgentMessage
    gen_params: dict[str, Any] = field(default_factory=dict)
    strategy: str | None = None
    stream: bool = False
    on_disconnect: str = "cancel"
    idempotency_key: str | None = None
    source: str | None = None
    instructions: str | None = None
    run_id: str | None = None
    options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(
        cls, body: RunCreate, idempotency_key: str | None = None, source: str | None = None
    ) -> TurnRequest:
        """The turn ``POST /v1/sessions/{id}/messages``'s body asks for (a ``multitask_strategy``
        left out of the body is the agent's default)."""
        return cls(
            message=body.message,
            gen_params=body.gen_params.to_kwargs(),
            strategy=(
                body.multitask_strategy if "multitask_strategy" in body.model_fields_set else None
            ),
            stream=body.stream,
            on_disconnect=body.on_disconnect,
            idempotency_key=idempotency_key,
            source=source,
        )

    def run_options(self, strategy: str) -> dict[str, Any]:
        """The run's ``options`` column (not part of the run's public shape)."""
        options: dict[str, Any] = {
            **self.options,
            "stream": self.stream,
            "on_disconnect": self.on_disconnect,
            "multitask_strategy": strategy,
        }
        if self.source is not None:
            options["source"] = self.source
        if self.instructions is not None:
            options["instructions"] = self.instructions
        return options


@dataclass(frozen=True)
class TurnEnd:
    """A finished run: ``run`` (the row: ``status``, ``stop_reason``, ``output``, ``error``,
    ``pending``, token counts) and ``public`` (its API shape, ``run_public``, as the terminal
    event carries it). ``run.status`` may still be ``queued``/``running`` only when
    ``finish`` stopped waiting because the client went away."""

    run: Run
    public: dict[str, Any]


@dataclass
class SubmittedTurn:
    """A submitted turn: ``run`` as admitted (``running`` or ``queued``), ``created`` (False:
    an earlier run of the same Idempotency-Key), ``spec`` (the agent spec it runs),
    ``inline`` (the caller must call ``finish``: the run has no task of its own)."""

    state: AppState
    tenant_id: str
    request: TurnRequest
    run: Run
    created: bool
    inline: bool
    spec: AgentSpec

    @property
    def run_id(self) -> str:
        return self.run.id

    async def finish(self, disconnected: Disconnected | None = None) -> TurnEnd:
        """The run's end: an inline run is run here, to its end, in the calling task; any
        other run is waited for. ``disconnected`` (polled every 0.5 s once the turn has lasted
        0.5 s): when it answers True, a turn whose ``on_disconnect`` is ``cancel`` is
        cancelled, and a waited-for run is no longer waited for (its state then is returned).
        """
        runs = self.state.run_manager
        cancel = self.request.on_disconnect == "cancel"
        if self.inline:
            await _run_here(self, disconnected if cancel else None)
        elif disconnected is None:
            await runs.wait(self.run.id)
        else:
            await _wait_or_cancel(self, disconnected, cancel)
        return await self.end()

    async def end(self) -> TurnEnd:
        """The run's state now: from memory when this process just finished it, else read."""
        runs = self.state.run_manager
        final, public = runs.result(self.run.id), runs.result_public(self.run.id)
        if final is None or public is None:
            async with self.state.sessionmaker() as db:
                final = await get_run(db, self.tenant_id, self.run.id)
            public = run_public(final)
        return TurnEnd(final, public)

    def events(self, after: int = 0) -> AsyncIterator[Event]:
        """The run's events after sequence number ``after`` (stored, then live) until its
        terminal event (``run.completed``, ``run.failed``, ``run.cancelled``,
        ``run.interrupted``, ``run.requires_action``). Not for an inline run."""
        assert not self.inline, "an inline run is run by finish()"
        return self.state.run_manager.follow(self.run.id, after)

    def on_drop(self) -> None:
        """The caller's stream was dropped: cancel the run when ``on_disconnect`` says so."""
        if self.request.on_disconnect == "cancel":
            self.state.run_manager.cancel_soon(self.run.id, CancelMode.CLIENT_DISCONNECTED)

    async def cancel(self, mode: CancelMode = CancelMode.CANCELLED) -> None:
        """Cancel the run and wait for it to stop."""
        await self.state.run_manager.cancel(self.run.id, mode)


async def submit_turn(
    state: AppState,
    tenant_id: str,
    session_id: str,
    request: TurnRequest,
    *,
    agent: AgentInfo | None = None,
    create: bool = False,
    inline: bool | None = None,
) -> SubmittedTurn:
    """Submit one turn to the tenant's session ``session_id``: lease, lookup, admission, start.

    ``agent``: the agent the session must belong to (400 naming ``X-Session-Id`` otherwise;
    None: any). ``create``: an unknown session is created for ``agent`` (required then) and
    the turn goes on (a concurrent first request creating it too is fine). ``inline``: run the
    new run in the caller's task, by ``SubmittedTurn.finish`` (the caller must call it); None:
    inline unless ``request.stream``. Pass False for a caller that returns before the run ends
    or that runs inside another run's task (whose usage and budget scopes the run must not
    share): the run gets its own task, and ``finish`` waits for it.

    Raises what the lookup and admission refuse with (``AppError``s, the HTTP status in
    ``.status``): 404 ``SessionNotFound`` (without ``create``), 400 (another agent's session),
    429 ``budget_exceeded``, 503 ``model_not_ready``, 409 ``session_busy`` (``reject``).
    """
    inline = not request.stream if inline is None else inline
    runs = state.run_manager
    async with runs.store.lease() as lease:
        try:
            sub = await prepare_submission(
                state, lease, tenant_id, session_id, request, agent=agent
            )
        except SessionNotFound:
            if not create or agent is None:
                raise
            await _create(state, tenant_id, agent.name, session_id)
            sub = await prepare_submission(
                state, lease, tenant_id, session_id, request, agent=agent
            )
        run, created = await runs.submit(sub, lease, inline=inline)
    return SubmittedTurn(state, tenant_id, request, run, created, inline and created, sub.spec)


async def _create(state: AppState, tenant_id: str, agent: str, session_id: str) -> None:
    try:  # one statement; the session kept for the lookup that follows
        await new_session(state, tenant_id, SessionCreate(agent=agent, id=session_id))
    except Conflict:  # a concurrent first request created it: use that one
        pass


async def _look_up(
    state: AppState, lease: TurnLease, tenant_id: str, session_id: str, fresh: bool
) -> tuple[Found, bool]:
    """The session for a turn, and whether it came from the cache.

    What a turn reads of a session does not change while it exists (its pk, agent, pinned
    version and spec, creation time), so it is kept for ``session_cache_ttl_s`` when its
    tenant has no token budget and its agent no session budget (those figures must be read
    afresh every turn): such a turn then needs no lookup statement. A cached session deleted
    meanwhile (here its entry is dropped at once; on another replica it expires) fails its
    admission, which then looks it up afresh (``Submission.relookup``).
    """
    key = (tenant_id, session_id)
    cache = state.turn_sessions
    found = None if fresh else cache.get(key)
    if found is not None and await _unlimited(state, tenant_id):
        return found, True
    found = await state.run_manager.store.lookup(lease, tenant_id, session_id)
    budget = found.spec.budget
    if found.tenant_limit is None and (budget is None or budget.max_total_tokens is None):
        state.tenant_usage.unlimited.put(tenant_id, True)
        cache.put(key, found)
    return found, False


async def _unlimited(state: AppState, tenant_id: str) -> bool:
    """Whether the tenant is known to have no token budget: from the cache, else one query
    shared by the turns that find it expired at once (before, each of them looked its session
    up again: 32 lookups every ``tenant_budget_ttl_s`` at 32 sessions)."""
    usage = state.tenant_usage
    if usage.unlimited.get(tenant_id):
        return True
    return bool(await usage.unlimited.load(tenant_id, partial(_read_unlimited, state, tenant_id)))


async def _read_unlimited(state: AppState, tenant_id: str) -> bool | None:
    """True when the tenant has no budget (cached then), None when it has one (not cached)."""
    async with state.sessionmaker() as db:
        limit, _used = await tenant_budget(db, tenant_id)
    return True if limit is None else None


async def prepare_submission(
    state: AppState,
    lease: TurnLease,
    tenant_id: str,
    session_id: str,
    request: TurnRequest,
    *,
    agent: AgentInfo | None = None,
    fresh: bool = False,
) -> Submission:
    """Look the session and its pinned spec up (``_look_up``: cached, or through the run
    store on the turn's ``lease``; on PostgreSQL that connection goes on to the run's
    admission, ``RunManager.submit``). Called by ``submit_turn`` (and tests of the lease).

    ``agent``: the agent the session must belong to (the chat endpoint's model); ``fresh``:
    never from the cache. 404 ``SessionNotFound`` for an unknown session; 429
    ``budget_exceeded`` when the session's or tenant's budget is spent; 503
    ``model_not_ready`` when a model the agent uses is not loaded.
    """
    found, cached = await _look_up(state, lease, tenant_id, session_id, fresh)
    row, spec = found.session, found.spec
    check_session_agent(session_id, row.agent_id, found.agent_name, agent)
    # With the tokens this replica counted while the tenant looked unlimited.
    figures = found.figures(state.tenant_usage.pending.get(tenant_id, 0))
    figures.preflight()  # 429 budget_exceeded when spent
    # Stored agents it names: their versions when the session started.
    spec = await pinned_spec(state.engine, state.sessionmaker, tenant_id, spec, row.created_at)
    for model in sorted(spec.model_names()):
        handle = state.models.get(model)
        if handle is None or not handle.ready:
            raise Unavailable(f"model {model!r} is not ready", code="model_not_ready")
    message = request.message
    if isinstance(message, MessageIn):
        message = message.model_dump()
    strategy = request.strategy or spec.multitask_strategy or "reject"
    return Submission(
        tenant_id=tenant_id,
        session=row,
        agent_name=found.agent_name,
        spec=spec,
        message=message,
        strategy=strategy,
        gen_params=request.gen_params,
        options=request.run_options(strategy),
        idempotency_key=request.idempotency_key,
        run_id=request.run_id,
        budget=figures,
        charge_later=partial(state.tenant_usage.charge, limited=False),
        relookup=(
            partial(_relookup, state, lease, tenant_id, session_id, request, agent)
            if cached
            else None
        ),
        confirmed=partial(_confirmed, state, (tenant_id, session_id), found) if cached else None,
    )


def _confirmed(state: AppState, key: tuple[str, str], found: Found, current: bool) -> None:
    """A cached session's admission read its row: still at the agent and version the entry
    names, the entry is kept for another ``session_cache_ttl_s`` (a session turned every
    second or so was otherwise looked up every other turn, one round trip each); else dropped
    (the next turn looks it up). The tenant's budget is checked apart (``_unlimited``)."""
    if not current:
        state.turn_sessions.pop(key)
    elif state.turn_sessions.get(key) is found:
        state.turn_sessions.put(key, found)


async def _relookup(
    state: AppState,
    lease: TurnLease,
    tenant_id: str,
    session_id: str,
    request: TurnRequest,
    agent: AgentInfo | None,
) -> Submission:
    """The submission again, its session read afresh (the cached one was gone at admission)."""
    state.turn_sessions.pop((tenant_id, session_id))
    return await prepare_submission(
        state, lease, tenant_id, session_id, request, agent=agent, fresh=True
    )


async def _run_here(turn: SubmittedTurn, disconnected: Disconnected | None) -> None:
    """Run the inline run here; with ``disconnected``, a client gone for good cancels it
    (checked every 0.5 s by a watcher started only once the run has lasted 0.5 s)."""
    runs = turn.state.run_manager
    watcher: asyncio.Task[None] | None = None

    def watch() -> None:
        nonlocal watcher
        assert disconnected is not None
        watcher = asyncio.create_task(_cancel_when_gone(turn, disconnected))

    timer = asyncio.get_running_loop().call_later(0.5, watch) if disconnected else None
    try:
        await runs.run_here(turn.run.id)
    finally:
        if timer is not None:
            timer.cancel()
        if watcher is not None:
            watcher.cancel()


async def _cancel_when_gone(turn: SubmittedTurn, disconnected: Disconnected) -> None:
    while True:  # polled: the request's receive channel is the only sign of a drop
        if await disconnected():
            turn.state.run_manager.cancel_soon(turn.run.id, CancelMode.CLIENT_DISCONNECTED)
            return
        await asyncio.sleep(0.5)


async def _wait_or_cancel(turn: SubmittedTurn, disconnected: Disconnected, cancel: bool) -> None:
    runs = turn.state.run_manager
    waiter = asyncio.ensure_future(runs.wait(turn.run.id))
    try:
        while not waiter.done():
            await asyncio.wait({waiter}, timeout=0.5)
            if not waiter.done() and await disconnected():
                if cancel:
                    runs.cancel_soon(turn.run.id, CancelMode.CLIENT_DISCONNECTED)
                return
    finally:
        if not waiter.done():
            waiter.cancel()
