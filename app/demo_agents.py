"""A ready demo for ``make run`` with no models configured: two agents for every tenant.

- ``assistant``: a plain chat agent on the default model (SmolLM2-135M-Instruct, or the
  fallback the CLI chose);
- ``coder``: a tool agent on the scripted model ``scripted`` with the sandboxed Python tool
  (``IPythonInteractive``): every message runs one scripted Python call in the session's kernel,
  so tool calls, their results and the agent loop can be watched without a model that writes
  useful tool arguments (a 135 M model does not).

They are created at start-up (a startup hook of the lifespan) for every tenant the database
knows that has no agent at all: a tenant's edits and deletions are left alone (a deleted demo
agent does not come back while the tenant keeps any agent). Set
``AGENTSTATION_DEMO_AGENTS=0`` to skip them; they are never created when ``AGENTSTATION_MODELS``
is set.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import sqlalchemy as sa
from fastapi import FastAPI

from app.db.models import Agent, Tenant
from app.schemas.agents import AgentCreate
from app.services.agents import create_agent
from app.state import AppState

log = logging.getLogger(__name__)

SCRIPTED_MODEL = "scripted"
CODE = "import math\nprimes = [n for n in range(2, 50) if all(n % d for d in range(2, n))]\n"
CODE += "print(primes, math.prod(primes) % 97)"


def _call(code: str) -> str:
    body = {"name": "IPythonInteractive", "parameters": {"command": code}}
    return f"```json\n{json.dumps(body)}\n```\n"


# The scripted model replays these in turn: a tool call, then the answer after its result.
CODER_REPLIES = [
    _call(CODE),
    "The sandbox ran the code above: its output lists the primes below 50 and their product "
    "modulo 97. (This agent is scripted: try the `assistant` agent for a real model.)",
]


def scripted_model_config() -> dict[str, Any]:
    """The ``MODELS`` entry of the coder's scripted model (replies streamed word by word)."""
    return {
        "name": SCRIPTED_MODEL,
        "backend": "scripted",
        "replies": CODER_REPLIES,
        "chunk_delay_s": 0.05,
        "cycle": "conversation",  # each session follows the script: call, then answer
    }


def demo_agents(chat_model: str) -> list[AgentCreate]:
    """The demo agents' definitions; ``chat_model`` is the assistant's model."""
    assistant = {
        "name": "assistant",
        "description": "Chat with the default model (SmolLM2-135M-Instruct: small, English).",
        "spec": {
            "kind": "agent",
            "model": chat_model,
            "gen_params": {"temperature": 0, "max_new_tokens": 256},
        },
    }
    coder = {
        "name": "coder",
        "description": "A tool agent on a scripted model: runs Python in the session's sandbox.",
        "spec": {
            "kind": "tool_agent",
            "model": SCRIPTED_MODEL,
            "tools": [{"name": "IPythonInteractive", "config": {"timeout_s": 20}}],
            "max_turn": 3,
        },
    }
    return [AgentCreate.model_validate(a) for a in (assistant, coder)]


async def create_demo_agents(state: AppState, chat_model: str) -> list[tuple[str, str]]:
    """Create the demo agents for each tenant without agents; returns the ``(tenant, name)``
    pairs created."""
    created: list[tuple[str, str]] = []
    models = state.models.names()
    async with state.sessionmaker() as db, db.begin():
        tenants = list(await db.scalars(sa.select(Tenant.id).order_by(Tenant.id)))
        for tenant in tenants:
            if await db.scalar(sa.select(Agent.id).where(Agent.tenant_id == tenant).limit(1)):
                continue  # the tenant's own choice of agents, demo ones included
            for body in demo_agents(chat_model):
                await create_agent(db, tenant, body, state.registry, models)
                created.append((tenant, body.name))
    if created:
        log.info("demo agents created: %s", ", ".join(f"{t}/{n}" for t, n in created))
    return created


def install(app: FastAPI, chat_model: str) -> None:
    """Create the demo agents when the app starts (after tenants and models are set up)."""

    async def hook(state: AppState) -> None:
        try:
            await create_demo_agents(state, chat_model)
        except Exception:  # a demo must never keep the service from starting
            log.exception("demo agents could not be created")

    app.state.startup_hooks.append(hook)
