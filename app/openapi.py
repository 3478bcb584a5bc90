"""The published OpenAPI document (``/openapi.json``), made to say what the service does.

FastAPI documents each route's signature; the service answers more than that. ``install``
post-processes the generated document once (then FastAPI caches it):

- every operation lists each error status it can answer, naming the codes, with the body the
  service really sends: ``ErrorEnvelope`` (the OpenAI envelope, ``app.errors``), not FastAPI's
  ``HTTPValidationError``, which the service never sends;
- ``/v1`` operations declare the bearer key as a security scheme, not as an ``authorization``
  header parameter (OpenAPI ignores header parameters of that name);
- a body an endpoint validates itself is described as it is validated (``BODIES``);
- path parameters have the format of the ids they name (``PATH_PARAMETERS``; one that does not
  match names nothing: 404).

The error table of docs/api.md lists the same codes; tests/contract checks both against a live
server with schemathesis.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fastapi import FastAPI
from pydantic import TypeAdapter

from app.errors import ErrorEnvelope
from app.openapi_specs import agent_spec_schemas
from app.runtime.registry import Registry
from app.schemas.common import NAME_MAX_LENGTH, NAME_PATTERN
from app.schemas.sessions import MemoryState

Codes = Mapping[int, tuple[str, ...]]

SECURITY_SCHEME = "bearerAuth"
ERROR_SCHEMA = "ErrorEnvelope"
_ERROR_REF = {"$ref": f"#/components/schemas/{ERROR_SCHEMA}"}

# Every /v1 operation: the key, the rate limit (when configured), the database.
_V1: Codes = {
    401: ("invalid_api_key",),
    429: ("rate_limit_exceeded",),
    503: ("database_unavailable",),
}
# An operation with a JSON body (text with a NUL character: PostgreSQL cannot store it, 400).
_BODY: Codes = {
    400: ("invalid_json", "invalid_body", "invalid_value"),
    413: ("payload_too_large",),
    422: ("invalid_value", "missing_field"),
}
_PATH: Codes = {404: ("not_found",)}
_QUERY: Codes = {422: ("invalid_value", "missing_field")}
_PAGED: Codes = {400: ("invalid_cursor",)}
# A spec is checked against the registry and the configured models (app.runtime.registry).
# A spec is checked against the registry and the configured models (app.runtime.registry; the
# document's ``AgentSpec`` states those rules, app/openapi_specs.py), and against what no schema
# states: the tenant's stored agents it names, a task's responders and sub-task names, a tool's
# own config, the outbound URL policy (DNS).
_SPEC: Codes = {
    422: (
        "unknown_kind",
        "unknown_model",
        "tools_not_supported",
        "unknown_tool",
        "invalid_tool_config",
        "missing_field",
        "not_supported",
        "invalid_name",
        "unknown_agent",
        "agent_cycle",
        "agent_depth",
        "unknown_responder",
        "duplicate_name",
        "url_not_allowed",
    )
}
_BUSY: Codes = {409: ("session_busy",)}
_TURN: Codes = {
    409: ("session_busy",),
    429: ("budget_exceeded",),
    503: ("model_not_ready", "engine_unavailable"),
}
# /v1/chat/completions answers every invalid body with 400, as OpenAI does; an upstream model
# (``openai`` backend) that refuses the request passes its status on as ``upstream_error``.
_CHAT: Codes = {
    400: (
        "invalid_json",
        "invalid_body",
        "invalid_value",
        "missing_field",
        "invalid_request",
        "context_length_exceeded",
        "unsupported_parameter",
        "upstream_error",
    ),
    404: ("model_not_found",),
    409: ("session_busy", "run_not_waiting"),
    413: ("payload_too_large", "upstream_error"),
    422: ("upstream_error",),
    429: ("budget_exceeded",),
    503: (
        "model_not_ready",
        "engine_unavailable",
        "run_failed",
        "run_cancelled",
        "run_interrupted",
    ),
}

# The Responses API (docs/responses.md): OpenAI's statuses (400 for any invalid request).
_RESPONSE_404: Codes = {404: ("response_not_found",)}
_CONVERSATION_404: Codes = {404: ("conversation_not_found",)}
_INVALID_BODY = (
    "invalid_json",
    "invalid_body",
    "invalid_value",
    "missing_field",
    "invalid_request",
)
_RESPONSES: dict[str, Codes] = {
    "POST /v1/responses": {
        400: (*_INVALID_BODY, "not_supported", "unknown_tool"),
        404: ("model_not_found", "response_not_found", "conversation_not_found"),
        409: ("session_busy", "run_not_waiting"),
        429: ("budget_exceeded",),
        503: ("model_not_ready", "engine_unavailable"),
    },
    "GET /v1/responses/{response_id}": {**_RESPONSE_404, 400: ("invalid_value",)},
    "DELETE /v1/responses/{response_id}": _RESPONSE_404,
    "POST /v1/responses/{response_id}/cancel": {
        **_RESPONSE_404,
        400: ("response_not_cancellable",),
    },
    "GET /v1/responses/{response_id}/input_items": {
        **_RESPONSE_404,
        400: ("invalid_value", "invalid_cursor", "invalid_request"),
    },
    "POST /v1/conversations": {400: _INVALID_BODY},
    "GET /v1/conversations/{conversation_id}": _CONVERSATION_404,
    "POST /v1/conversations/{conversation_id}": {**_CONVERSATION_404, 400: _INVALID_BODY},
    "DELETE /v1/conversations/{conversation_id}": _CONVERSATION_404,
    "GET /v1/conversations/{conversation_id}/items": {
        **_CONVERSATION_404,
        400: ("invalid_value", "invalid_cursor", "invalid_request"),
    },
    "POST /v1/conversations/{conversation_id}/items": {
        **_CONVERSATION_404,
        400: _INVALID_BODY,
        409: ("session_busy",),
    },
}

# What each operation answers beyond the rules (``_V1``, ``_BODY``, ``_PATH``, ``_QUERY``).
EXTRA: dict[str, Codes] = {
    "GET /v1/models/{model_id}": {404: ("model_not_found",)},
    "POST /v1/chat/completions": _CHAT,
    "POST /v1/agents": {409: ("agent_exists",), **_SPEC},
    "GET /v1/agents": _PAGED,
    "PUT /v1/agents/{name}": _SPEC,
    "GET /v1/agents/{name}/versions": _PAGED,
    "POST /v1/agents/{name}/rollback": _SPEC,  # the old spec is validated again
    "POST /v1/sessions": {409: ("session_exists",), 422: ("unknown_agent",)},
    "GET /v1/sessions": {**_PAGED, 404: ("not_found",)},  # ?agent= names no agent
    "PUT /v1/sessions/{session_id}/memory": {
        **_BUSY,
        422: ("unknown_memory_key", "invalid_message"),
    },
    "POST /v1/sessions/{session_id}/reset": _BUSY,
    "GET /v1/sessions/{session_id}/runs": _PAGED,
    "POST /v1/sessions/{session_id}/messages": _TURN,
    # A decision about a waiting run (docs/approvals.md).
    "POST /v1/runs/{run_id}/resume": {
        409: ("run_not_waiting",),
        422: ("unknown_tool_call", "duplicate_decision", "missing_decision", "invalid_arguments"),
        503: ("model_not_ready",),
    },
    **_RESPONSES,
}
_NAME = {"type": "string", "minLength": 1, "maxLength": NAME_MAX_LENGTH, "pattern": NAME_PATTERN}
PATH_PARAMETERS: dict[str, dict[str, Any]] = {
    "name": _NAME,  # an agent's name
    "session_id": _NAME,
    # app.db.base.new_id; a response's run is named resp_<K><R> (app.services.responses_ids)
    "run_id": {"type": "string", "pattern": "^(run|resp)_[0-9a-f]{32}$"},
    "model_id": {"type": "string", "minLength": 1},  # an agent's or a configured model's name
    "version": {"type": "string", "pattern": "^[1-9][0-9]{0,9}$"},  # an agent's version number
    "response_id": {"type": "string", "minLength": 1, "maxLength": 128},
    "conversation_id": {"type": "string", "minLength": 1, "maxLength": 128},
}

# Bodies the service validates itself, beyond what the route declares.
BODIES: dict[str, Any] = {"PUT /v1/sessions/{session_id}/memory": MemoryState}

# Chat completions: FastAPI's 422 is answered as a 400 there (app.errors).
_NO_422 = {"POST /v1/chat/completions", *_RESPONSES}


def error_codes(label: str, operation: dict[str, Any]) -> dict[int, tuple[str, ...]]:
    """The error statuses of one operation (``"METHOD /path"``) and the codes of each."""
    path = label.split(" ", 1)[1]
    rules: list[Codes] = []
    if path.startswith("/v1/"):
        rules.append(_V1)
    if "requestBody" in operation:
        rules.append(_BODY)
    located = {p.get("in") for p in operation.get("parameters", [])}
    if "path" in located:
        rules.append(_PATH)
    if located & {"query", "header"}:
        rules.append(_QUERY)
    rules.append(EXTRA.get(label, {}))
    merged: dict[int, tuple[str, ...]] = {}
    for rule in rules:
        for status, codes in rule.items():
            merged[status] = tuple(dict.fromkeys(merged.get(status, ()) + codes))
    if label in _NO_422:
        moved = tuple(c for c in merged.pop(422, ()) if c == "upstream_error")
        merged[400] = tuple(dict.fromkeys(merged.get(400, ()) + moved))
        if moved:
            merged[422] = moved
    return dict(sorted(merged.items()))


def _error_response(codes: tuple[str, ...]) -> dict[str, Any]:
    return {
        "description": "Error: " + ", ".join(f"`{c}`" for c in codes),
        "content": {"application/json": {"schema": _ERROR_REF}},
    }


def _security(operation: dict[str, Any], anonymous: bool) -> None:
    """The key as a security requirement, not a header parameter."""
    params = [p for p in operation.get("parameters", []) if p.get("name") != "authorization"]
    if params:
        operation["parameters"] = params
    else:
        operation.pop("parameters", None)
    operation["security"] = [{SECURITY_SCHEME: []}, *([{}] if anonymous else [])]


def _path_parameters(operation: dict[str, Any]) -> None:
    for param in operation.get("parameters", []):
        if param.get("in") == "path" and param["name"] in PATH_PARAMETERS:
            param["schema"] = {**PATH_PARAMETERS[param["name"]], "title": param["schema"]["title"]}


def _body(operation: dict[str, Any], kind: Any, schemas: dict[str, Any]) -> None:
    schema = TypeAdapter(kind).json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(schema.pop("$defs", {}))
    content = operation["requestBody"]["content"]["application/json"]
    content["schema"] = schema


def truthful(document: dict[str, Any], anonymous: bool = False) -> dict[str, Any]:
    """``document`` (FastAPI's) with the service's real errors and security."""
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    envelope = ErrorEnvelope.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(envelope.pop("$defs", {}))
    schemas[ERROR_SCHEMA] = envelope
    document["components"]["securitySchemes"] = {
        SECURITY_SCHEME: {
            "type": "http",
            "scheme": "bearer",
            "description": "An API key: `Authorization: Bearer <key>` (docs/api.md).",
        }
    }
    for path, item in document.get("paths", {}).items():
        for method, operation in item.items():
            label = f"{method.upper()} {path}"
            if path.startswith("/v1/"):
                _security(operation, anonymous)
            _path_parameters(operation)
            if label in BODIES:
                _body(operation, BODIES[label], schemas)
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            for status, codes in error_codes(label, operation).items():
                responses[str(status)] = _error_response(codes)
    return document


def install(
    app: FastAPI,
    anonymous: bool = False,
    specs: Callable[[], tuple[Registry, list[str]]] | None = None,
) -> None:
    """Serve the truthful document at /openapi.json (built once, on first use). ``specs``:
    this server's registry and model names, for the agent spec's variants
    (app/openapi_specs.py)."""
    generate: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = truthful(generate(), anonymous)
            if specs is not None:
                registry, models = specs()
                agent_spec_schemas(document["components"]["schemas"], registry, models)
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
