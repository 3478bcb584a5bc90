"""``SendMessage``: an agent in one session messages the agent of another session by its id.

The message becomes a run of the other session (the same turn path, store and busy rules as
any run: a busy session refuses, so two sessions can never wait for each other), and its reply
is the tool's result. Cancelling the sending run cancels the run it is waiting for.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agents.actions.base import BaseAction, current_session_id
from app.schemas.common import MessageIn
from app.schemas.vocab import RunStatus
from app.services.turns import TurnRequest, submit_turn
from app.state import AppState


class SendMessage(BaseAction):
    """Send a message to the agent of another session and return its reply."""

    sync_in_thread = False

    def __init__(self, state: AppState, timeout_s: float = 300.0) -> None:
        super().__init__()
        if not 0 < float(timeout_s) <= 3600:
            raise ValueError("timeout_s must be in (0, 3600]")
        self.state = state
        self.timeout_s = float(timeout_s)

    async def run(self, recipient: str, message: str) -> Any:
        """Send a message to another session's agent and return its reply.

        Args:
            recipient: the id of the session whose agent should answer.
            message: what to send.
        """
        tenant_id, _, me = str(current_session_id.get()).partition(":")
        if not me or recipient == me:
            raise ValueError("the recipient must be another session of this tenant")
        request = TurnRequest(
            MessageIn(content=message, sender=me), strategy="reject", source="send_message"
        )
        # Its own task (inline=False): this tool runs inside the sender's run, whose usage and
        # budget scopes the recipient's run must not share.
        turn = await submit_turn(self.state, tenant_id, recipient, request, inline=False)
        try:
            end = await asyncio.wait_for(turn.finish(), self.timeout_s)
        except BaseException:  # cancelled (or too slow): the recipient's run stops too
            await asyncio.shield(turn.cancel())
            raise
        done = end.run
        if done.status != RunStatus.COMPLETED or not done.output:
            raise RuntimeError(f"session {recipient!r} did not answer (run {done.status})")
        return done.output.get("content")


__all__ = ["SendMessage"]
