"""OpenTelemetry tracing (issue 28) with the SDK's in-memory exporter: off unless configured,
one trace per run with GenAI spans, content only when asked, and the trace context sent on to an
OpenAI-compatible upstream. The same tree read back from Arize Phoenix, with a real kernel:
tests/ops/test_tracing_phoenix.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import app.ops.tracing as tracing_module
from agents import AgentStatusCode, AsyncToolAgent
from agents import tracing as agent_tracing
from agents.actions.mcp import MCPToolkit
from agents.actions.mcp_conn import CONNECTIONS
from agents.remote import RemoteAgent
from agents.testing import ScriptedLLM
from app.db.migrate import upgrade
from app.main import create_app
from app.ops.tracing import tracing_configured
from app.ops.tracing_agents import AgentTracer
from tests.agents.mcp_server import serve_http
from tests.agents.test_llms_openai import MockOpenAI, server  # noqa: F401 (the fixture)
from tests.agents.test_mcp import PLUGIN
from tests.app.conftest import KEY_A, MODELS, make_settings, parse_sse
from tests.lifespan import LifespanManager

CALLER = [
    '```json\n{"name": "critic", "parameters": {"message": "Is 2+2=4?"}}\n```\n',
    "The critic agrees.",
]
TEAM = [
    {"name": "caller", "backend": "scripted", "replies": CALLER},
    {"name": "critic", "backend": "scripted", "replies": ["Looks right."]},
]
OTEL_VARIABLES = (
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
)
CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"


def test_tracing_is_off_unless_the_otel_variables_ask_for_it() -> None:
    assert not tracing_configured({})
    assert tracing_configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert tracing_configured({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})
    assert tracing_configured({"OTEL_TRACES_EXPORTER": "console"})
    assert not tracing_configured({"OTEL_TRACES_EXPORTER": "none"})
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    assert not tracing_configured({**endpoint, "OTEL_SDK_DISABLED": "true"})


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture
def exporter(clean_env: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """Tracing on (``OTEL_TRACES_EXPORTER=otlp``), its spans kept in memory."""
    memory = InMemorySpanExporter()
    clean_env.setenv("OTEL_TRACES_EXPORTER", "otlp")
    clean_env.setattr(tracing_module, "_exporters", lambda env: [memory])
    yield memory


async def _client(tmp_path: Path, models: list[dict[str, Any]]) -> AsyncIterator[Any]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'trace.db'}"
    await asyncio.to_thread(upgrade, url)
    application = create_app(make_settings(url, models=json.dumps([*MODELS, *models])))
    async with LifespanManager(application):
        transport = httpx.ASGITransport(app=application)
        headers = {"Authorization": f"Bearer {KEY_A}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://t", headers=headers
        ) as client:
            yield application, client


def _finished(application: FastAPI, exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    application.state.ops.tracing.provider.force_flush()
    return list(exporter.get_finished_spans())


def _hex(span: ReadableSpan) -> tuple[str, str]:
    assert span.context is not None
    return f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"


def _parent(span: ReadableSpan, spans: list[ReadableSpan]) -> ReadableSpan | None:
    if span.parent is None:
        return None
    return next((s for s in spans if s.context and s.context.span_id == span.parent.span_id), None)


def _one(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


async def _agent(client: httpx.AsyncClient, name: str, spec: dict[str, Any]) -> None:
    resp = await client.post("/v1/agents", json={"name": name, "spec": spec})
    assert resp.status_code == 201, resp.text


async def test_off_no_span_no_hook_and_no_trace_id(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    async for application, client in _client(tmp_path, []):
        assert application.state.ops.tracing is None
        assert agent_tracing.TRACER is None
        handle = application.state.agentstation.models.get("echo")
        assert handle.llm.tracer is None  # InstrumentedLLM: no chat span
        await _agent(client, "helper", {"model": "echo"})
        sid = (await client.post("/v1/sessions", json={"agent": "helper"})).json()["id"]
        resp = await client.post(f"/v1/sessions/{sid}/messages", json={"message": "hi"})
        assert resp.json()["run"]["trace_id"] is None


async def test_a_turn_is_one_trace_of_genai_spans_with_content_when_asked(
    exporter: InMemorySpanExporter, clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    async for application, client in _client(tmp_path, TEAM):
        await _agent(client, "reviewer", {"model": "critic"})
        spec = {"kind": "tool_agent", "model": "caller", "sub_agents": {"critic": "reviewer"}}
        await _agent(client, "asker", spec)
        sid = (await client.post("/v1/sessions", json={"agent": "asker"})).json()["id"]
        traceparent = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
        resp = await client.post(
            f"/v1/sessions/{sid}/messages",
            json={"message": "2+2?"},
            headers={"traceparent": traceparent},
        )
        run = resp.json()["run"]
        assert run["trace_id"] == CLIENT_TRACE
        assert (await client.get(f"/v1/runs/{run['id']}")).json()["trace_id"] == CLIENT_TRACE
        spans = [s for s in _finished(application, exporter) if _hex(s)[0] == CLIENT_TRACE]
    assert agent_tracing.TRACER is None  # uninstalled with the app

    root = _one(spans, "POST /v1/sessions/{session_id}/messages")
    assert root.parent is not None and f"{root.parent.span_id:016x}" == CLIENT_SPAN
    assert root.attributes is not None and root.attributes["http.response.status_code"] == 200
    asker = _one(spans, "invoke_agent asker")
    assert _parent(asker, spans) is root
    assert (
        dict(asker.attributes or {}).items()
        >= {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "asker",
            "gen_ai.conversation.id": sid,
            "agentstation.run.id": run["id"],
        }.items()
    )
    assert _parent(_one(spans, "store.admit"), spans) is _one(spans, "admission")
    assert _parent(_one(spans, "admission"), spans) is root
    assert _parent(_one(spans, "store.store_end"), spans) is root

    chats = sorted((s for s in spans if s.name == "chat caller"), key=lambda s: s.start_time or 0)
    assert len(chats) == 2 and all(_parent(c, spans) is asker for c in chats)
    tool = _one(spans, "execute_tool critic")
    assert _parent(tool, spans) is asker
    assert chats[0].end_time is not None and tool.start_time is not None
    assert chats[0].end_time <= tool.start_time
    # The sub-agent, called as a tool: its own invoke_agent inside the tool call.
    critic = _one(spans, "invoke_agent critic")  # named by its sub_agents key
    assert _parent(critic, spans) is tool
    assert (critic.attributes or {})["gen_ai.conversation.id"] == sid
    assert _parent(_one(spans, "chat critic"), spans) is critic

    chat = dict(chats[0].attributes or {})
    assert chat["gen_ai.operation.name"] == "chat"
    assert chat["gen_ai.request.model"] == chat["gen_ai.response.model"] == "caller"
    assert chat["gen_ai.provider.name"] == "scripted"
    assert chat["gen_ai.usage.input_tokens"] > 0 and chat["gen_ai.usage.output_tokens"] > 0
    assert list(chat["gen_ai.response.finish_reasons"]) == ["stop"]
    assert [e.name for e in chats[0].events] == ["gen_ai.first_token"]
    # Content, as asked: the conventions' message shapes, the tool's arguments and result.
    said = json.loads(str(chat["gen_ai.input.messages"]))
    assert said[-1]["role"] == "user" and "2+2?" in said[-1]["parts"][0]["content"]
    answer = json.loads(str(chat["gen_ai.output.messages"]))
    assert answer[0]["parts"][0]["content"] == CALLER[0]
    arguments = json.loads(str((tool.attributes or {})["gen_ai.tool.call.arguments"]))
    assert arguments == {"message": "Is 2+2=4?"}
    assert "Looks right." in str((tool.attributes or {})["gen_ai.tool.call.result"])


async def test_without_content_capture_no_message_is_recorded(
    exporter: InMemorySpanExporter, tmp_path: Path
) -> None:
    async for application, client in _client(tmp_path, TEAM):
        await _agent(client, "helper", {"model": "echo"})
        sid = (await client.post("/v1/sessions", json={"agent": "helper"})).json()["id"]
        await client.post(f"/v1/sessions/{sid}/messages", json={"message": "secret words"})
        spans = _finished(application, exporter)
    chat = _one(spans, "chat echo")
    assert not any("secret" in str(v) for s in spans for v in (s.attributes or {}).values())
    assert "gen_ai.input.messages" not in (chat.attributes or {})


async def test_the_upstream_model_server_gets_the_trace_context(
    exporter: InMemorySpanExporter,
    tmp_path: Path,
    server: MockOpenAI,  # noqa: F811 (the imported fixture)
) -> None:
    remote = {"name": "remote", "backend": "openai", "base_url": server.url, "model": "m"}
    async for application, client in _client(tmp_path, [remote]):
        await _agent(client, "proxy", {"model": "remote"})
        sid = (await client.post("/v1/sessions", json={"agent": "proxy"})).json()["id"]
        resp = await client.post(f"/v1/sessions/{sid}/messages", json={"message": "hi"})
        run = resp.json()["run"]
        # A streamed run: its first and last events carry the trace id too (the playground).
        body = {"message": "again", "stream": True}
        frames = parse_sse((await client.post(f"/v1/sessions/{sid}/messages", json=body)).text)
        events = {f["event"]: f["data"] for f in frames if "event" in f}
        streamed = events["run.created"]["run"]["trace_id"]
        assert streamed and streamed != run["trace_id"]  # a trace per request (no traceparent)
        assert events["run.completed"]["run"]["trace_id"] == streamed
        # A raw request to the model: its chat span is the upstream's parent too.
        raw = {"model": "remote", "messages": [{"role": "user", "content": "raw"}]}
        assert (await client.post("/v1/chat/completions", json=raw)).status_code == 200
        spans = _finished(application, exporter)
    raw_chat = [s for s in spans if s.name == "chat remote"][-1]
    raw_parent = server.requests[-1]["headers"]["traceparent"].split("-")[1:3]
    assert tuple(raw_parent) == _hex(raw_chat)
    chat = _one([s for s in spans if _hex(s)[0] == run["trace_id"]], "chat remote")
    trace_id, span_id = _hex(chat)
    assert run["trace_id"] == trace_id
    _, sent_trace, parent, flags = server.requests[0]["headers"]["traceparent"].split("-")
    assert (sent_trace, parent) == (trace_id, span_id)  # the chat span is the upstream's parent
    assert int(flags, 16) & 1  # sampled
    assert (chat.attributes or {})["gen_ai.provider.name"] == "openai"


def test_the_exporter_follows_the_otel_variables() -> None:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    # Set but empty (a blanked variable) is the default: OTLP over HTTP.
    for env in (endpoint, {**endpoint, "OTEL_TRACES_EXPORTER": ""}):
        assert [type(e) for e in tracing_module._exporters(env)] == [Http]
    grpc = {**endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    assert [type(e) for e in tracing_module._exporters(grpc)] == [Grpc]
    both = {"OTEL_TRACES_EXPORTER": "otlp,console"}
    assert [type(e) for e in tracing_module._exporters(both)] == [Http, ConsoleSpanExporter]
    with pytest.raises(ValueError, match="zipkin"):
        tracing_module._exporters({"OTEL_TRACES_EXPORTER": "zipkin"})


@pytest.fixture
def memory_tracer() -> Iterator[tuple[AgentTracer, InMemorySpanExporter]]:
    """An ``AgentTracer`` installed for the agents library, its spans kept in memory."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = AgentTracer(provider.get_tracer("test"))
    agent_tracing.install(tracer)
    try:
        yield tracer, memory
    finally:
        agent_tracing.install(None)


