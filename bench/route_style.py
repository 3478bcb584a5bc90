"""Microbenchmark: what FastAPI's declared parameters cost per request, against the fast path.

``python -m bench.route_style [--n 20000]`` builds two routes on one bare app that do the same
work: parse a ``ChatCompletionRequest`` body, two optional headers and a bearer key, then answer
a constant response. ``declared`` declares them (a body model, ``Header()``s, a ``Depends``:
FastAPI solves them per request); ``fast`` is the gateway's style for its two hot routes
(``app/api/fastpath.py``: ``RequestOnlyRoute``, ``json_body``/``validated_body``, headers read
directly). Both are called through the ASGI app in-process (no sockets), alternating, and the
CPU time per request is printed. docs/architecture.md ("One route style") quotes the result.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Header, Request
from starlette.responses import Response

from app.api.fastpath import RequestOnlyRoute
from app.deps import json_body, validated_body
from app.schemas.openai import ChatCompletionRequest

BODY = json.dumps(
    {"model": "echo", "messages": [{"role": "user", "content": "hello there"}], "stream": False}
).encode()
HEADERS = [
    (b"content-type", b"application/json"),
    (b"authorization", b"Bearer key"),
    (b"x-session-id", b"s1"),
    (b"content-length", str(len(BODY)).encode()),
]


async def principal(authorization: Annotated[str | None, Header()] = None) -> str:
    return (authorization or "").removeprefix("Bearer ")


async def declared(
    body: ChatCompletionRequest,
    who: Annotated[str, Depends(principal)],
    x_session_id: Annotated[str | None, Header(max_length=128)] = None,
    x_multitask_strategy: Annotated[str | None, Header()] = None,
) -> Response:
    return Response(b"{}", media_type="application/json")


async def fast(request: Request) -> Response:
    data = await json_body(request)
    (request.headers.get("authorization") or "").removeprefix("Bearer ")
    request.headers.get("x-session-id")
    request.headers.get("x-multitask-strategy")
    validated_body(ChatCompletionRequest, data)
    return Response(b"{}", media_type="application/json")


def build() -> FastAPI:
    app = FastAPI()
    router = APIRouter()
    router.add_api_route("/declared", declared, methods=["POST"], response_model=None)
    # The same endpoint under FastAPI's own per-request handler (post_message's style before).
    router.add_api_route("/fast-fastapi-handler", fast, methods=["POST"], response_model=None)
    router.add_api_route(
        "/fast", fast, methods=["POST"], response_model=None, route_class_override=RequestOnlyRoute
    )
    app.include_router(router)
    return app


async def call(app: FastAPI, path: str) -> None:
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "headers": HEADERS, "client": ("127.0.0.1", 1), "server": ("t", 80),
    }  # fmt: skip
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": BODY, "more_body": False}

    status = 0

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)  # type: ignore[arg-type]
    assert status == 200, (path, status)


async def measure(n: int) -> dict[str, float]:
    app = build()
    totals = {"/declared": 0.0, "/fast-fastapi-handler": 0.0, "/fast": 0.0}
    for path in totals:  # warm up
        for _ in range(200):
            await call(app, path)
    rounds = 10
    gc.disable()
    try:
        for _ in range(rounds):  # alternating rounds: drift hits both alike
            for path in totals:
                start = time.process_time()
                for _ in range(n // rounds):
                    await call(app, path)
                totals[path] += time.process_time() - start
    finally:
        gc.enable()
    return {path: total / n * 1e6 for path, total in totals.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20000)
    args = parser.parse_args()
    result = asyncio.run(measure(args.n))
    saved = result["/declared"] - result["/fast"]
    for path, us in result.items():
        print(f"{path:22s} {us:7.1f} µs CPU per request")
    print(f"fast path saves {saved:.1f} µs per request ({saved / result['/declared']:.0%})")


if __name__ == "__main__":
    main()
