"""The gateway <-> engine seam: a served model is a ``ModelHandle`` with an agent LLM and a raw API.

``llm`` drives agents (``agents.llms.AsyncBaseLLM``); ``raw`` answers OpenAI chat-completion
requests for the model itself (``/v1/chat/completions`` with ``model`` = a raw model name).
``request`` dicts are the validated OpenAI request body (``model_dump(exclude_none=True)``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol, runtime_checkable

from agents.llms.base import AsyncBaseLLM


@runtime_checkable
class RawChatBackend(Protocol):
    """OpenAI chat completions for one model."""

    async def complete(self, request: dict[str, Any]) -> dict[str, Any]:
        """A whole ``chat.completion`` object."""
        ...

    def stream(self, request: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """``chat.completion.chunk`` objects (without the final ``[DONE]``)."""
        ...


class EngineError(Exception):
    """The engine could not serve a request; ``status`` is the HTTP status (503 by default)."""

    def __init__(
        self,
        message: str,
        status: int = 503,
        code: str = "engine_unavailable",
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.param = param


class ModelHandle:
    """One configured model: its agent LLM, its raw chat API and its lifecycle.

    ``backend``: the name its factory is registered under (app/models/backends.py).
    ``loads_in_background``: ``start`` loads an engine (slow): the service starts without
    waiting and ``/readyz`` reports the model until it is ready."""

    loads_in_background = False

    def __init__(self, name: str, backend: str, llm: AsyncBaseLLM, raw: RawChatBackend) -> None:
        self.name = name
        self.backend = backend
        self.llm = llm
        self.raw = raw
        self.ready = False

    async def start(self) -> None:
        """Load or connect; sets ``ready``. Subclasses load engines here."""
        self.ready = True

    async def close(self) -> None:
        """Release the engine; the handle is unusable afterwards."""
        self.ready = False
