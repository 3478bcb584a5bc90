"""The ``vllm`` model handle: a shared in-process engine behind an agent LLM and a raw chat API.

Configured by a ``MODELS`` entry (see docs/engine.md)::

    {"name": "qwen", "backend": "vllm", "path": "Qwen/Qwen2.5-7B-Instruct",
     "engine": {"tensor_parallel_size": 1, "max_model_len": 8192},
     "chat_template": null, "tool_call_parser": "hermes", "gen_params": {"temperature": 0.7}}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agents.llms.vllm import AsyncVllmModel, VllmEngineError
from app.engines.base import EngineError, ModelHandle
from app.engines.vllm_chat import VllmChatBackend


class VllmHandle(ModelHandle):
    """A model served by the in-process vLLM engine; ``ready`` follows the engine's health."""

    llm: AsyncVllmModel
    raw: VllmChatBackend
    loads_in_background = True

    def __init__(self, name: str, llm: AsyncVllmModel, raw: VllmChatBackend) -> None:
        super().__init__(name, "vllm", llm, raw)

    @property
    def ready(self) -> bool:
        """Loaded and healthy (false again if the engine dies)."""
        return self._started and self.llm.ready

    @ready.setter
    def ready(self, value: bool) -> None:
        self._started = value

    async def start(self) -> None:
        """Load the model; raises ``EngineError`` with the reason when it cannot."""
        try:
            await self.llm.start()
        except VllmEngineError as exc:
            raise EngineError(str(exc)) from exc
        self.ready = True

    async def close(self) -> None:
        """Shut the engine down."""
        self.ready = False
        await self.llm.close()

    def running_requests(self) -> int:
        """Generations in flight (metrics, tests)."""
        return self.raw.running_requests()


def _chat_template(value: str | None) -> str | None:
    # A path to a template file, or the template text itself.
    if value and "{" not in value and Path(value).is_file():
        return Path(value).read_text(encoding="utf-8")
    return value


def create_handle(config: dict[str, Any]) -> ModelHandle:
    """Build (not start) the handle for a ``backend: vllm`` MODELS entry."""
    name = config["name"]
    path = config.get("path")
    if not path:
        raise ValueError(f"model {name!r}: backend 'vllm' needs 'path' (a directory or hub id)")
    template = _chat_template(config.get("chat_template"))
    llm = AsyncVllmModel(
        str(path),
        engine_args=config.get("engine") or {},
        chat_template=template,
        meta_template=config.get("meta_template"),
        tool_call_parser=config.get("tool_call_parser"),
        stream_call_arguments=bool(config.get("stream_call_arguments", False)),
        **(config.get("gen_params") or {}),
    )
    raw = VllmChatBackend(
        llm.engine, name, chat_template=template, tool_call_parser=config.get("tool_call_parser")
    )
    return VllmHandle(name, llm, raw)
