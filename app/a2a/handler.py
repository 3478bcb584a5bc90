"""The A2A operations on the service's own sessions and runs (a2a-sdk ``RequestHandler``)."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import (
    ExtendedAgentCardNotConfiguredError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from app.a2a.convert import FINAL_STATES, is_final, message_text, task_of, updates
from app.db.base import new_id
from app.errors import AppError, NotFound
from app.runtime.public import run_public
from app.schemas.sessions import SessionCreate
from app.schemas.vocab import CancelMode
from app.services import runs as run_service
from app.services.sessions import create_session, get_session
from app.services.turns import SubmittedTurn, TurnRequest, submit_turn
from app.state import AppState

SCOPE_KEY = "agentstation.a2a"  # the ASGI scope entry the mount fills in (A2ACall)


@dataclass(frozen=True)
class A2ACall:
    """Who calls which agent (set by the mount after authentication)."""

    state: AppState
    tenant_id: str
    agent: str


def _call(context: ServerCallContext) -> A2ACall:
    call = context.state.get(SCOPE_KEY)
    if not isinstance(call, A2ACall):  # the mount always sets it; anything else is a bug
        raise RuntimeError("A2A request without its AgentStation call context")
    return call


class RunsRequestHandler(RequestHandler):
    """A2A context = session (id = context id); A2A task = run; run events = task updates."""

    async def _session(self, call: A2ACall, context_id: str) -> str:
        """The session ``context_id`` of this agent (created on first use, as every session
        is: ``sessions.create_session``)."""
        async with call.state.sessionmaker() as db:
            try:
                _, agent = await get_session(db, call.tenant_id, context_id)
            except NotFound:
                agent = None
        if agent is None:
            body = SessionCreate(agent=call.agent, id=context_id)
            await create_session(call.state, call.tenant_id, body)
        elif agent.name != call.agent:
            raise InvalidParamsError(message=f"context {context_id!r} belongs to another agent")
        return context_id

    async def _submit(
        self, call: A2ACall, params: SendMessageRequest, stream: bool, inline: bool
    ) -> SubmittedTurn:
        """The message as a turn of its context's session (``submit_turn``); ``inline``: run
        by the caller's ``finish``."""
        message = params.message
        text = message_text(message)
        if not text:
            raise InvalidParamsError(message="message: no text or data part")
        context_id = message.context_id or new_id("ctx")
        try:
            await self._session(call, context_id)
        except AppError as exc:  # e.g. an invalid context id
            raise InvalidParamsError(message=f"context_id: {exc.message}") from None
        request = TurnRequest(text, stream=stream, on_disconnect="continue", source="a2a")
        try:
            return await submit_turn(call.state, call.tenant_id, context_id, request, inline=inline)
        except AppError as exc:  # busy session, spent budget, model not ready: its own words
            error = InvalidRequestError if exc.status < 500 else InternalError
            raise error(message=f"{exc.code}: {exc.message}") from None

    async def _task(self, call: A2ACall, run_id: str) -> Task:
        async with call.state.sessionmaker() as db:
            try:
                run = await run_service.get_run(db, call.tenant_id, run_id)
            except NotFound:
                raise TaskNotFoundError from None
        if run.agent != call.agent:
            raise TaskNotFoundError
        return task_of(run_public(run))

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | Message:
        """Run the message; answer the finished task (or at once with ``return_immediately``)."""
        call = _call(context)
        wait = not params.configuration.return_immediately
        # Waiting for the end anyway: the run runs in this request's task.
        turn = await self._submit(call, params, stream=False, inline=wait)
        if wait:
            await turn.finish()
        return await self._task(call, turn.run_id)

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Any]:
        """The task, then its updates as the run's events arrive, ending with its status."""
        call = _call(context)
        turn = await self._submit(call, params, stream=True, inline=False)
        async for update in self._follow(call, turn.run_id, turn.run.session_id):
            yield update

    async def _follow(self, call: A2ACall, run_id: str, context_id: str) -> AsyncGenerator[Any]:
        yield await self._task(call, run_id)
        async for event in call.state.run_manager.follow(run_id, 0):
            for update in updates(event, run_id, context_id):
                yield update
                if is_final(update):
                    return

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Any]:
        """The task's current state, then its updates until it ends (replayed from the log)."""
        call = _call(context)
        task = await self._task(call, params.id)
        async for update in self._follow(call, task.id, task.context_id):
            yield update

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        """The run as a task."""
        return await self._task(_call(context), params.id)

    async def on_cancel_task(
        self, params: CancelTaskRequest, context: ServerCallContext
    ) -> Task | None:
        """Cancel the run (model call and tool stopped); the task as it ended. A task that has
        ended already: ``TaskNotCancelableError`` (-32002), as the SDK's own handlers answer."""
        call = _call(context)
        task = await self._task(call, params.id)  # 404 for another tenant's or agent's run
        if task.status.state in FINAL_STATES:
            raise TaskNotCancelableError(message=f"task {params.id!r} has already ended")
        await call.state.run_manager.cancel(params.id, CancelMode.CANCELLED)
        return await self._task(call, params.id)

    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        """The tasks of one context (``context_id`` is required), newest first."""
        call = _call(context)
        if not params.context_id:
            raise UnsupportedOperationError(message="list tasks needs a context_id")
        size = params.page_size or 20
        async with call.state.sessionmaker() as db:
            try:
                rows, more = await run_service.list_runs(
                    db, call.tenant_id, params.context_id, min(size, 100), params.page_token or None
                )
            except AppError as exc:
                raise InvalidParamsError(message=exc.message) from None
        tasks = [task_of(run_public(r)) for r in rows if r.agent == call.agent]
        token = rows[-1].id if more and rows else ""
        return ListTasksResponse(tasks=tasks, next_page_token=token, page_size=len(tasks))

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        """Not offered (the card says so): follow a task with subscribe instead."""
        raise PushNotificationNotSupportedError

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        """Not offered."""
        raise PushNotificationNotSupportedError

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        """Not offered."""
        raise PushNotificationNotSupportedError

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        """Not offered."""
        raise PushNotificationNotSupportedError

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        """Not offered: the public card is the whole card."""
        raise ExtendedAgentCardNotConfiguredError
