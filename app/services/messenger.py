"""``SendMessage``: an agent in one session messages the agent of another session by its id.

The message becomes a run of the other session (the same turn path, store and busy rules as
any run: a busy session refuses, so two sessions can never wait for each other), and its reply
is the tool's result. Cancelling the sending run cancels the run it is waiting for.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agents.actions.base import BaseAction, current_session_id
from app.db.models import Run
from app.schemas.common import MessageIn
from app.schemas.sessions import RunCreate
from app.schemas.vocab import RunStatus
from app.services.runs import prepare_submission
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
        body = RunCreate(message=MessageIn(content=message, sender=me), multitask_strategy="reject")
        manager = self.state.run_manager
        async with manager.store.lease() as lease:
            sub = await prepare_submission(self.state, lease, tenant_id, recipient, body, None)
            run, _ = await manager.submit(sub, lease)
        try:
            await asyncio.wait_for(manager.wait(run.id), self.timeout_s)
        except BaseException:  # cancelled (or too slow): the recipient's run stops too
            await asyncio.shield(manager.cancel(run.id))
            raise
        async with self.state.sessionmaker() as db:
            done = await db.get(Run, run.id)
        if done is None or done.status != RunStatus.COMPLETED or not done.output:
            status = done.status if done is not None else "gone"
            raise RuntimeError(f"session {recipient!r} did not answer (run {status})")
        return done.output.get("content")


__all__ = ["SendMessage"]
