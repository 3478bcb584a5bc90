"""The gateway's one fast path for hot routes (``POST /v1/chat/completions`` and
``POST /v1/sessions/{id}/messages``); every other route is a plain FastAPI declaration.

Why it exists, and only there (docs/architecture.md, "One route style"): FastAPI solves a
route's declared body model, ``Header()``s and ``Depends`` on every request; on the two routes
that carry every turn that was the largest Python cost of a request (``python -m
bench.route_style`` measures it). A fast-path route instead

- reads its body with ``app.deps.json_body`` and validates it with ``validated_body`` (FastAPI's
  errors, located in the body), its key with ``app.deps.authenticate`` and its headers with
  plain reads, in FastAPI's order (JSON syntax, key, headers, body fields);
- is documented by ``documented(...)``, which writes the OpenAPI fragments FastAPI would
  write for the same declarations (no hand-copied fragments in the route modules);
- uses ``RequestOnlyRoute`` so that FastAPI's per-request handler is skipped too (the endpoint
  takes the ``Request`` and path parameters, returns a ``Response``), and FastAPI's per-request
  ASGI wrapper with it (two exit stacks for dependencies it has none of, and a second round of
  exception handling that the app's ``ExceptionMiddleware`` does with the same handlers).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi.routing import APIRoute, APIWebSocketRoute
from pydantic import BaseModel
from starlette._utils import get_route_path
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Mount, Route, Router, WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from app.deps import AUTHORIZATION_PARAMETER
from app.schemas.openai import inline_json_schema


def header_parameter(
    name: str, schema: dict[str, Any], description: str | None = None, titled: bool = True
) -> dict[str, Any]:
    """An optional header as FastAPI documents ``Header()`` (``title``: the header's name)."""
    entry: dict[str, Any] = {
        "name": name,
        "in": "header",
        "required": False,
        "schema": {**schema, "title": name} if titled else schema,
    }
    if description is not None:
        entry["description"] = description
    return entry


def documented(body: type[BaseModel], *headers: dict[str, Any]) -> dict[str, Any]:
    """``openapi_extra`` of a fast-path route: its headers, the key, and its JSON body."""
    return {
        "parameters": [*headers, AUTHORIZATION_PARAMETER],
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": inline_json_schema(body)}},
        },
    }


class RequestOnlyRoute(APIRoute):
    """A route whose endpoint takes the ``Request`` (and string path parameters) and returns a
    ``Response``: called directly, without FastAPI's per-request handler (solving the
    dependency list, building query params, checking the result), and without FastAPI's ASGI
    wrapper around it (``request_response``: the exit stacks of dependencies with ``yield``,
    which such a route has none of, and the exception handlers, which the app's
    ``ExceptionMiddleware`` then applies: the same handlers, the same responses). The same
    OpenAPI entry; an endpoint with any other parameter or dependency (e.g. one added by
    ``include_router``) gets FastAPI's own handler and wrapper.
    """

    _direct: Callable[[Request], Coroutine[Any, Any, Response]] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # calls get_route_handler (sets _direct if plain)
        if self._direct is not None:
            self.app = _direct_app(self._direct)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        d = self.dependant
        plain = (
            d.request_param_name is not None
            and not d.dependencies
            and all(p.field_info.annotation is str for p in d.path_params)
            and not (d.query_params or d.header_params or d.cookie_params)
            and not d.body_params
            and d.websocket_param_name is None
            and d.http_connection_param_name is None
            and d.response_param_name is None
            and d.background_tasks_param_name is None
            and d.security_scopes_param_name is None
            and inspect.iscoroutinefunction(self.endpoint)
        )
        if not plain:
            return super().get_route_handler()
        endpoint, name = self.endpoint, d.request_param_name
        path_names = [p.name for p in d.path_params]
        assert name is not None

        async def handler(request: Request) -> Response:
            params = {p: request.path_params[p] for p in path_names}
            response = await endpoint(**params, **{name: request})
            if not isinstance(response, Response):
                raise TypeError(f"{self.path}: the endpoint must return a Response")
            return response

        self._direct = handler
        return handler


