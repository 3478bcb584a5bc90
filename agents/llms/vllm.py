"""lagent's ``VllmModel`` / ``AsyncVllmModel`` on the shared in-process vLLM engine.

Every model built with the same path and engine arguments shares one engine (continuous
batching and prefix caching across sessions). The engine starts explicitly with
``await model.start()`` (or on first use); each generation gets its own request id and is
aborted as soon as its consumer stops reading or is cancelled. The final delta carries the
exact prompt and completion token counts. With ``stream_call_arguments``, a forced tool call's
arguments stream as they are written, as OpenAI stream ``tool_calls`` entries in
``LLMDelta.extra["tool_call_deltas"]`` (progress: the first at once, the rest at most every
``ARGUMENT_DELTAS_EVERY_S``, by default with the whole calls, which come in the last text
delta's ``extra["tool_calls"]``). With the
engine's priority scheduling (the default), a call whose messages end with a tool's result
runs ahead of new arrivals (``agents.llms.vllm_engine.call_priority``).
"""

from __future__ import annotations

import math
import time
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
from agents.llms.vllm_tools import ToolStream, forced_call_schema, tool_mode, vllm_tool_request

# A forced call's argument deltas reach the agent at most this often after the first (inf:
# the first fragment, then the rest with the call). Each is a chunk through the agent's stack
# and a session event, and while a run has unsaved events it stores them every second: at
# 0.1 s and 0.5 s the gateway spent ~10 ms more CPU per model call (bench/README.md).
ARGUMENT_DELTAS_EVERY_S = math.inf

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
        tool_call_parser: str | None = None,
        stream_call_arguments: bool = False,
        **gen_params: Any,
    ) -> None:
        super().__init__(path=path, meta_template=meta_template, **gen_params)
        # A forced call's arguments as progress deltas (off by default: at 32 tool-using
        # sessions they made runs 1.26x slower on a quiet machine, bench/README.md).
        self.stream_call_arguments = stream_call_arguments
        args = {**(vllm_cfg or {}), **(engine_args or {})}
        if tp is not None:
            args["tensor_parallel_size"] = tp
        self.engine = get_engine(path, args)
        self._joined = False
        self.chat_template = chat_template
        self.tool_call_parser = tool_call_parser  # a vLLM parser name, e.g. "hermes"

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
        tools = self._tool_stream(params)
        prompt = await self.engine.render(
            messages,
            chat_template=self.chat_template,
            tools=params.get("tools") if tools is not None else None,
            meta_template=self.meta_template,
        )
        extra: dict[str, Any] = {}
        if tools is not None and tools.mode in ("named", "required"):
            extra["structured_outputs"] = forced_call_schema(tools.vllm_request)
        elif (answer_format := _answer_format(params.get("response_format"))) is not None:
            extra["structured_outputs"] = answer_format
        sampling = sampling_params(params, **extra)
        if tools is not None and not self.stream_call_arguments and _held_to_the_end(tools, params):
            # Nothing of this call reaches the agent before its end (a forced call's arguments
            # come with the call): the engine sends only the final output, not a
            # ``RequestOutput`` and a wake-up of this generator per token.
            sampling.output_kind = _final_only()
        counts: dict[int, int] = {}
        finish: dict[int, str | None] = {}
        prompt_tokens = 0
        # A call after a tool's result goes ahead of new arrivals (with priority scheduling).
        gen = self.engine.generate(prompt, sampling, self.engine.priority(messages))
        args = _ArgumentDeltas()
        try:
            async for out in gen:
                prompt_tokens = len(out.prompt_token_ids or [])
                for choice in out.outputs:
                    counts[choice.index] = counts.get(choice.index, 0) + len(choice.token_ids)
                    if choice.finish_reason is not None:
                        finish[choice.index] = choice.finish_reason
                    if choice.index == 0 and tools is not None:
                        deltas = tools.feed(choice.text)
                        text = _content(deltas)
                        progress = self.stream_call_arguments and args.add(_call_deltas(deltas))
                        if progress or text:
                            yield LLMDelta(text=text, extra=args.take())
                    elif choice.index == 0:
                        if choice.text:
                            yield LLMDelta(text=choice.text)
                    elif choice.text:  # n > 1: further choices travel in ``extra``
                        yield LLMDelta(extra={"index": choice.index, "text": choice.text})
        finally:
            await gen.aclose()  # stopping early aborts the request in the engine now
        if tools is not None:  # held-back text, and the calls as OpenAI message entries
            text = _content(tools.finish())
            calls = list(tools.calls)
            extra = {**args.take(), **({"tool_calls": calls} if calls else {})}
            yield LLMDelta(text=text, extra=extra)
        usage = Usage(prompt_tokens=prompt_tokens, completion_tokens=sum(counts.values()))
        yield LLMDelta(finish_reason=finish.get(0) or "stop", usage=usage)

    def _tool_stream(self, params: dict[str, Any]) -> ToolStream | None:
        """How this call's ``tools`` are handled (None: no tools, or ``tool_choice`` none)."""
        if not params.get("tools"):
            return None
        request = {k: params.get(k) for k in ("tools", "tool_choice") if params.get(k)}
        mode = tool_mode(request, has_parser=bool(self.tool_call_parser))
        if mode == "none" and request.get("tool_choice") == "none":
            return None
        vllm_request = vllm_tool_request(params["tools"], params.get("tool_choice"))
        parser = None
        if mode == "auto":
            from vllm.tool_parsers import ToolParserManager

            cls = ToolParserManager.get_tool_parser(self.tool_call_parser or "")
            parser = cls(self.engine.tokenizer(), vllm_request.tools)
        choice: Any = params.get("tool_choice")
        name = str(choice["function"]["name"]) if mode == "named" else ""
        return ToolStream(mode, function_name=name, parser=parser, vllm_request=vllm_request)


