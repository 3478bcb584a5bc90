"""asgi-lifespan's ``LifespanManager`` with start-up and shutdown timeouts a loaded 2-core CI
runner meets: its default of 5 s failed a start-up (migrations, the kernel pool's self-test)
while the suite's other worker was busy."""

from __future__ import annotations

from typing import Any

from asgi_lifespan import LifespanManager as _LifespanManager


class LifespanManager(_LifespanManager):
    def __init__(
        self, app: Any, startup_timeout: float | None = 60, shutdown_timeout: float | None = 60
    ) -> None:
        super().__init__(app, startup_timeout=startup_timeout, shutdown_timeout=shutdown_timeout)
