"""The route index (app/api/fastpath.py, ``index_routes``): a request reaches the route, the
405 or the 404/redirect that Starlette's scan of every route gives, with fewer routes tried."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.routing import Match, Mount, Router

from app.api.fastpath import _path_key, _RouteIndex, index_routes
from app.main import create_app
from tests.app.conftest import make_agent, make_session

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")


def _scan(routes: list[Any], scope: dict[str, Any]) -> tuple[str, Any]:
    """What Starlette's ``Router.app`` picks: the first FULL match, else the first PARTIAL."""
    partial = None
    for route in routes:
        match, _ = route.matches(dict(scope))
        if match is Match.FULL:
            return "full", route
        if match is Match.PARTIAL and partial is None:
            partial = route
    return ("partial", partial) if partial is not None else ("none", None)


def _paths(app: FastAPI) -> list[str]:
    """Each route's path with its parameters filled, and variants around it."""
    out = ["/", "/nope", "/v1", "/v1/", "/v1/nope", "/v1/sessions/", "/a2a", "/playground"]
    for route in app.router.routes:
        path = getattr(route, "path", "/")
        filled = re.sub(r"\{[^}]*\}", "x1", path)
        out += [filled, filled + "/", filled + "/more", filled.rstrip("/") + "x"]
        if isinstance(route, Mount):
            out += [filled + "/message", filled + "/.well-known/agent.json"]
    return sorted(set(out))


def test_index_tries_what_the_scan_would_pick(settings_factory: Any) -> None:
    app = create_app(settings_factory())
    routes = app.router.routes
    index = _RouteIndex(routes)
    checked = 0
    for path in _paths(app):
        candidates = index.by_key.get(_path_key(path), index.anywhere)
        for method in METHODS:
            scope = {"type": "http", "path": path, "root_path": "", "method": method}
            want = _scan(routes, scope)
            got = _scan(candidates, scope)
            assert got == want, (method, path)
            checked += 1
    assert checked > 500
    # The hot routes: one candidate for chat, the session routes only for a turn.
    assert [r.path for r in index.by_key["/v1/chat"]] == ["/v1/chat/completions"]  # type: ignore[attr-defined]
    assert all(
        r.path.startswith("/v1/sessions")  # type: ignore[attr-defined]
        for r in index.by_key["/v1/sessions"]
    )


async def test_requests_through_the_index(client: httpx.AsyncClient, app: FastAPI) -> None:
    """Through the app: a turn, a 405, a 404 and a slash redirect as before; a route added
    after the app was built is found (the index follows the route list)."""
    await make_agent(client, model="poet")
    sid = await make_session(client)
    resp = await client.post(f"/v1/sessions/{sid}/messages", json={"message": "hi"})
    assert resp.status_code == 200, resp.text
    assert (await client.get(f"/v1/sessions/{sid}/messages")).status_code == 405
    assert (await client.get("/v1/nope")).status_code == 404
    assert (await client.post("/v1/sessions/", json={"agent": "x"})).status_code == 307
    assert (await client.get(f"/v1/sessions/{sid}")).json()["id"] == sid

    @app.get("/v1/sessions-late/{x}")
    async def late(x: str) -> dict[str, str]:
        return {"x": x}

    assert (await client.get("/v1/sessions-late/7")).json() == {"x": "7"}


def test_a_router_with_its_own_middleware_is_left_alone() -> None:
    class Passthrough:
        def __init__(self, app: Any) -> None:
            self.app = app

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await self.app(scope, receive, send)

    from starlette.middleware import Middleware

    router = Router(middleware=[Middleware(Passthrough)])
    stack = router.middleware_stack
    index_routes(router)
    assert router.middleware_stack is stack


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/a2a/x1/message", "/"])
def test_path_key(path: str) -> None:
    assert _path_key(path) == "/".join(path.split("/")[:3])
