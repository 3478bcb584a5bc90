"""An agent's MCP servers as ``mcp_list_tools`` items (docs/responses.md, "Agents").

OpenAI shows the tools a response imported from an MCP server as an ``mcp_list_tools`` output
item. A stored agent's MCP servers are the ``mcp`` entries of its spec's tools; when a response
of such an agent starts, each server's tools are listed (on the session's own connection, the
one the run's calls use: ``agents.actions.mcp_conn.CONNECTIONS``) and kept in the run's
``options.response.mcp``, so the item is part of the stored response: the event mapper puts it
before the first ``mcp_call`` of that server (``ResponseStream``), live and on replay alike.
A server that cannot be listed gives an item with ``error`` (its calls then fail as items too).
"""

from __future__ import annotations

import logging
from typing import Any

from app.runtime.registry import BuildContext
from app.schemas.agents import AgentSpec
from app.state import AppState

log = logging.getLogger(__name__)
MCP_TOOL = "mcp"  # the registry's name of an MCP server as an agent's tool


def mcp_refs(spec: AgentSpec) -> list[Any]:
    """The spec's MCP servers (its own tools'; sub-agents list theirs in their sessions)."""
    return [ref for ref in spec.tools if ref.name == MCP_TOOL]


async def list_servers(
    state: AppState, spec: AgentSpec, tenant_id: str, session_id: str
) -> dict[str, dict[str, Any]]:
    """Each MCP server of ``spec``, by its label (the toolkit's name, the first part of its
    tools' names): ``{"tools": [...], "error": ...}`` as an ``mcp_list_tools`` item holds them."""
    refs = mcp_refs(spec)
    if not refs:
        return {}
    ctx = BuildContext(llms={}, kernel_pool=state.kernel_pool)
    kits = state.registry.build_tools(spec.model_copy(update={"tools": refs}), ctx)
    out: dict[str, dict[str, Any]] = {}
    for kit in kits:
        await kit.aprepare(f"{tenant_id}:{session_id}")  # never raises: an error is kept
        tools = [
            {
                "name": str(api["name"]),
                "description": api.get("description") or None,
                "input_schema": api.get("parameters") or {"type": "object", "properties": {}},
                "annotations": None,
            }
            for api in kit.description.get("api_list") or []
        ]
        out[kit.name] = {"tools": tools, "error": kit.list_error}
    return out