def _direct_app(handler: Callable[[Request], Coroutine[Any, Any, Response]]) -> ASGIApp:
    """The route's ASGI app: the endpoint's response sent; exceptions go to the app's
    ``ExceptionMiddleware`` (its handlers, as FastAPI's wrapper would apply them)."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        response = await handler(Request(scope, receive, send))
        await response(scope, receive, send)

    return app


# --- Route lookup by path prefix -------------------------------------------------------------
#
# Starlette tries a router's routes in order, each a regex match (~1 µs with FastAPI's
# ``matches``): a turn's ``/v1/sessions/{id}/messages`` is the 30th route, ~110 Python calls of
# routing per request, a fifth of a ``POST /v1/sessions``'s calls. ``index_routes`` makes the
# router try only the routes that can match the request's path: those whose literal prefix
# (the path up to its first parameter) has the path's first two segments, plus those that
# could match any path (a shorter prefix, a mount at the root, a route without a path), in the
# router's order. Routes that cannot match answer ``NONE``, so the first ``FULL`` and the first
# ``PARTIAL`` (405) are the ones the whole list gives; anything else (404, a slash redirect,
# lifespan) goes to Starlette's own ``Router.app``, which scans every route as before.


def _path_key(path: str) -> str:
    """A path's first two segments: ``/v1/sessions/s1/messages`` -> ``/v1/sessions``."""
    return "/".join(path.split("/", 3)[:3])


def _route_prefix(route: BaseRoute) -> str:
    """What every path ``route`` can match starts with: its path up to its first parameter
    ("": any path; a host, or a kind of route not known here)."""
    if type(route) not in _BY_PATH:
        return ""
    path: str = getattr(route, "path", "")
    return path if "{" not in path else path[: path.index("{")]


def _may_match(route: BaseRoute, prefix: str, key: str) -> bool:
    """Whether ``route`` (its ``_route_prefix``) may match a path whose ``_path_key`` is
    ``key``."""
    if "{" not in getattr(route, "path", "{") and type(route) is not Mount:
        return _path_key(prefix) == key  # only this exact path
    if prefix.count("/") >= 3:  # two whole segments fixed
        return _path_key(prefix) == key
    return (key + "/").startswith(prefix)  # a longer key's paths start as the key does


class _RouteIndex:
    """The candidate routes of each path key, for one state of a router's route list."""

    def __init__(self, routes: list[BaseRoute]) -> None:
        self.routes, self.size = routes, len(routes)
        prefixes = [_route_prefix(r) for r in routes]
        self.by_key: dict[str, list[BaseRoute]] = {}
        for key in {_path_key(p) for p in prefixes if p.count("/") >= 2 or "{" not in p}:
            self.by_key[key] = [
                r for r, p in zip(routes, prefixes, strict=True) if _may_match(r, p, key)
            ]
        self.anywhere = routes  # a path of another key: every route, as Starlette tries them

    def fresh(self, routes: list[BaseRoute]) -> bool:
        return routes is self.routes and len(routes) == self.size


_BY_PATH = (Route, APIRoute, RequestOnlyRoute, WebSocketRoute, APIWebSocketRoute, Mount)


def index_routes(router: Router) -> None:
    """Route ``router``'s requests through the prefix index (rebuilt when its routes change).
    Only for a router without middleware of its own (its stack is its ``app``)."""
    if router.middleware_stack != router.app:
        return
    scan = router.app
    index = _RouteIndex(router.routes)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        nonlocal index
        if scope["type"] not in ("http", "websocket"):
            await scan(scope, receive, send)
            return
        if not index.fresh(router.routes):
            index = _RouteIndex(router.routes)
        if "router" not in scope:
            scope["router"] = router
        candidates = index.by_key.get(_path_key(get_route_path(scope)), index.anywhere)
        partial: tuple[BaseRoute, Scope] | None = None
        for route in candidates:
            match, child_scope = route.matches(scope)
            if match is Match.FULL:
                scope["route"] = route
                scope.update(child_scope)
                await route.handle(scope, receive, send)
                return
            if match is Match.PARTIAL and partial is None:
                partial = route, child_scope
        if partial is not None:
            scope["route"] = partial[0]
            scope.update(partial[1])
            await partial[0].handle(scope, receive, send)
            return
        await scan(scope, receive, send)  # 404 or a slash redirect: Starlette's full scan

    router.middleware_stack = app
