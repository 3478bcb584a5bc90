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

from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response
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
