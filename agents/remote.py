"""``RemoteAgent``: an agent that lives on another server, spoken to over A2A (official SDK).

It behaves like any agent: ``await agent("hi", session_id=s)`` or ``agent.stream(...)`` (the
remote's tokens arrive as STREAM_ING chunks), memory per session (so ``state_dict`` carries the
remote context id: the next turn of the session continues the same remote conversation), and
a cancelled turn cancels the remote task.

    expert = RemoteAgent("http://host:8000/a2a/expert/", api_key="...")
    reply = await expert("What is 6*7?", session_id="s1")
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx

from agents.agent import AsyncAgent
from agents.memory import Memory, SessionId
from agents.schema import AgentMessage, AgentStatusCode
from agents.tracing import outgoing_headers

log = logging.getLogger(__name__)
CONTEXT_KEY = "a2a_context_id"  # in the reply's extra_info: the remote conversation
TASK_KEY = "a2a_task_id"
_message_ids = itertools.count(1)


class RemoteAgentError(RuntimeError):
    """The remote agent's task failed or was cancelled on its side."""


class RemoteAgent(AsyncAgent):
    """An A2A agent at base URL ``url`` (card: ``url/.well-known/agent-card.json``)."""

    def __init__(
        self,
        url: str,
        *,
        name: str | None = None,
        api_key: str | None = None,
        headers: dict[str, str] | None = None,
        timeout_s: float = 300.0,
        url_check: Callable[[str], None] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(llm=None, memory=Memory, name=name or "remote")
        self.url = url
        self._headers = dict(headers or {})
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._timeout_s = timeout_s
        self._url_check = url_check  # raises for a URL the caller may not reach (SSRF policy)
        self._transport = transport
        self._card: Any = None

    def _context_id(self, session_id: SessionId) -> str:
        history = self.memory.get(session_id) if self.memory is not None else None
        for message in reversed(list(history or [])):
            info = message.extra_info
            if isinstance(info, dict) and info.get(CONTEXT_KEY):
                return str(info[CONTEXT_KEY])
        return ""

    async def _client(self, http: httpx.AsyncClient) -> Any:
        from a2a.client import A2ACardResolver, ClientConfig, ClientFactory

        if self._card is None:
            if self._url_check is not None:
                await asyncio.to_thread(self._url_check, self.url)
            self._card = await A2ACardResolver(http, base_url=self.url).get_agent_card()
            for interface in self._card.supported_interfaces:
                if self._url_check is not None:  # the card may point elsewhere: check that too
                    await asyncio.to_thread(self._url_check, interface.url)
        return ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create(self._card)

    async def forward(
        self, *message: AgentMessage, session_id: SessionId = 0, **kwargs: Any
    ) -> AsyncIterator[AgentMessage]:
        """Send the input to the remote agent and stream its answer back."""
        from a2a.types import Message, Part, Role, SendMessageRequest

        text = "\n".join(_text(m.content) for m in message)
        request = SendMessageRequest(
            message=Message(
                message_id=f"{self.name}-{next(_message_ids)}",
                context_id=self._context_id(session_id),
                role=Role.ROLE_USER,
                parts=[Part(text=text)],
            )
        )
        timeout = httpx.Timeout(self._timeout_s, connect=10.0)
        headers = outgoing_headers(self._headers)  # the trace context, when tracing is on
        async with httpx.AsyncClient(
            headers=headers, timeout=timeout, transport=self._transport
        ) as http:
            client = await self._client(http)
            state = _TaskState()
            try:
                async for response in client.send_message(request):
                    chunk = state.update(response, self.name)
                    if chunk is not None:
                        yield chunk
            except BaseException:
                if state.task_id and not state.ended:
                    await _cancel(client, state.task_id)
                raise
        if state.failure is not None:
            raise RemoteAgentError(state.failure)
        yield AgentMessage(
            sender=self.name,
            content=state.answer if state.answer is not None else state.text,
            extra_info={CONTEXT_KEY: state.context_id, TASK_KEY: state.task_id},
        )


class _TaskState:
    """What the stream of one remote task has said so far."""

    def __init__(self) -> None:
        self.task_id = ""
        self.context_id = ""
        self.text = ""
        self.answer: str | None = None
        self.ended = False
        self.failure: str | None = None

    def update(self, response: Any, sender: str) -> AgentMessage | None:
        from a2a.types import TaskState

        kind = response.WhichOneof("payload")
        status = None
        if kind == "task":
            self.task_id, self.context_id = response.task.id, response.task.context_id
            status = response.task.status
            if response.task.artifacts:
                self.answer = _parts_text(response.task.artifacts[-1].parts)
        elif kind == "message":  # an agent that answers with a plain message
            self.answer = _parts_text(response.message.parts)
            self.context_id = response.message.context_id or self.context_id
            self.ended = True
        elif kind == "artifact_update":
            self.answer = _parts_text(response.artifact_update.artifact.parts)
        elif kind == "status_update":
            status = response.status_update.status
        if status is None:
            return None
        if status.state in (TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_REJECTED):
            self.ended = True
            self.failure = _parts_text(status.message.parts) or "remote task failed"
        elif status.state == TaskState.TASK_STATE_CANCELED:
            self.ended = True
            self.failure = "remote task was cancelled"
        elif status.state == TaskState.TASK_STATE_COMPLETED:
            self.ended = True
        elif kind == "status_update" and status.message.parts:
            self.text += _parts_text(status.message.parts)
            return AgentMessage(
                sender=sender, content=self.text, stream_state=AgentStatusCode.STREAM_ING
            )
        return None


async def _cancel(client: Any, task_id: str) -> None:
    """Cancel the remote task (best effort, bounded, even while this task is being cancelled)."""
    from a2a.types import CancelTaskRequest

    async def cancel() -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.cancel_task(CancelTaskRequest(id=task_id)), 5.0)

    await asyncio.shield(asyncio.ensure_future(cancel()))


def _parts_text(parts: Any) -> str:
    return "".join(p.text for p in parts if p.WhichOneof("content") == "text")


def _text(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content, default=str)
