"""Builds, starts and looks up the configured models."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from app.engines.base import ModelHandle
from app.models.backends import backend_factory
from app.settings import ModelConfig

log = logging.getLogger(__name__)


def build_handle(config: ModelConfig) -> ModelHandle:
    """The handle (built, not started) for one ``MODELS`` entry, by its backend's factory."""
    handle: ModelHandle = backend_factory(config.backend)(config.options())
    return handle


class ModelRegistry:
    """Every configured model by name; engines load in the background after start-up."""

    def __init__(self, configs: list[ModelConfig]) -> None:
        self.configs = {c.name: c for c in configs}
        self.handles: dict[str, ModelHandle] = {}
        self.errors: dict[str, str] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def names(self) -> list[str]:
        """Configured model names."""
        return list(self.configs)

    def get(self, name: str) -> ModelHandle | None:
        """The handle of ``name`` (ready or not), or None."""
        return self.handles.get(name)

    async def start(self) -> None:
        """Build every handle and start loading; scripted/openai are ready at once."""
        for name, config in self.configs.items():
            try:
                handle = build_handle(config)
            except Exception as exc:  # a bad model must not take the service down
                log.exception("model %s could not be built", name)
                self.errors[name] = str(exc)
                continue
            self.handles[name] = handle
            if handle.loads_in_background:  # engines load in the background; /readyz tells
                self._tasks.append(asyncio.create_task(self._start(handle)))
            else:
                await self._start(handle)

    async def _start(self, handle: ModelHandle) -> None:
        try:
            await handle.start()
        except Exception as exc:
            log.exception("model %s failed to start", handle.name)
            self.errors[handle.name] = str(exc)

    async def close(self) -> None:
        """Stop loading and release every engine."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        for handle in self.handles.values():
            try:
                await handle.close()
            except Exception:
                log.exception("model %s failed to close", handle.name)

    def status(self) -> dict[str, str]:
        """``name -> ready | loading | failed`` for /readyz."""
        out: dict[str, str] = {}
        for name in self.configs:
            handle = self.handles.get(name)
            if name in self.errors:
                out[name] = "failed"
            elif handle is not None and handle.ready:
                out[name] = "ready"
            else:
                out[name] = "loading"
        return out
