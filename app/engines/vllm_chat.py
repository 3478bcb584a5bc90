"""OpenAI chat completions straight on the in-process vLLM engine (raw-model requests).

The request is validated by vLLM's own ``ChatCompletionRequest``, so sampling options,
``response_format`` and their errors behave as on vLLM's server; generation streams token
deltas from the shared engine, and a non-streaming answer is the collected stream.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from agents.llms.vllm import VllmEngine, VllmEngineError
from agents.llms.vllm_tools import ToolMode, ToolStream
from app.engines.base import EngineError
from app.engines.vllm_request import build_plan_parts
from app.models.encoded import ChunkEncoder

_FINISH = {"stop": "stop", "length": "length", "abort": "stop", "error": "stop"}


@dataclass
class _Plan:
    """A validated request, ready for the engine."""

    prompt: Any
    sampling: Any
    vllm_request: Any
    mode: ToolMode
    function_name: str = ""
    id: str = field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex}")
    created: int = field(default_factory=lambda: int(time.time()))


@dataclass
class _Choice:
    index: int
    tools: ToolStream
    tokens: int = 0
    finish: str | None = None
    logprobs: list[dict[str, Any]] | None = None


class VllmChatBackend:
    """``RawChatBackend`` for a model served by the shared vLLM engine."""

    def __init__(
        self,
        engine: VllmEngine,
        model_name: str,
        chat_template: str | None = None,
        tool_call_parser: str | None = None,
    ) -> None:
        self.engine = engine
        self.model_name = model_name
        self.chat_template = chat_template
        self.tool_call_parser = tool_call_parser
        self._defaults: tuple[Any, dict[str, Any]] | None = None  # (engine, its defaults)

    def sampling_defaults(self, llm: Any) -> dict[str, Any]:
        """The model's ``generation_config`` sampling defaults, read once per engine.

        vLLM's server reads them once at start; reading them per request re-parsed
        generation_config.json from disk (12% of the gateway's CPU at 32 streams, py-spy).
        """
        if self._defaults is None or self._defaults[0] is not llm:
            self._defaults = (llm, llm.model_config.get_diff_sampling_param())
        return self._defaults[1]

    def running_requests(self) -> int:
        """Generations in flight in the engine."""
        return self.engine.running_requests()

    async def complete(self, request: dict[str, Any]) -> dict[str, Any]:
        """A ``chat.completion`` object for ``request``."""
        plan = await self._plan(request)
        choices: dict[int, _Choice] = {}
        usage: dict[str, int] = {}
        async for _ in self._run(plan, choices, usage, request):
            pass
        out = []
        for c in sorted(choices.values(), key=lambda c: c.index):
            c.tools.parse()
            message: dict[str, Any] = {"role": "assistant", "content": c.tools.content}
            if c.tools.calls:
                message["tool_calls"] = c.tools.calls
            out.append(
                {
                    "index": c.index,
                    "message": message,
                    "logprobs": None if c.logprobs is None else {"content": c.logprobs},
                    "finish_reason": self._finish(c),
                }
            )
        return {
            "id": plan.id, "object": "chat.completion", "created": plan.created,
            "model": self.model_name, "choices": out, "usage": usage,
        }  # fmt: skip

    async def stream(self, request: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """``chat.completion.chunk`` objects for ``request`` (no ``[DONE]``)."""
        plan = await self._plan(request)
        include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
        choices: dict[int, _Choice] = {}
        usage: dict[str, int] = {}

        base: dict[str, Any] = {
            "id": plan.id, "object": "chat.completion.chunk", "created": plan.created,
            "model": self.model_name,
        }  # fmt: skip
        if include_usage:
            base["usage"] = None
        enc = ChunkEncoder(base)
        started: set[int] = set()
        run = self._run(plan, choices, usage, request)
        try:
            async for index, deltas, logprobs in run:
                if index not in started:
                    started.add(index)
                    yield enc.role(index)
                for i, delta in enumerate(deltas):
                    lp = {"content": logprobs} if logprobs and i == 0 else None
                    yield enc.delta(index, delta, logprobs=lp)
                choice = choices[index]
                if choice.finish is not None:
                    for delta in choice.tools.finish():
                        yield enc.delta(index, delta)
                    yield enc.finish(index, self._finish(choice))
        finally:
            await run.aclose()  # a consumer that stops reading aborts the generation now
        if include_usage:
            yield enc.usage(usage)

    def _finish(self, choice: _Choice) -> str:
        reason = _FINISH.get(choice.finish or "stop", "stop")
        if reason == "stop" and choice.tools.calls and choice.tools.mode != "named":
            return "tool_calls"  # OpenAI: a forced named call ends with "stop"
        return reason

    async def _run(
        self,
        plan: _Plan,
        choices: dict[int, _Choice],
        usage: dict[str, int],
        request: dict[str, Any],
    ) -> AsyncGenerator[tuple[int, list[dict[str, Any]], list[dict[str, Any]] | None], None]:
        """Per engine delta: (choice index, stream deltas, logprobs entries)."""
        want_logprobs = bool(request.get("logprobs"))
        top_n = int(request.get("top_logprobs") or 0)
        prompt_tokens = 0
        # A client-side loop's call after a tool result goes ahead of new arrivals, too.
        priority = self.engine.priority(request.get("messages"))
        gen = self.engine.generate(plan.prompt, plan.sampling, priority)
        try:
            async for out in gen:
                prompt_tokens = len(out.prompt_token_ids or [])
                for o in out.outputs:
                    choice = choices.get(o.index)
                    if choice is None:
                        choice = choices[o.index] = _Choice(o.index, self._tool_stream(plan))
                        choice.logprobs = [] if want_logprobs else None
                    choice.tokens += len(o.token_ids)
                    choice.finish = o.finish_reason
                    entries = None
                    if want_logprobs and o.logprobs:
                        entries = _logprob_entries(o.token_ids, o.logprobs, top_n)
                        assert choice.logprobs is not None
                        choice.logprobs.extend(entries)
                    yield o.index, choice.tools.feed(o.text), entries
        except Exception as exc:
            raise _engine_error(exc) from exc
        finally:
            await gen.aclose()
        completion = sum(c.tokens for c in choices.values())
        usage.update(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion,
            total_tokens=prompt_tokens + completion,
        )

    def _tool_stream(self, plan: _Plan) -> ToolStream:
        parser = None
        if plan.mode == "auto":
            from vllm.tool_parsers import ToolParserManager

            cls = ToolParserManager.get_tool_parser(self.tool_call_parser or "")
            parser = cls(self.engine.tokenizer(), plan.vllm_request.tools)
        fmt = getattr(plan.vllm_request, "response_format", None)
        return ToolStream(
            plan.mode,
            function_name=plan.function_name,
            parser=parser,
            vllm_request=plan.vllm_request,
            json_content=getattr(fmt, "type", None) in ("json_schema", "json_object"),
        )

    async def _plan(self, request: dict[str, Any]) -> _Plan:
        try:
            parts = await build_plan_parts(self, request)
        except Exception as exc:
            raise _engine_error(exc) from exc
        return _Plan(*parts)


# vLLM's renderer names these parameters when the prompt alone is over the model's context.
PROMPT_TOO_LONG = ("input_tokens", "input_text")


def _engine_error(exc: Exception) -> Exception:
    """Bad input -> 400 naming the problem; a dead engine -> 503; anything else unchanged."""
    from vllm.exceptions import VLLMClientError, VLLMValidationError

    if isinstance(exc, EngineError):
        return exc
    if isinstance(exc, VllmEngineError):
        return EngineError(str(exc))
    if isinstance(exc, VLLMValidationError) and exc.parameter in PROMPT_TOO_LONG:
        # The renderer refuses a prompt over the context before our own check can: the same
        # code and param as a too-large max_tokens (LangChain's ContextOverflowError).
        message = str(exc.args[0]) if exc.args else str(exc)
        return EngineError(message, status=400, code="context_length_exceeded", param="messages")
    if isinstance(exc, VLLMClientError | ValueError):  # pydantic's ValidationError included
        return EngineError(str(exc), status=400, code="invalid_request")
    return exc


def _logprob_entries(token_ids: Any, logprobs: Any, top_n: int) -> list[dict[str, Any]]:
    entries = []
    for token_id, position in zip(token_ids, logprobs, strict=False):
        chosen = position[token_id]
        tops = sorted(position.values(), key=lambda lp: lp.rank or 0)[:top_n] if top_n else []
        entries.append(
            {
                **_token(chosen.decoded_token, chosen.logprob),
                "top_logprobs": [_token(lp.decoded_token, lp.logprob) for lp in tops],
            }
        )
    return entries


def _token(text: str | None, logprob: float) -> dict[str, Any]:
    token = text or ""
    return {"token": token, "logprob": max(logprob, -9999.0), "bytes": list(token.encode())}
