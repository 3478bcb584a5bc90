"""lagent's ``VllmModel`` / ``AsyncVllmModel`` on the shared in-process vLLM engine.

Every model built with the same path and engine arguments shares one engine (continuous
batching and prefix caching across sessions). The engine starts explicitly with
``await model.start()`` (or on first use); each generation gets its own request id and is
aborted as soon as its consumer stops reading or is cancelled. The final delta carries the
exact prompt and completion token counts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from agents.llms.base import AsyncBaseLLM, BaseLLM, LLMDelta, Messages, Usage
from agents.llms.templates import render_meta_template
from agents.llms.vllm_engine import (
    CPU_DEFAULTS,
    ENGINE_DEFAULTS,
    VllmEngine,
    VllmEngineError,
    get_engine,
    sampling_params,
)

__all__ = [
    "CPU_DEFAULTS",
    "ENGINE_DEFAULTS",
    "AsyncVllmModel",
    "VllmEngine",
    "VllmEngineError",
    "VllmModel",
    "get_engine",
    "render_meta_template",
    "sampling_params",
]


class _VllmCore(AsyncBaseLLM):
    """The generation logic shared by the async and the sync model."""

    def __init__(
        self,
        path: str,
        tp: int | None = None,
        vllm_cfg: Mapping[str, Any] | None = None,
        meta_template: list[dict[str, Any]] | None = None,
        *,
        engine_args: Mapping[str, Any] | None = None,
        chat_template: str | None = None,
        **gen_params: Any,
    ) -> None:
        super().__init__(path=path, meta_template=meta_template, **gen_params)
        args = {**(vllm_cfg or {}), **(engine_args or {})}
        if tp is not None:
            args["tensor_parallel_size"] = tp
        self.engine = get_engine(path, args)
        self._joined = False
        self.chat_template = chat_template

    @property
    def ready(self) -> bool:
        """True once the shared engine is loaded and healthy."""
        return self.engine.ready

    async def start(self) -> None:
        """Start (or join) the shared engine."""
        if not self._joined:
            await self.engine.start()
            self._joined = True
            self.engine.users += 1

    async def close(self) -> None:
        """Leave the shared engine; the last model using it shuts it down."""
        if self._joined:
            self._joined = False
            await self.engine.release()

    async def _astream(self, messages: Messages, **params: Any) -> AsyncIterator[LLMDelta]:
        if not self._joined:
            await self.start()
        prompt = await self.engine.render(
            messages, chat_template=self.chat_template, meta_template=self.meta_template
        )
        sampling = sampling_params(params)
        counts: dict[int, int] = {}
        finish: dict[int, str | None] = {}
        prompt_tokens = 0
        gen = self.engine.generate(prompt, sampling)
        try:
            async for out in gen:
                prompt_tokens = len(out.prompt_token_ids or [])
                for choice in out.outputs:
                    counts[choice.index] = counts.get(choice.index, 0) + len(choice.token_ids)
                    if choice.finish_reason is not None:
                        finish[choice.index] = choice.finish_reason
                    if choice.index == 0:
                        if choice.text:
                            yield LLMDelta(text=choice.text)
                    elif choice.text:  # n > 1: further choices travel in ``extra``
                        yield LLMDelta(extra={"index": choice.index, "text": choice.text})
        finally:
            await gen.aclose()  # stopping early aborts the request in the engine now
        usage = Usage(prompt_tokens=prompt_tokens, completion_tokens=sum(counts.values()))
        yield LLMDelta(finish_reason=finish.get(0) or "stop", usage=usage)


class AsyncVllmModel(_VllmCore):
    """lagent's ``AsyncVllmModel`` on a shared in-process vLLM ``AsyncLLM``."""


class VllmModel(_VllmCore, BaseLLM):
    """lagent's sync ``VllmModel``: ``chat``/``stream_chat`` drive the same async core.

    Use it from one thread: the engine belongs to the event loop that first generates.
    """
