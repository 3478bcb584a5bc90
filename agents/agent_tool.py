"""Another agent as a tool: the model calls it by name with a message and reads its reply.

``AgentTool(critic, name="critic")`` in a tool agent's executor lets the model write
``{"name": "critic", "parameters": {"message": "..."}}``; the critic answers in the caller's
session (its memory of that session is its own), and its reply is the tool's result.
"""

from __future__ import annotations

from typing import Any

from agents.actions.base import PARAMETER_DESCRIPTION, BaseAction, current_session_id
from agents.agent import BaseAgent


class AgentTool(BaseAction):
    """Send ``message`` to the wrapped agent; its reply is the result."""

    sync_in_thread = False

    def __init__(self, agent: BaseAgent, name: str | None = None, description: str | None = None):
        self.agent = agent
        label = name or agent.name
        about = description or agent.description or f"Ask the agent {label!r}; returns its reply."
        super().__init__(
            description={
                "name": label,
                "description": about,
                "parameters": [{"name": "message", "type": "STRING", "description": "the message"}],
                "required": ["message"],
                "parameter_description": PARAMETER_DESCRIPTION,
            }
        )

    async def run(self, message: str) -> Any:
        """Send a message to the agent and return its reply.

        Args:
            message: what to send the agent.
        """
        reply = await self.agent._collect(message, session_id=current_session_id.get())
        return reply.content


__all__ = ["AgentTool"]