async def test_mcp_servers_and_remote_agents_get_the_trace_context(
    memory_tracer: tuple[AgentTracer, InMemorySpanExporter],
) -> None:
    _, memory = memory_tracer
    # MCP: ``params._meta.traceparent`` of the call, the execute_tool span as its parent.
    with serve_http() as url:
        try:
            tools = MCPToolkit(url=url, allow=["trace_context"])
            call = '```json\n{"name": "mcp.trace_context", "parameters": {}}\n```\n'
            llm = ScriptedLLM([call, "ok"])
            agent = AsyncToolAgent(llm, executor=[tools], output_format=PLUGIN, max_turn=2)
            chunks = [c async for c in agent.stream("go", session_id="s1")]
        finally:
            await CONNECTIONS.aclose()
    returned = [c for c in chunks if c.stream_state == AgentStatusCode.PLUGIN_RETURN]
    meta = json.loads(str(returned[0].content))
    tool = next(s for s in memory.get_finished_spans() if s.name.startswith("execute_tool"))
    trace_id, span_id = _hex(tool)
    assert meta["traceparent"].split("-")[1:3] == [trace_id, span_id]

    # A2A: a ``traceparent`` header on the requests, the remote agent's invoke_agent as parent.
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("traceparent"))
        return httpx.Response(404)

    remote = RemoteAgent(
        "http://agents.test/a2a/x/", name="expert", transport=httpx.MockTransport(handler)
    )
    with pytest.raises(Exception):  # noqa: B017 (no card there: what was sent is the point)
        [c async for c in remote.stream("hi", session_id="s2")]
    span = next(s for s in memory.get_finished_spans() if s.name == "invoke_agent expert")
    assert span.kind.name == "CLIENT" and span.status.status_code.name == "ERROR"
    assert seen and str(seen[0]).split("-")[1:3] == list(_hex(span))


