"""MCP servers as tool sources: a server written with the official SDK (streamable HTTP, a
real subprocess) gives an agent its tools; failures and silence become error results."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Iterator

import pytest

from agents import AgentStatusCode, AsyncToolAgent
from agents.actions.base import current_session_id
from agents.actions.mcp import MCPToolkit
from agents.actions.mcp_conn import CONNECTIONS
from agents.parsers import ToolParser
from agents.testing import ScriptedLLM
from tests.agents.mcp_server import serve_http

PLUGIN = ToolParser("plugin", begin="```json\n", end="\n```\n", validate="json")


@pytest.fixture(scope="module")
def mcp_url() -> Iterator[str]:
    """The test MCP server over streamable HTTP, in its own process."""
    with serve_http() as url:
        yield url


@pytest.fixture
async def closing() -> AsyncIterator[None]:
    yield
    await CONNECTIONS.aclose()


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A TCP server that accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield int(sock.getsockname()[1])
    finally:
        sock.close()


async def test_an_agent_calls_two_tools_of_the_server(mcp_url: str, closing: None) -> None:
    tools = MCPToolkit(url=mcp_url, allow=["add", "shout"])
    llm = ScriptedLLM([
        '```json\n{"name": "mcp.add", "parameters": {"a": 20, "b": 22}}\n```\n',
        '```json\n{"name": "mcp__shout", "parameters": {"text": "done"}}\n```\n',
        "The sum is 42, and DONE.",
    ])  # fmt: skip
    agent = AsyncToolAgent(llm, executor=[tools], output_format=PLUGIN)
    chunks = [c async for c in agent.stream("Add 20 and 22, then shout done", session_id="s1")]
    results = [c for c in chunks if c.stream_state == AgentStatusCode.PLUGIN_RETURN]
    assert [r.content for r in results] == ["42", "DONE"]
    assert chunks[-1].content == "The sum is 42, and DONE."
    # The model was shown the server's tools, with their own schemas, and only allowed ones.
    assert tools.api_names() == ["add", "shout"]
    schema = tools.tool_schemas()[0]["function"]
    assert schema["name"] == "mcp__add" and schema["parameters"]["required"] == ["a", "b"]
    assert "shout" in llm.calls[0]["messages"][0]["content"]
    assert "fail" not in llm.calls[0]["messages"][0]["content"]
    # One connection served both calls of the session; closing the session closes it.
    assert CONNECTIONS.count("s1") == 1
    await CONNECTIONS.close_session("s1")
    assert CONNECTIONS.count("s1") == 0


async def test_bad_arguments_failing_and_hanging_tools_are_error_results(
    mcp_url: str, closing: None
) -> None:
    tools = MCPToolkit(url=mcp_url, timeout_s=2)
    token = current_session_id.set("s2")
    try:
        bad = await tools.acall({"a": "x", "b": 1}, "add")
        assert bad.state == -1001 and "argument 'a'" in (bad.errmsg or "")
        failed = await tools.acall({"reason": "boom"}, "fail")
        assert failed.state == -1002 and failed.errmsg
        started = time.monotonic()
        hung = await tools.acall({}, "hang")
        assert time.monotonic() - started < 4
        assert hung.state == -1002 and "did not answer within 2s" in (hung.errmsg or "")
        # The hung connection was dropped; the next call gets a new one and works.
        ok = await tools.acall({"a": 1, "b": 2}, "add")
        assert ok.result == [{"type": "text", "content": "3"}]
        unknown = await tools.acall({}, "nope")
        listed = "available: add, shout, fail, hang, probe, trace_context"
        assert unknown.state == -1001 and listed in (unknown.errmsg or "")
    finally:
        current_session_id.reset(token)


async def test_a_server_that_never_answers_is_an_error_within_the_timeout(
    silent_port: int, closing: None
) -> None:
    tools = MCPToolkit(url=f"http://127.0.0.1:{silent_port}/mcp", timeout_s=1.5)
    started = time.monotonic()
    token = current_session_id.set("s3")
    try:
        result = await tools.acall({}, "anything")
    finally:
        current_session_id.reset(token)
    assert time.monotonic() - started < 5
    assert result.state == -1001 and "did not answer within 1.5s" in (result.errmsg or "")
    _ = asyncio  # keeps the import for readers running it by hand


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        MCPToolkit()
    with pytest.raises(ValueError, match="exactly one"):
        MCPToolkit(url="http://x/mcp", command=["srv"])
    with pytest.raises(ValueError, match="timeout_s"):
        MCPToolkit(url="http://x/mcp", timeout_s=0)
