"""GenAI spans of agent turns, model calls, tool calls and kernel cells (when tracing is on).

``AgentTracer`` implements ``agents.tracing.Tracer`` (installed by ``start_tracing``) and the
``chat`` span that ``InstrumentedLLM`` opens per model call. Names and attributes follow
OpenTelemetry's GenAI semantic conventions: ``invoke_agent {agent}``, ``chat {model}``,
``execute_tool {tool}``; ``gen_ai.conversation.id`` is the session's id. Message content and
tool arguments/results are recorded only with
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``.

A span around an async generator is current only while the generator itself runs (attached
before each step, detached after it, in the same task): the consumer between two chunks, or a
generator closed from elsewhere, never sees or detaches another's context.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol, TypeVar

from opentelemetry import context, propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from agents.llms.base import LLMDelta, Messages
from app.ops.logging import run_id_var

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)
R = TypeVar("R")

CONVERSATION = "gen_ai.conversation.id"
FIRST_TOKEN_EVENT = "gen_ai.first_token"
# The request parameters a chat span records (gen_params name -> attribute).
_REQUEST_PARAMS = {
    "max_new_tokens": "gen_ai.request.max_tokens",
    "max_tokens": "gen_ai.request.max_tokens",
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
    "top_k": "gen_ai.request.top_k",
    "seed": "gen_ai.request.seed",
}


def conversation_id(session_id: Any) -> str:
    """The session's public id from the runtime's session key (``tenant:session``)."""
    return str(session_id).rpartition(":")[2]


def _inherited(key: str) -> Any:
    """An attribute of the current span (a parent ``invoke_agent``), if it is recording."""
    attributes = getattr(trace.get_current_span(), "attributes", None)
    return attributes.get(key) if attributes else None


class Observer(Protocol[T_contra]):
    """What a model call's span records from its stream, without a generator layer of its own:
    ``item`` sees each chunk on its way out, ``ended`` gives the closing attributes."""

    def item(self, item: T_contra) -> None: ...

    def ended(self) -> dict[str, Any]: ...


async def stepwise(
    span: Span, stream: AsyncIterator[T], observer: Observer[T] | None = None
) -> AsyncIterator[T]:
    """``stream`` with ``span`` current while it runs; the span ends with it. ``observer``
    (a model call's): each item passes it, its attributes are set once the stream is done."""
    ctx = trace.set_span_in_context(span)
    try:
        while True:
            token = context.attach(ctx)
            try:
                item = await anext(stream)
            except StopAsyncIteration:
                break
            finally:
                context.detach(token)
            if observer is not None:
                observer.item(item)
            yield item
        if observer is not None:
            # One call at the end: each attribute set alone costs a lock and a check in the SDK.
            span.set_attributes(observer.ended())
    except BaseException as exc:
        record_failure(span, exc)
        raise
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            token = context.attach(ctx)
            try:
                await aclose()
            finally:
                context.detach(token)
        span.end()


def record_failure(span: Span, exc: BaseException) -> None:
    """A failed block on its span: ``error.type``, the exception, ERROR (not for GeneratorExit)."""
    if isinstance(exc, GeneratorExit):  # the consumer stopped early: not a failure
        return
    span.set_attribute("error.type", type(exc).__qualname__)
    if isinstance(exc, Exception):
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, str(exc)[:200]))


def _parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    return [{"type": "text", "content": json.dumps(content, default=str)}]


def input_messages(messages: Messages) -> str:
    """``gen_ai.input.messages``: the conventions' JSON shape (role and parts)."""
    out = [{"role": m.get("role", "user"), "parts": _parts(m.get("content"))} for m in messages]
    return json.dumps(out, default=str)