def _held_to_the_end(tools: ToolStream, params: dict[str, Any]) -> bool:
    """Whether ``_astream`` yields nothing before the call's end: a forced call (``named``:
    only argument deltas, ``required``: held until parsed) of one choice."""
    return tools.mode in ("named", "required") and int(params.get("n") or 1) == 1


def _final_only() -> Any:
    from vllm.sampling_params import RequestOutputKind

    return RequestOutputKind.FINAL_ONLY


def _answer_format(fmt: Any) -> Any:
    """An OpenAI ``response_format`` (``json_schema``, ``json_object``) as vLLM's structured
    outputs (None: free text)."""
    if not isinstance(fmt, dict) or fmt.get("type") not in ("json_schema", "json_object"):
        return None
    from vllm.sampling_params import StructuredOutputsParams

    if fmt["type"] == "json_object":
        return StructuredOutputsParams(json_object=True)
    schema = (fmt.get("json_schema") or {}).get("schema") or {}
    return StructuredOutputsParams(json=schema, disable_any_whitespace=True)


def _content(deltas: list[dict[str, Any]]) -> str:
    return "".join(str(d.get("content") or "") for d in deltas)


class _ArgumentDeltas:
    """A forced call's argument deltas, passed on as progress: the first at once (the step
    has started), then at most every ``ARGUMENT_DELTAS_EVERY_S`` (a delta per token cost a
    chunk per token through the agent's stack: 32 sessions' runs took 1.3× as long on 2 busy
    cores), the rest with the calls."""

    def __init__(self) -> None:
        self.pending: list[dict[str, Any]] = []
        self.shown = 0.0  # when arguments were last passed on (0: none yet)

    def add(self, entries: list[dict[str, Any]]) -> bool:
        """Take ``entries``; whether the pending ones should be passed on now."""
        self.pending += entries
        if not any((e.get("function") or {}).get("arguments") for e in self.pending):
            return False  # only the call's id and name so far: wait for its first argument
        now = time.monotonic()
        if self.shown and now - self.shown < ARGUMENT_DELTAS_EVERY_S:
            return False
        self.shown = now
        return True

    def take(self) -> dict[str, Any]:
        """The pending deltas as an ``LLMDelta.extra`` (empty when none)."""
        pending, self.pending = self.pending, []
        return {"tool_call_deltas": pending} if pending else {}


def _call_deltas(deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The OpenAI stream ``tool_calls`` entries among ``deltas`` (progress only: the whole
    calls come in the final delta's ``extra["tool_calls"]``)."""
    return [entry for d in deltas for entry in d.get("tool_calls") or ()]


class AsyncVllmModel(_VllmCore):
    """lagent's ``AsyncVllmModel`` on a shared in-process vLLM ``AsyncLLM``."""


class VllmModel(_VllmCore, BaseLLM):
    """lagent's sync ``VllmModel``: ``chat``/``stream_chat`` drive the same async core.

    Use it from one thread: the engine belongs to the event loop that first generates.
    """
