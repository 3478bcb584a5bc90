"""``MCPToolkit``: the tools of a Model Context Protocol server, as one toolkit (official SDK).

    tools = MCPToolkit(url="http://127.0.0.1:9000/mcp", allow=["add", "search"])
    agent = AsyncToolAgent(llm, executor=[tools])        # the model sees mcp.add, mcp.search

A streamable-HTTP server (``url``, optional ``headers``) or a stdio server (``command``, run
through ``launch``: the service runs it inside the session's sandbox). The server's tools keep
their own names, descriptions and JSON Schemas; arguments are checked against the schema
before the call (a bad one is an ``ARGS_ERROR`` naming the field, as for any tool); a tool
error, a dead server and a server that does not answer within ``timeout_s`` are error
``ActionReturn``s, never a hung or crashed run. The tool list is cached for ``list_ttl_s``;
connections are kept per session (``agents.actions.mcp_conn.CONNECTIONS``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from agents.actions.base import OPENAI_SEPARATOR, BaseAction, current_session_id
from agents.actions.mcp_conn import CONNECTIONS, MCPConnectionError
from agents.schema import ActionReturn, ActionStatusCode
from agents.tracing import outgoing_headers

log = logging.getLogger(__name__)
# A stdio launcher: (session id, argv) -> (argv, env, cwd) to really run (e.g. in a sandbox).
Launch = Callable[[str, list[str]], Awaitable[tuple[list[str], dict[str, str], str | None]]]


class MCPToolkit(BaseAction):
    """A toolkit whose APIs are an MCP server's tools (``allow``: only these)."""

    def __init__(
        self,
        url: str | None = None,
        command: Sequence[str] | None = None,
        headers: dict[str, str] | None = None,
        allow: Sequence[str] | None = None,
        name: str = "mcp",
        timeout_s: float = 30.0,
        list_ttl_s: float = 60.0,
        url_check: Callable[[str], None] | None = None,
        launch: Launch | None = None,
    ) -> None:
        if (url is None) == (command is None):
            raise ValueError("give exactly one of url (streamable HTTP) or command (stdio)")
        if command is not None and (not command or not all(isinstance(c, str) for c in command)):
            raise ValueError("command must be a non-empty list of strings")
        if timeout_s <= 0 or list_ttl_s < 0:
            raise ValueError("timeout_s must be > 0 and list_ttl_s >= 0")
        self.url, self.command = url, list(command) if command else None
        self.headers = dict(headers or {})
        self.allow = set(allow) if allow is not None else None
        self.timeout_s, self.list_ttl_s = timeout_s, list_ttl_s
        self._url_check, self._launch = url_check, launch
        self._tools: dict[str, Any] = {}  # name -> mcp Tool
        self._listed_at = -1.0
        self._list_error: str | None = None
        identity = json.dumps([url, self.command, sorted(self.headers.items())])
        self.server_id = hashlib.sha256(identity.encode()).hexdigest()[:16]
        super().__init__(description={"name": name, "description": self._about(), "api_list": []})

    def _where(self) -> str:
        return self.url or " ".join(self.command or [])

    def _about(self) -> str:
        return f"Tools of the MCP server {self._where()}"

    # -- what the model sees --------------------------------------------------------------------
    @property
    def is_toolkit(self) -> bool:
        """Always a toolkit: one API per server tool (``mcp.add`` / ``mcp__add``)."""
        return True

    @property
    def list_error(self) -> str | None:
        """Why the last listing of the server's tools failed (None: it did not)."""
        return self._list_error

    def api_names(self) -> list[str]:
        """The server's (allowed) tool names, as last listed."""
        return list(self._tools)

    def tool_schemas(self, separator: str = OPENAI_SEPARATOR) -> list[dict[str, Any]]:
        """OpenAI ``tools`` entries with the server's own schemas."""
        return [
            {
                "type": "function",
                "function": {
                    "name": f"{self.name}{separator}{tool.name}",
                    "description": tool.description or "",
                    "parameters": tool.input_schema,
                },
            }
            for tool in self._tools.values()
        ]

    # -- the server -----------------------------------------------------------------------------
    async def _open(self, session: str) -> Any:
        """A new ``mcp.Client`` (not entered) for this server; stdio servers are launched
        through ``launch`` (the service: in the session's sandbox)."""
        from mcp import Client

        if self.url is not None:
            import asyncio

            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            if self._url_check is not None:
                await asyncio.to_thread(self._url_check, self.url)
            url = self.url

            @contextlib.asynccontextmanager
            async def over_http() -> AsyncIterator[Any]:
                # The SDK leaves a client it is given open: this one closes with the session.
                async with httpx2.AsyncClient(headers=self.headers, timeout=self.timeout_s) as http:
                    transport = streamable_http_client(url, http_client=http)
                    async with Client(
                        transport, read_timeout_seconds=self.timeout_s, mode="legacy"
                    ) as client:
                        yield client

            return over_http()
        from mcp.client.stdio import StdioServerParameters

        command = list(self.command or [])
        argv, env, cwd = (
            await self._launch(session, command)
            if self._launch is not None
            else (command, {}, None)
        )
        params = StdioServerParameters(command=argv[0], args=argv[1:], env=env or None, cwd=cwd)
        return Client(params, read_timeout_seconds=self.timeout_s, mode="legacy")

    async def _conn(self, session: str) -> Any:
        return await CONNECTIONS.get(
            session, self.server_id, lambda: self._open(session), self.timeout_s, self._where()
        )

    async def aprepare(self, session_id: Any = 0) -> None:
        """(Re)list the server's tools when the cached list is older than ``list_ttl_s``."""
        if self._listed_at >= 0 and time.monotonic() - self._listed_at < self.list_ttl_s:
            return
        try:
            conn = await self._conn(str(session_id))
            listed = await conn.call(lambda c: c.list_tools(), self.timeout_s)
        except Exception as exc:  # the model sees no tools of it; calls explain why
            log.warning("MCP server %s: cannot list tools: %s", self._about(), exc)
            self._list_error = f"{type(exc).__name__}: {exc}"
            return
        self._list_error = None
        self._tools = {
            t.name: t for t in listed.tools if self.allow is None or t.name in self.allow
        }
        self._listed_at = time.monotonic()
        self._description["api_list"] = [
            {"name": t.name, "description": t.description or "", "parameters": t.input_schema}
            for t in self._tools.values()
        ]

    async def acall(self, inputs: str | dict[str, Any] | None, name: str = "run") -> ActionReturn:
        """Call tool ``name`` with JSON arguments; never raises."""
        session = str(current_session_id.get())
        await self.aprepare(session)
        label = f"{self.name}.{name}"
        tool = self._tools.get(name)
        if tool is None:
            why = self._list_error if not self._tools else None
            known = ", ".join(self._tools) or "none"
            msg = f"tool '{self.name}' has no API '{name}' (available: {known})"
            return self._error({"inputs": inputs}, f"{msg}; {why}" if why else msg,
                               ActionStatusCode.ARGS_ERROR)  # fmt: skip
        try:
            args = _arguments(inputs, tool.input_schema, label)
        except ValueError as exc:
            return self._error({"inputs": inputs}, str(exc), ActionStatusCode.ARGS_ERROR)
        try:
            conn = await self._conn(session)
            # The trace context, when tracing is on: in ``params._meta`` (MCP's place for it,
            # over stdio and HTTP alike).
            meta = outgoing_headers({}) or None
            result = await conn.call(lambda c: c.call_tool(name, args, meta=meta), self.timeout_s)
        except (MCPConnectionError, Exception) as exc:
            return self._error(args, f"{label} failed: {exc}", ActionStatusCode.API_ERROR)
        items = _items(result)
        if result.is_error:
            text = "\n".join(str(i["content"]) for i in items) or "the tool failed"
            return self._error(args, text, ActionStatusCode.API_ERROR)
        return ActionReturn(args=args, type=self.name, result=items)