class AgentTracer:
    """Spans for ``agents.tracing`` hook points and ``InstrumentedLLM`` model calls."""

    def __init__(
        self, tracer: Tracer, capture_content: bool = False, parent_based: bool = False
    ) -> None:
        self.tracer = tracer
        self.capture_content = capture_content
        # The sampler follows the parent (OTEL_TRACES_SAMPLER=parentbased_*, the default): a
        # span under a sampled-out parent would not be recorded, so none is started at all.
        self.parent_based = parent_based

    def _skipped(self) -> bool:
        """Whether the current span was sampled out, so that no child of it is recorded."""
        if not self.parent_based:
            return False
        current = trace.get_current_span().get_span_context()
        return current.is_valid and not current.trace_flags.sampled

    # -- agents.tracing.Tracer ----------------------------------------------------------------
    def agent(self, agent: Any, session_id: Any, stream: AsyncIterator[T]) -> AsyncIterator[T]:
        """``invoke_agent {name}`` around one turn; nested agents' spans are its children."""
        if self._skipped():
            return stream
        name = getattr(agent, "name", None) or type(agent).__name__
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": name,
            "agentstation.agent.class": type(agent).__name__,  # a Task and its lead agent
            # A sub-agent talks under its own key: the conversation is the outer one's.
            CONVERSATION: _inherited(CONVERSATION) or conversation_id(session_id),
        }
        description = getattr(agent, "description", None)
        if isinstance(description, str) and description:
            attributes["gen_ai.agent.description"] = description[:500]
        run_id = run_id_var.get()
        if run_id is not None:
            attributes["agentstation.run.id"] = run_id
        remote = getattr(agent, "url", None)
        kind = SpanKind.CLIENT if isinstance(remote, str) else SpanKind.INTERNAL
        if isinstance(remote, str):
            attributes["server.address"] = remote
        span = self.tracer.start_span(f"invoke_agent {name}", kind=kind, attributes=attributes)
        return stepwise(span, stream)

    async def tool(
        self, name: str, arguments: Any, call_id: str | None, call: Callable[[], Awaitable[R]]
    ) -> R:
        """``execute_tool {name}`` around one call; a failed call's span has ``error.type``."""
        if self._skipped():
            return await call()
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.type": "function",
        }
        conversation = _inherited(CONVERSATION)
        if conversation:
            attributes[CONVERSATION] = conversation
        if call_id:
            attributes["gen_ai.tool.call.id"] = call_id
        if self.capture_content:
            attributes["gen_ai.tool.call.arguments"] = json.dumps(arguments, default=str)
        with self.tracer.start_as_current_span(
            f"execute_tool {name}", attributes=attributes, end_on_exit=True
        ) as span:
            result = await call()
            state = getattr(result, "state", 0)
            if state:  # ActionStatusCode: 0 is success
                span.set_attribute("error.type", getattr(state, "name", str(state)).lower())
                errmsg = getattr(result, "errmsg", None)
                span.set_status(Status(StatusCode.ERROR, str(errmsg or "")[:200]))
            if self.capture_content:
                text = getattr(result, "format_result", None)
                if callable(text):
                    span.set_attribute("gen_ai.tool.call.result", str(text()))
            return result

    def span(self, name: str, attributes: dict[str, Any]) -> AbstractContextManager[Span]:
        """A plain span (a kernel cell) around a block."""
        return self.tracer.start_as_current_span(name, attributes=attributes)

    def headers(self, headers: dict[str, str]) -> dict[str, str]:
        """``headers`` plus the current ``traceparent`` (a new dict)."""
        out = dict(headers)
        propagate.inject(out)
        return out

    # -- model calls (InstrumentedLLM) ---------------------------------------------------------
    def chat(
        self,
        model: str,
        provider: str,
        messages: Messages,
        params: dict[str, Any],
        stream: Callable[[], AsyncIterator[LLMDelta]],
    ) -> AsyncIterator[LLMDelta]:
        """``chat {model}`` around one model call: TTFT as an event, usage, finish reason."""
        if self._skipped():
            return stream()
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
        }
        conversation = _inherited(CONVERSATION)
        if conversation:
            attributes[CONVERSATION] = conversation
        for key, attribute in _REQUEST_PARAMS.items():
            value = params.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                attributes[attribute] = value
        if self.capture_content:
            attributes["gen_ai.input.messages"] = input_messages(messages)
        span = self.tracer.start_span(f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes)
        return stepwise(span, stream(), _ChatObserver(span, model, self.capture_content))

    # -- raw model requests (InstrumentedRaw: /v1/chat/completions with a model's name) ------
    def _raw_span(self, model: str, provider: str, request: dict[str, Any]) -> Span | None:
        if self._skipped():
            return None
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
        }
        for key, attribute in _RAW_PARAMS.items():
            value = request.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                attributes[attribute] = value
        if self.capture_content:
            attributes["gen_ai.input.messages"] = input_messages(request.get("messages") or [])
        return self.tracer.start_span(f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes)

    async def raw_chat(
        self,
        model: str,
        provider: str,
        request: dict[str, Any],
        call: Callable[[], Awaitable[dict[str, Any]]],
    ) -> dict[str, Any]:
        """``chat {model}`` around a raw (OpenAI-shaped) completion: usage, finish reasons."""
        span = self._raw_span(model, provider, request)
        if span is None:
            return await call()
        try:
            with current(trace.set_span_in_context(span)):  # traceparent to an upstream
                answer = await call()
            choices = answer.get("choices") if isinstance(answer, dict) else None
            reasons = [c.get("finish_reason") or "stop" for c in choices or []]
            output = [(c.get("message") or {}).get("content") for c in choices or []]
            span.set_attributes(_raw_ended(answer, model, reasons, self.capture_content, output))
            return answer
        except BaseException as exc:
            record_failure(span, exc)
            raise
        finally:
            span.end()

    def raw_stream(
        self,
        model: str,
        provider: str,
        request: dict[str, Any],
        stream: Callable[[], AsyncIterator[dict[str, Any]]],
    ) -> AsyncIterator[dict[str, Any]]:
        """``chat {model}`` around a raw streamed completion: TTFT event, usage, finish."""
        span = self._raw_span(model, provider, request)
        if span is None:
            return stream()
        observer = _RawObserver(span, model, self.capture_content)
        return stepwise(span, stream(), observer)


