"""The shared in-process vLLM engine: one ``AsyncLLM`` per model config, per process.

``get_engine(path, engine_args)`` returns the process-wide engine for that config; it starts
explicitly (``await engine.start()``, in a worker thread so the event loop keeps serving) and
gives every generation a fresh request id, aborting it when its consumer stops reading.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
import uuid
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from agents.llms.base import Messages
from agents.llms.prompt_tokens import SegmentTokenizer
from agents.llms.templates import render_meta_template

logger = logging.getLogger(__name__)

# Defaults for every engine; CPU_DEFAULTS only without a GPU (NOTES-vllm-cpu.md): the default
# 0.92 "GPU memory" fraction fails on CPU RAM and torch.compile costs 10-25 s at start.
# ``scheduling_policy`` stays vLLM's "fcfs": "priority" (a run's model call after a tool result
# ahead of new arrivals, ``call_priority``) is an option, not a default: on a quiet machine it
# did not make 32 tool-using sessions faster (bench/README.md, "Wave 3, the quiet sitting").
# ``structured_outputs_config``: forced tool calls and JSON answers are compact (xgrammar reads
# "no free whitespace" from the engine's config only, never from a request).
ENGINE_DEFAULTS: dict[str, Any] = {
    "enable_prefix_caching": True,
    "disable_log_stats": True,
    "scheduling_policy": "fcfs",
    "structured_outputs_config": {"backend": "xgrammar", "disable_any_whitespace": True},
}
CPU_DEFAULTS: dict[str, Any] = {"enforce_eager": True, "kv_cache_memory_bytes": 64 * 2**20}
# gen_params (lagent names) -> SamplingParams fields
_PARAM_NAMES = {
    "max_new_tokens": "max_tokens", "max_tokens": "max_tokens", "temperature": "temperature",
    "top_p": "top_p", "top_k": "top_k", "repetition_penalty": "repetition_penalty",
    "seed": "seed", "n": "n", "stop_words": "stop", "stop": "stop", "logprobs": "logprobs",
    "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty",
    "min_tokens": "min_tokens", "ignore_eos": "ignore_eos",
}  # fmt: skip
# A tool's result in a model call's messages: native ``tool``, lagent's ``environment``.
TOOL_RESULT_ROLES = frozenset({"tool", "function", "environment", "ipython"})
# vLLM runs lower values first; a request's default (and every new arrival's) is 0.
CONTINUING_PRIORITY = -1


def call_priority(messages: Any) -> int:
    """A model call's engine priority: ``CONTINUING_PRIORITY`` when its messages end with a
    tool's result (a run going on after its tool call, whose prefix is likely still cached),
    0 for a new arrival (a session's first call, a plain chat request)."""
    last = messages[-1] if isinstance(messages, list) and messages else None
    if isinstance(last, Mapping) and last.get("role") in TOOL_RESULT_ROLES:
        return CONTINUING_PRIORITY
    return 0


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
        self.users = 0  # models that called start() and not yet close()
        self._lock = asyncio.Lock()
        self._restart: asyncio.Task[None] | None = None
        self._by_priority = self.by_priority
        self._segments: SegmentTokenizer | None = None  # set at start, if the tokenizer allows

    @staticmethod
    def key(path: str, engine_args: Mapping[str, Any] | None) -> str:
        """Registry key: the same model config shares one engine."""
        return json.dumps({"path": path, "engine": dict(engine_args or {})}, sort_keys=True)

    def resolved_args(self) -> dict[str, Any]:
        """Engine arguments with the defaults for this machine filled in (a configured
        ``structured_outputs_config`` dict is merged over the default one)."""
        args = dict(ENGINE_DEFAULTS)
        if not _has_gpu():
            args.update(CPU_DEFAULTS)
        args.update(self.engine_args)
        configured = self.engine_args.get("structured_outputs_config")
        if isinstance(configured, Mapping):
            merged = {**ENGINE_DEFAULTS["structured_outputs_config"], **configured}
            if merged.get("backend") not in _COMPACT_BACKENDS and (
                "disable_any_whitespace" not in configured
            ):
                merged.pop("disable_any_whitespace")  # vLLM: only xgrammar and guidance have it
            args["structured_outputs_config"] = merged
        return args

    @property
    def by_priority(self) -> bool:
        """Whether the engine schedules by priority (``scheduling_policy: priority``)."""
        policy = self.engine_args.get("scheduling_policy", ENGINE_DEFAULTS["scheduling_policy"])
        return bool(policy == "priority")

    def priority(self, messages: Any) -> int:
        """The engine priority of a model call on ``messages`` (0 unless ``by_priority``)."""
        return call_priority(messages) if self._by_priority else 0

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
            self._segments = SegmentTokenizer.for_tokenizer(self.llm.get_tokenizer())
            logger.info(
                "vLLM: %s ready in %.1f s (prompts tokenized %s)",
                self.path,
                time.monotonic() - started,
                "by segment" if self._segments is not None else "whole",
            )

    @property
    def ready(self) -> bool:
        """True while the engine is loaded and healthy (a dead one starts being replaced)."""
        if self.llm is not None and self.llm.errored:
            with contextlib.suppress(RuntimeError):  # RuntimeError: no event loop here
                self._restart_soon()
            return False
        return self.llm is not None

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
            self._restart_soon()
            raise VllmEngineError(self.error or f"vLLM engine for {self.path} died")
        return self.llm

    def _restart_soon(self) -> None:
        """A dead engine is replaced in the background; requests fail (503) meanwhile."""
        if self._restart is None or self._restart.done():
            self.error = f"vLLM engine for {self.path} died ({self.llm.dead_error}); restarting"
            logger.error("vLLM: %s", self.error)
            self._restart = asyncio.get_running_loop().create_task(self._replace_dead())

    async def _replace_dead(self) -> None:
        dead, self.llm = self.llm, None
        if dead is not None:
            await _shutdown(dead)
        error = self.error
        with contextlib.suppress(VllmEngineError):  # start() logs and keeps the reason
            await self.start()
        if self.llm is None:
            self.error = self.error or error

    async def render(
        self,
        messages: Messages,
        *,
        chat_template: str | None = None,
        tools: list[dict[str, Any]] | None = None,
        meta_template: list[dict[str, Any]] | None = None,
        template_kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        """Engine input for ``messages``: the tokenizer's chat template, else ``meta_template``
        (``template_kwargs``: more arguments for the chat template, e.g. a request's
        ``chat_template_kwargs``)."""
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
        kwargs.update(template_kwargs or {})
        renderer = llm.renderer
        if self._segments is None:
            params = ChatParams(chat_template=chat_template, chat_template_kwargs=kwargs)
            _, (prompt,) = await renderer.render_chat_async([messages], params)
            return prompt
        # vLLM's render_chat_async with one step changed: the template renders text (vLLM's
        # default renders ids), and its ids come from the kept segments
        # (agents/llms/prompt_tokens.py) instead of encoding the whole history again.
        arrival = time.time()
        kwargs["tokenize"] = False
        params = ChatParams(chat_template=chat_template, chat_template_kwargs=kwargs)
        tok_params = renderer.default_chat_tok_params
        _, text = await renderer.render_messages_async(messages, params)
        if _by_segment(text, tok_params):
            text = tok_params.apply_pre_tokenization(renderer.tokenizer, text)
            text["prompt_token_ids"] = self._segments.encode(text["prompt"])
        (tokens,) = await renderer.tokenize_prompts_async([text], tok_params)
        renderer._apply_prompt_extras([tokens], {"media_io_kwargs": params.media_io_kwargs or {}})
        return await renderer.process_for_engine_async(tokens, arrival, tok_params=tok_params)

    async def generate(
        self, prompt: Any, sampling: Any, priority: int = 0
    ) -> AsyncGenerator[Any, None]:
        """``RequestOutput`` deltas under a fresh request id; aborted if the consumer stops.
        ``priority``: lower runs first (non-zero only when ``by_priority``)."""
        llm = self._live()
        handler = llm.output_handler
        if handler is not None and handler.get_loop() is not asyncio.get_running_loop():
            raise VllmEngineError(
                "this vLLM engine serves another event loop (one loop per engine)"
            )
        request_id = f"agents-{uuid.uuid4().hex}"
        gen = llm.generate(prompt, sampling, request_id, priority=priority)
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

    async def release(self) -> None:
        """One user is done with the engine; the last one shuts it down."""
        self.users = max(0, self.users - 1)
        if self.users == 0:
            await self.close()

    async def close(self) -> None:
        """Shut the engine down now (for every user) and forget it."""
        llm, self.llm = self.llm, None
        _ENGINES.pop(self.key(self.path, self.engine_args), None)
        if llm is not None:
            await _shutdown(llm)


def _by_segment(prompt: Any, tok_params: Any) -> bool:
    """Whether a rendered prompt's ids may come from kept segments: plain text, nothing
    multimodal, no truncation, case or offsets asked of the tokenizer."""
    return (
        isinstance(prompt.get("prompt"), str)
        and "prompt_token_ids" not in prompt
        and not prompt.get("multi_modal_data")
        and tok_params.truncate_prompt_tokens is None
        and not tok_params.do_lower_case
        and not tok_params.return_token_offsets
    )


async def _shutdown(llm: Any) -> None:
    """Stop an ``AsyncLLM`` (even a dead one) and release its ZeroMQ context."""
    try:
        await asyncio.to_thread(llm.shutdown)
    except Exception:
        logger.warning("vLLM: engine shutdown failed", exc_info=True)
    # AsyncLLM.__del__ shuts down again, at interpreter exit if anything still holds the
    # object, when vLLM's module globals are gone (TypeError noise): make it a no-op.
    llm.shutdown = _already_shut_down
    await asyncio.sleep(0)  # vLLM closes its sockets with a callback on this loop
    resources = getattr(getattr(llm, "engine_core", None), "resources", None)
    ctx = getattr(resources, "ctx", None)
    if ctx is not None and not ctx.closed:  # vLLM leaves it to GC (a ResourceWarning)
        ctx.destroy(linger=0)


def _already_shut_down(timeout: float | None = None) -> None:
    return None


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
    llm = AsyncLLM.from_engine_args(AsyncEngineArgs(model=path, **args))
    warm_imports()
    return llm


# vLLM imports every structured-output backend (guidance, lm-format-enforcer, outlines,
# xgrammar) inside the first structured request's validation (``SamplingParams.verify``), on
# the event loop: a stall of every session at the first forced call after a start (py-spy of
# the gateway; 1.3 s of CPU in a bare process, less where the engine imported some already),
# 3.3 ms per model call of a first 8-session round of bench.agentic.
STRUCTURED_OUTPUT_MODULES = (
    "vllm.v1.structured_output.backend_guidance",
    "vllm.v1.structured_output.backend_lm_format_enforcer",
    "vllm.v1.structured_output.backend_outlines",
    "vllm.v1.structured_output.backend_xgrammar",
    "vllm.v1.structured_output.utils",
)


def warm_imports() -> None:
    """Import what vLLM would import lazily on the first request (in the engine start's
    worker thread, so the loop keeps serving); a module a vLLM version lacks is skipped."""
    import importlib

    for name in STRUCTURED_OUTPUT_MODULES:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


_COMPACT_BACKENDS = ("xgrammar", "guidance")
_ENGINES: dict[str, VllmEngine] = {}


def get_engine(path: str, engine_args: Mapping[str, Any] | None = None) -> VllmEngine:
    """The process-wide engine for this model config (created, not started, on first use)."""
    key = VllmEngine.key(path, engine_args)
    if key not in _ENGINES:
        _ENGINES[key] = VllmEngine(path, engine_args)
    return _ENGINES[key]


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
