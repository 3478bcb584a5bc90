"""Structured logs: request and run ids on every line (contextvars); ``x-request-id`` in and out."""

from __future__ import annotations

import contextvars
import json
import logging
import os
import re
import sys
import time
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, TextIO

from starlette.types import ASGIApp, Message, Receive, Scope, Send

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "agentstation_request_id", default=None
)
run_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "agentstation_run_id", default=None
)

REQUEST_ID_HEADER = b"x-request-id"
# A client-supplied id is echoed into logs and headers: accept only short, plain tokens.
_VALID_REQUEST_ID = re.compile(rb"^[A-Za-z0-9._:\-]{1,128}$")
_ACCESS = logging.getLogger("agentstation.access")
# Attributes every LogRecord has; anything else on a record came from ``extra=`` and is logged.
_STANDARD_ATTRS = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys()
    | {"message", "asctime", "color_message"}  # uvicorn's copy of the message with ANSI colours
)
_HANDLER_MARK = "_agentstation_handler"


def get_request_id() -> str | None:
    """The id of the request this task serves, if any."""
    return request_id_var.get()


@contextmanager
def bind_run_id(run_id: str) -> Iterator[None]:
    """Tag every log line written inside with ``run_id`` (use at the top of a run's task)."""
    token = run_id_var.set(run_id)
    try:
        yield
    finally:
        run_id_var.reset(token)


class ContextFilter(logging.Filter):
    """Copy the request and run ids from contextvars onto each record."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        record.run_id = run_id_var.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message, request_id, run_id, extras."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None),
            "run_id": getattr(record, "run_id", None),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRS and key not in entry:
                entry[key] = value
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [req=%(request_id)s run=%(run_id)s] %(message)s"


def configure_logging(fmt: str = "text", level: str = "INFO", stream: TextIO | None = None) -> None:
    """Install one root handler (``json`` or ``text``); uvicorn's loggers propagate to it."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(ContextFilter())
    formatter = JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT)
    handler.setFormatter(formatter)
    setattr(handler, _HANDLER_MARK, True)
    root = logging.getLogger()
    # Replace only our own earlier handler, so test harnesses (pytest's caplog) keep theirs.
    for old in [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        # uvicorn installs its own plain-text handlers; route its lines through ours instead.
        uv_logger = logging.getLogger(name)
        uv_logger.handlers.clear()
        uv_logger.propagate = True


def _incoming_request_id(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == REQUEST_ID_HEADER:
            if _VALID_REQUEST_ID.match(value):
                return bytes(value).decode()
            break
    return os.urandom(16).hex()  # as unique as a uuid4, a quarter of the cost


class RequestIdMiddleware:
    """Bind a request id (the client's ``x-request-id`` or a new one) and return it."""

    def __init__(self, app: ASGIApp, access_log: bool = False) -> None:
        self.app = app
        self.access_log = access_log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _incoming_request_id(scope)
        header = (REQUEST_ID_HEADER, request_id.encode())
        status = 500
        start = time.perf_counter()

        def send_wrapper(message: Message) -> Awaitable[None]:
            # A plain function, not a coroutine: body messages (one per SSE event) go straight
            # to ``send`` without an extra coroutine frame; only the start message is touched.
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), header]
            return send(message)

        token = request_id_var.set(request_id)
        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            if self.access_log and _ACCESS.isEnabledFor(logging.INFO):
                _ACCESS.info(
                    "%s %s %d",
                    scope["method"],
                    scope["path"],
                    status,
                    extra={
                        "method": scope["method"],
                        "path": scope["path"],
                        "status": status,
                        "duration_ms": round((time.perf_counter() - start) * 1000, 2),
                    },
                )
            request_id_var.reset(token)
