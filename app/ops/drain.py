"""Whether this replica drains: uvicorn got SIGTERM (or a test started a drain).

While it drains a replica takes no new turns (503 ``draining`` with ``retry-after``, from
admission), ``/readyz`` answers 503 (``not_ready: ["draining"]``), its heartbeat row says
``draining``, and the runs it has finish within ``AGENTSTATION_SHUTDOWN_GRACE_S`` (uvicorn waits
that long for open requests, then the lifespan as long again for detached runs, then interrupts
what is left, each with its terminal event).
"""

from __future__ import annotations

import signal


class Drain:
    """This process's drain flag."""

    def __init__(self) -> None:
        self.started = False
        self._server: object | None = None  # the serving uvicorn, once found

    def start(self) -> None:
        """Drain now (what SIGTERM does to a served app)."""
        self.started = True

    def active(self) -> bool:
        """Draining: started here, or the serving uvicorn's ``should_exit`` (its SIGTERM
        handler is a bound method of the server)."""
        if self.started:
            return True
        server = self._server
        if server is None:  # looked for until found: ``getsignal`` cost ~15 µs per turn
            server = self._server = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
        return bool(getattr(server, "should_exit", False))
