"""The playground at ``/``: plain HTML/JS/CSS from app/static (no build step), plus the
vocabulary the page reads (run statuses, event types, kinds, tools) as a small script.

The page itself holds no secret: the user types an API key, kept in the browser's
localStorage, and the page calls the /v1 API with it like any client (docs/playground.md).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, Response

from app.errors import NotFound
from app.schemas.vocab import ACTIVE, EventType, RunStatus

STATIC = Path(__file__).resolve().parent.parent / "static"
_FILE = re.compile(r"^[a-z][a-z0-9-]*\.(html|js|css|svg|png)$")
_TYPES = {
    "html": "text/html; charset=utf-8",
    "js": "text/javascript; charset=utf-8",
    "css": "text/css; charset=utf-8",
    "svg": "image/svg+xml",
    "png": "image/png",
}
# The page only talks to this origin; nothing may frame it.
_HEADERS = {
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
}

# The agent loop's own actions (lagent's executor adds them itself): not tools a user adds.
INTERNAL_TOOLS = frozenset({"FinishAction", "InvalidAction", "NoAction"})
# Shown as "MCP servers" in the editor: one `mcp` tool per server, with its URL or command.
MCP_TOOL = "mcp"

router = APIRouter(include_in_schema=False)


def _file(name: str) -> FileResponse:
    path = STATIC / name
    if not _FILE.match(name) or not path.is_file():
        raise NotFound(f"no playground file {name!r}", param="name")
    ext = name.rsplit(".", 1)[1]
    return FileResponse(path, media_type=_TYPES[ext], headers=_HEADERS)


def vocabulary(registry: Any | None, trace_url: str | None = None) -> dict[str, Any]:
    """What the page needs to know of the server: event types, statuses, kinds, tools, and
    where a trace id links (``AGENTSTATION_TRACE_URL``, ``{trace_id}`` replaced; or None)."""
    return {
        "traceUrl": trace_url,
        "events": {e.name: e.value for e in EventType},
        "endsStream": sorted(e.value for e in EventType if e.ends_stream),
        "statuses": {s.name: s.value for s in RunStatus},
        "active": sorted(s.value for s in ACTIVE),
        "kinds": sorted(registry.kinds) if registry is not None else [],
        "tools": sorted(
            name
            for name in (registry.tools if registry is not None else ())
            if name not in INTERNAL_TOOLS and name != MCP_TOOL
        ),
    }


@router.get("/")
async def index() -> FileResponse:
    """The playground page."""
    return _file("index.html")


@router.get("/favicon.ico")
async def favicon() -> FileResponse:
    """The page's icon (browsers and tools ask for /favicon.ico; the page links the SVG)."""
    return _file("favicon.svg")


@router.get("/playground/vocab.js")
async def vocab(request: Request) -> Response:
    """``window.AGENTSTATION`` = the server's vocabulary (from app.schemas.vocab, the registry)."""
    state = getattr(request.app.state, "agentstation", None)
    settings = getattr(state, "settings", None)
    known = vocabulary(getattr(state, "registry", None), getattr(settings, "trace_url", None))
    body = "window.AGENTSTATION = " + json.dumps(known)
    return Response(body + ";\n", media_type=_TYPES["js"], headers=_HEADERS)


@router.get("/playground/{name}")
async def static_file(name: str) -> FileResponse:
    """A file of the page (app.js, style.css, …)."""
    return _file(name)
