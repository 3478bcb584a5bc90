"""``/a2a/{agent}/``: the agent's card (at the SDK's well-known path) and its JSON-RPC endpoint.

The routes are the SDK's (``create_agent_card_routes``, ``create_jsonrpc_routes``); this module
only authenticates the caller, finds the agent in the caller's tenant (another tenant's agent
is a 404, as on the REST API) and builds the card for it.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.routes import (
    DefaultServerCallContextBuilder,
    create_agent_card_routes,
    create_jsonrpc_routes,
)
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import PROTOCOL_VERSION_1_0, TransportProtocol
from starlette.requests import Request
from starlette.routing import Router
from starlette.types import Receive, Scope, Send

from app.a2a.handler import SCOPE_KEY, A2ACall, RunsRequestHandler
from app.errors import NotFound
from app.services.agent_directory import AgentInfo
from app.services.agents import get_agent
from app.state import AppState

_CARD: contextvars.ContextVar[Callable[[], Awaitable[AgentCard]]] = contextvars.ContextVar(
    "a2a_card"
)
BEARER = "bearer"


def _tool_doc(state: AppState, name: str) -> str:
    factory = state.registry.tools.get(name)
    doc = (getattr(factory, "__doc__", None) or "").strip().splitlines()
    return doc[0] if doc else name


def agent_card(state: AppState, info: AgentInfo, description: str | None, url: str) -> AgentCard:
    """The A2A card of a stored agent: skills from its tools, streaming, bearer-key security."""
    spec = info.spec
    skills = [
        AgentSkill(id=t.name, name=t.name, description=_tool_doc(state, t.name), tags=["tool"])
        for t in spec.tools
    ]
    if not skills:
        skills = [
            AgentSkill(id="chat", name=info.name, description=description or "Chat", tags=["chat"])
        ]
    return AgentCard(
        name=info.name,
        description=description or f"AgentStation agent {info.name!r} ({spec.kind})",
        version=str(info.version),
        supported_interfaces=[
            AgentInterface(
                url=url,
                protocol_binding=TransportProtocol.JSONRPC,
                protocol_version=PROTOCOL_VERSION_1_0,
            )
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        security_schemes={
            BEARER: SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="Bearer", description="An AgentStation API key"
                )
            )
        },
        security_requirements=[SecurityRequirement(schemes={BEARER: StringList(list=[])})],
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=skills,
    )


def _placeholder_card() -> AgentCard:
    card = AgentCard(
        name="agent",
        description="replaced per request",
        version="0",
        supported_interfaces=[
            AgentInterface(
                url="http://127.0.0.1/",
                protocol_binding=TransportProtocol.JSONRPC,
                protocol_version=PROTOCOL_VERSION_1_0,
            )
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="chat", name="chat", description="chat", tags=["chat"])],
    )
    return card


class _Context(DefaultServerCallContextBuilder):
    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state[SCOPE_KEY] = request.scope[SCOPE_KEY]
        return context


async def _this_card(_: AgentCard) -> AgentCard:
    return await _CARD.get()()


class A2AMount:
    """The ASGI app mounted at ``/a2a/{agent}``."""

    def __init__(self) -> None:
        # The card route's own card is never served: _this_card answers each request's agent.
        placeholder = _placeholder_card()
        self.router = Router(
            routes=[
                *create_agent_card_routes(placeholder, card_modifier=_this_card),
                *create_jsonrpc_routes(
                    RunsRequestHandler(), rpc_url="/", context_builder=_Context()
                ),
            ]
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.router(scope, receive, send)
            return
        from app.deps import app_state, authenticate

        request = Request(scope, receive)
        state = app_state(request)
        who = await authenticate(request)
        name = str(scope["path_params"]["agent"])
        info = await state.agents.find(state.sessionmaker, who.tenant_id, name)
        if info is None:
            raise NotFound(f"agent {name!r} not found", param="agent")
        prefix = scope.get("app_root_path", "")
        url = f"{request.url.scheme}://{request.url.netloc}{prefix}/a2a/{name}/"

        async def card() -> AgentCard:  # built only when the card is asked for
            async with state.sessionmaker() as db:
                row = await get_agent(db, who.tenant_id, name)
            return agent_card(state, info, row.description, url)

        scope[SCOPE_KEY] = A2ACall(state=state, tenant_id=who.tenant_id, agent=name)
        token = _CARD.set(card)
        try:
            await self.router(scope, receive, send)
        finally:
            _CARD.reset(token)


def mount_a2a(app: Any) -> None:
    """Serve every stored agent at ``/a2a/{agent}/`` (excluded from the OpenAPI document: the
    protocol is described by the A2A specification and each agent's card)."""
    app.mount("/a2a/{agent}", A2AMount())