def _arguments(inputs: str | dict[str, Any] | None, schema: dict[str, Any], label: str) -> Any:
    """The call's arguments as a dict, checked against the tool's JSON Schema."""
    import jsonschema

    if inputs is None:
        args: Any = {}
    elif isinstance(inputs, dict):
        args = inputs
    else:
        try:
            args = json.loads(inputs)
        except json.JSONDecodeError as exc:
            raise ValueError(f"invalid JSON arguments for {label}: {exc}") from None
    if not isinstance(args, dict):
        raise ValueError(f"arguments for {label} must be a JSON object")
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(args), key=str)
    if errors:
        problems = [
            f"argument '{'.'.join(str(p) for p in e.absolute_path) or 'arguments'}': {e.message}"
            for e in errors
        ]
        raise ValueError(f"invalid arguments for {label}: " + "; ".join(problems))
    return args


def _items(result: Any) -> list[dict[str, Any]]:
    """An MCP result's content as ActionReturn items (text, images, structured JSON)."""
    items: list[dict[str, Any]] = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            items.append({"type": "text", "content": block.text})
        elif kind == "image":
            items.append(
                {"type": "image", "content": f"data:{block.mime_type};base64,{block.data}"}
            )
        else:
            items.append({"type": kind or "unknown", "content": block.model_dump_json()})
    if result.structured_content is not None and not items:
        items.append({"type": "text", "content": json.dumps(result.structured_content)})
    return items
