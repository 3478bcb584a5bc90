"""The agent spec in the published OpenAPI document as the registry validates it.

``AgentSpec`` (app/schemas/agents.py) is one model for every kind; what a kind accepts is
checked by the registry (app/runtime/registry.py, app/runtime/builders.py) against this
server's kinds, models and tools. The document states those rules, so a schema-valid spec is
one the server stores (a fuzzer's valid request is not refused): ``AgentSpec`` becomes a
``oneOf`` of one variant per registered kind (discriminated by ``kind``; no ``kind`` means
``agent``) and one for a remote agent (``remote`` set: only its URL and key variable are
checked). Each kind's variant names the configured models (``model``, required where the kind
needs one), the registered tools (none for a kind without tools), the task fields only for
``task`` (whose ``agent`` is required), ``approval`` only for ``tool_agent``. Inline agents
(``sub_agents``, a task's ``agent`` and sub-tasks) are ``ParticipantSpec``: the same, without
approval (a run pauses for the agent a session talks to). What no schema can state stays a
documented 422 of the operation: names of stored agents (``unknown_agent``, ``agent_cycle``,
``agent_depth``), a task's responders and sub-task names, a tool's own config, the outbound
URL policy (it depends on DNS).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from app.runtime import builders
from app.runtime.registry import Registry

SPEC, PARTICIPANT = "AgentSpec", "ParticipantSpec"
_REF = "#/components/schemas/"
_NULL = {"type": "null"}
TASK_FIELDS = builders.TASK_FIELDS


def _rules(check: Any) -> tuple[tuple[str, ...], tuple[str, ...], bool] | None:
    """(fields refused, fields required, approval checked) of a kind's ``check`` (None: a
    check of a package's kind, whose rules the document does not know)."""
    if check is builders.check_single:
        return (*TASK_FIELDS, *builders.PROXY_FIELDS), (), True
    if check is builders.check_task:
        return builders.PROXY_FIELDS, ("agent",), True
    if check is builders.check_user_proxy:
        return TASK_FIELDS[1:], ("agent",), True
    return None


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, _NULL]}


def _retarget(value: Any, old: str, new: str) -> Any:
    """``value`` with every ``$ref`` to ``old`` pointing at ``new``."""
    text = json.dumps(value).replace(f'"{_REF}{old}"', f'"{_REF}{new}"')
    return json.loads(text)


def _variant(
    base: dict[str, Any],
    kind: str,
    registry: Registry,
    models: list[str],
    nested: bool,
) -> dict[str, Any]:
    info = registry.kinds[kind]
    props = copy.deepcopy(base["properties"])
    props["kind"] = {"type": "string", "const": kind, "title": "Kind"}
    model: dict[str, Any] = {"type": "string", "enum": sorted(models)} if models else {"not": {}}
    props["model"] = model if info.needs_model else _nullable(model)
    props["remote"] = _NULL
    props["api_key_env"] = _NULL
    tool = copy.deepcopy(props["tools"]["items"])
    if info.supports_tools:
        props["tools"] = {
            "type": "array",
            "title": "Tools",
            "items": {"$ref": f"{_REF}{'ParticipantToolRef' if nested else 'ToolRef'}"},
        }
    else:
        props["tools"] = {"type": "array", "maxItems": 0, "items": tool, "title": "Tools"}
    rules = _rules(info.check)
    refused, needed, approval = rules if rules is not None else ((), (), False)
    if approval and (nested or kind != "tool_agent"):
        props["approval"] = _NULL
    for name in refused:
        props[name] = _NULL
    required = [] if kind == "agent" else ["kind"]
    if info.needs_model:
        required.append("model")
    for name in needed:
        props[name] = {k: v for k, v in props[name].items() if k != "default"}
        props[name]["anyOf"] = [s for s in props[name]["anyOf"] if s != _NULL]
        required.append(name)
    variant: dict[str, Any] = {
        "type": "object",
        "title": f"kind {kind}",
        "properties": props,
        "additionalProperties": False,
    }
    if required:
        variant["required"] = required
    return variant


def _remote(base: dict[str, Any]) -> dict[str, Any]:
    props = copy.deepcopy(base["properties"])
    props["remote"] = {k: v for k, v in props["remote"]["anyOf"][0].items()}  # the URL, not null
    props["model"] = _nullable({"type": "string"})  # not this server's: not checked
    return {
        "type": "object",
        "title": "remote agent",
        "description": "An agent on another server, over A2A (docs/interop.md): only its URL "
        "(the outbound policy: 422 url_not_allowed) and api_key_env are checked.",
        "properties": props,
        "required": ["remote"],
        "additionalProperties": False,
    }


def agent_spec_schemas(schemas: dict[str, Any], registry: Registry, models: list[str]) -> None:
    """Replace ``AgentSpec`` in the document's component ``schemas`` by its variants, and add
    ``ParticipantSpec`` (inline agents) and ``ParticipantToolRef``."""
    base = schemas.get(SPEC)
    if base is None or "properties" not in base:
        return
    base = copy.deepcopy(base)
    # Sub-agent keys name memory keys' parts: not empty, no '.' (422 invalid_name).
    base["properties"]["sub_agents"]["propertyNames"] = {"minLength": 1, "pattern": r"^[^.]+$"}
    tool_ref = copy.deepcopy(schemas.get("ToolRef", {}))
    if tool_ref.get("properties"):
        tool_ref["properties"]["name"] = {
            "type": "string",
            "enum": sorted(registry.tools),
            "title": "Name",
        }
        schemas["ToolRef"] = tool_ref
        participant_tool = copy.deepcopy(tool_ref)
        participant_tool["properties"]["requires_approval"] = {"type": "boolean", "const": False}
        schemas["ParticipantToolRef"] = participant_tool
    flavour = _retarget(base, SPEC, PARTICIPANT)  # inline agents inside either: participants
    for name, nested in ((SPEC, False), (PARTICIPANT, True)):
        variants = [_variant(flavour, kind, registry, models, nested) for kind in registry.kinds]
        schemas[name] = {
            "title": name,
            "description": base.get("description", ""),
            "oneOf": [*variants, _remote(flavour)],
        }
    # A task's sub-tasks name participants too.
    if SPEC in json.dumps(schemas.get("SubTaskSpec", {})):
        schemas["SubTaskSpec"] = _retarget(schemas["SubTaskSpec"], SPEC, PARTICIPANT)