async def test_a_sampled_out_client_trace_records_nothing(
    exporter: InMemorySpanExporter, tmp_path: Path
) -> None:
    # parentbased_always_on (the default) follows the client's "not sampled" flag (00): no
    # span of the turn is recorded, and the agent hooks start none.
    async for application, client in _client(tmp_path, TEAM):
        await _agent(client, "reviewer", {"model": "critic"})
        spec = {"kind": "tool_agent", "model": "caller", "sub_agents": {"critic": "reviewer"}}
        await _agent(client, "asker", spec)
        sid = (await client.post("/v1/sessions", json={"agent": "asker"})).json()["id"]
        resp = await client.post(
            f"/v1/sessions/{sid}/messages",
            json={"message": "2+2?"},
            headers={"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-00"},
        )
        assert resp.json()["message"]["content"] == "The critic agrees."
        spans = _finished(application, exporter)
    assert [s.name for s in spans if _hex(s)[0] == CLIENT_TRACE] == []


async def test_a_raw_model_request_is_a_chat_span_of_its_request(
    exporter: InMemorySpanExporter, tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    # /v1/chat/completions with a model's name (no agent) is no run, but it is a model call:
    # a ``chat {model}`` span under the request's span, whole or streamed.
    clean_env.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    body = {
        "model": "poet",
        "messages": [{"role": "user", "content": "a poem please"}],
        "max_tokens": 20,
        "temperature": 0.5,
    }
    traceparent = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
    async for application, client in _client(tmp_path, []):
        whole = await client.post(
            "/v1/chat/completions", json=body, headers={"traceparent": traceparent}
        )
        assert whole.status_code == 200, whole.text
        streamed = await client.post("/v1/chat/completions", json={**body, "stream": True})
        assert streamed.status_code == 200, streamed.text
        spans = _finished(application, exporter)
    chats = [s for s in spans if s.name == "chat poet"]
    assert len(chats) == 2
    usage = whole.json()["usage"]
    for chat in chats:
        request = _parent(chat, spans)
        assert request is not None and request.name == "POST /v1/chat/completions"
        attributes = dict(chat.attributes or {})
        assert attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.provider.name"] == "scripted"
        assert attributes["gen_ai.request.model"] == "poet"
        assert attributes["gen_ai.request.max_tokens"] == 20
        assert attributes["gen_ai.request.temperature"] == 0.5
        assert attributes["gen_ai.usage.input_tokens"] == usage["prompt_tokens"]
        assert attributes["gen_ai.usage.output_tokens"] == usage["completion_tokens"]
        assert tuple(attributes["gen_ai.response.finish_reasons"]) == ("stop",)
        assert "a poem please" in str(attributes["gen_ai.input.messages"])
        output = str(attributes["gen_ai.output.messages"])
        assert "Roses are red." in output or "Violets are blue." in output  # one reply each
    first, second = sorted(chats, key=lambda s: s.start_time or 0)
    assert _hex(first)[0] == CLIENT_TRACE  # the client's trace continues
    assert _hex(second)[0] != CLIENT_TRACE
    assert [e.name for e in second.events] == ["gen_ai.first_token"]  # streamed: TTFT