class _ChatObserver:
    """A ``chat`` span's view of an ``LLMDelta`` stream: TTFT event, usage, finish reason."""

    __slots__ = ("capture", "finish", "model", "span", "start", "text", "usage")

    def __init__(self, span: Span, model: str, capture: bool) -> None:
        self.span = span
        self.model = model
        self.capture = capture
        self.start: float | None = time.perf_counter()  # None once the first token is seen
        self.text: list[str] = []
        self.finish: str | None = None
        self.usage: Any = None

    def item(self, delta: LLMDelta) -> None:
        if delta.text:
            if self.start is not None:
                ttft = time.perf_counter() - self.start
                self.start = None
                self.span.add_event(FIRST_TOKEN_EVENT, {"gen_ai.server.time_to_first_token": ttft})
            if self.capture:
                self.text.append(delta.text)
        if delta.usage is not None:
            self.usage = delta.usage
        if delta.finish_reason is not None:
            self.finish = delta.finish_reason

    def ended(self) -> dict[str, Any]:
        finish = self.finish or "stop"
        ended: dict[str, Any] = {
            "gen_ai.response.model": self.model,
            "gen_ai.response.finish_reasons": [finish],
        }
        usage = self.usage
        if usage is not None:
            ended["gen_ai.usage.input_tokens"] = usage.prompt_tokens
            ended["gen_ai.usage.output_tokens"] = usage.completion_tokens
        if self.capture:
            output = [
                {
                    "role": "assistant",
                    "parts": [{"type": "text", "content": "".join(self.text)}],
                    "finish_reason": finish,
                }
            ]
            ended["gen_ai.output.messages"] = json.dumps(output)
        return ended


class _RawObserver:
    """A raw streamed ``chat`` span's view of OpenAI-shaped chunks."""

    __slots__ = ("capture", "last", "model", "reasons", "span", "start", "text")

    def __init__(self, span: Span, model: str, capture: bool) -> None:
        self.span = span
        self.model = model
        self.capture = capture
        self.start: float | None = time.perf_counter()
        self.reasons: list[str] = []
        self.text: list[str] = []
        self.last: dict[str, Any] = {}

    def item(self, chunk: dict[str, Any]) -> None:
        for choice in chunk.get("choices") or []:
            content = (choice.get("delta") or {}).get("content")
            if content:
                if self.start is not None:
                    ttft = time.perf_counter() - self.start
                    self.start = None
                    self.span.add_event(
                        FIRST_TOKEN_EVENT, {"gen_ai.server.time_to_first_token": ttft}
                    )
                if self.capture:
                    self.text.append(content)
            if choice.get("finish_reason"):
                self.reasons.append(choice["finish_reason"])
        if chunk.get("usage") or chunk.get("id"):
            last = self.last
            self.last = {**last, **{k: chunk[k] for k in ("id", "model", "usage") if k in chunk}}

    def ended(self) -> dict[str, Any]:
        reasons = self.reasons or ["stop"]
        return _raw_ended(self.last, self.model, reasons, self.capture, ["".join(self.text)])


# The request parameters a raw chat span records (OpenAI's names -> attribute).
_RAW_PARAMS = {
    "max_tokens": "gen_ai.request.max_tokens",
    "max_completion_tokens": "gen_ai.request.max_tokens",
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
    "seed": "gen_ai.request.seed",
    "frequency_penalty": "gen_ai.request.frequency_penalty",
    "presence_penalty": "gen_ai.request.presence_penalty",
}


def _raw_ended(
    answer: Any, model: str, reasons: list[str], capture: bool, output: list[Any]
) -> dict[str, Any]:
    """A raw chat span's closing attributes from the (OpenAI-shaped) answer."""
    answer = answer if isinstance(answer, dict) else {}
    ended: dict[str, Any] = {
        "gen_ai.response.model": str(answer.get("model") or model),
        "gen_ai.response.finish_reasons": reasons or ["stop"],
    }
    if answer.get("id"):
        ended["gen_ai.response.id"] = str(answer["id"])
    usage = answer.get("usage")
    if isinstance(usage, dict):
        ended["gen_ai.usage.input_tokens"] = int(usage.get("prompt_tokens") or 0)
        ended["gen_ai.usage.output_tokens"] = int(usage.get("completion_tokens") or 0)
    if capture:
        messages = [
            {"role": "assistant", "parts": _parts(content or ""), "finish_reason": reason}
            for content, reason in zip(output, reasons, strict=False)
        ]
        ended["gen_ai.output.messages"] = json.dumps(messages, default=str)
    return ended


@contextmanager
def current(ctx: context.Context) -> Iterator[None]:
    """``ctx`` current for a block (in one task)."""
    token = context.attach(ctx)
    try:
        yield
    finally:
        context.detach(token)
