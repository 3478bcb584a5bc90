"""Schemathesis hooks for tests/contract/test_schemathesis.py, loaded by its CLI run
(``SCHEMATHESIS_HOOKS=tests.contract.hooks``).

- About half the positive cases are pointed at objects that exist (agents of every kind, a
  remote one among them, bound by name; their sessions; a run; configured model names), so
  the success paths are reached, not only the 404s; DELETEs
  get throw-away objects, and no DELETE ever names the others, so they outlive the run.
  Negative cases, and the stateful phase (it chains what it created itself), are left alone.
- Every response is counted by status (written to ``$CONTRACT_STATS`` at exit).
- ``positive_data_acceptance`` failures are dropped only where the server's answer names a
  field whose value must name something that exists (see ``STATE_CODES``).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import threading
import zlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import schemathesis

SEEDS: dict[str, Any] = json.loads(os.environ.get("CONTRACT_SEEDS", "{}"))
STATS_PATH = os.environ.get("CONTRACT_STATS")

# A schema-valid request can still name something that does not exist; JSON Schema cannot say
# which names exist (they are stored objects, or depend on the configuration and the agent),
# so ``positive_data_acceptance``'s premise (valid => 2xx, 404 or 409) does not hold for these
# answers. The server's answer names the field and one of these codes; any other rejection of
# a schema-valid request still fails the test.
STATE_CODES = frozenset(
    {
        # What the document states (kinds, models, tools, the fields each kind takes or
        # needs, sub-agent keys: app/openapi_specs.py) is not here: a schema-valid spec is
        # stored.
        "invalid_cursor",  # ?after= names no item of the list
        "unknown_agent",  # a stored agent's name (POST /v1/sessions, a spec's participants)
        "invalid_tool_config",  # a tool's constructor rejects its config
        "unknown_memory_key",  # PUT memory: the keys are the session's agent's own
        "unsupported_parameter",  # chat: a field the named model (an agent) does not take
        # Stored agents a spec names and their nesting, a task's responders and sub-task
        # names (across fields), and the outbound URL policy (it depends on DNS).
        "agent_cycle",
        "agent_depth",
        "unknown_responder",
        "duplicate_name",
        "url_not_allowed",
        # The Responses API: a finished response cannot be cancelled (OpenAI's 400).
        "response_not_cancellable",
    }
)

_lock = threading.Lock()
_statuses: Counter[int] = Counter()
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]*$")


def _cycle(values: list[str]) -> Iterator[str]:
    yield from values
    while True:
        yield values[-1] if values else "none"


_throwaway = {
    "name": _cycle(SEEDS.get("throwaway_agents", [])),
    "session_id": _cycle(SEEDS.get("throwaway_sessions", [])),
}


def _heads(case: Any) -> bool:
    """A deterministic coin per case (Python's hash() is salted per process)."""
    key = json.dumps([case.path_parameters, case.query, case.body], default=str, sort_keys=True)
    return zlib.crc32(key.encode()) % 2 == 0


def _name(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 128 and bool(_NAME.match(value))


def _tool_configs(spec: Any) -> None:
    """Empty tool configs (depth-first): the kinds, models and tools a generated spec names
    are this server's already (the document enumerates them, app/openapi_specs.py), but a
    tool's own config is checked by its constructor (``invalid_tool_config``). The spec stays
    valid against the document."""
    if not isinstance(spec, dict):
        return
    for tool in spec.get("tools") or []:
        if isinstance(tool, dict) and isinstance(tool.get("config"), dict):
            tool["config"] = {}
    children = [*(spec.get("sub_agents") or {}).values(), spec.get("agent")]
    children += [t.get("agent") for t in spec.get("sub_tasks") or [] if isinstance(t, dict)]
    for child in children:
        _tool_configs(child)


def _pick(values: list[str], key: Any) -> str:
    """One of ``values``, chosen by ``key`` (deterministic, spread over the values)."""
    digest = zlib.crc32(json.dumps(key, default=str, sort_keys=True).encode())
    return values[digest % len(values)]


def _pin_body(label: str, body: Any, heads: bool) -> None:
    if not isinstance(body, dict):
        return
    if label in ("POST /v1/agents", "PUT /v1/agents/{name}"):
        _tool_configs(body.get("spec"))
    elif label == "POST /v1/agents/{name}/rollback" and heads:
        body["version"] = 1  # the seeded agent's first version
    elif label == "POST /v1/sessions" and _name(body.get("agent")):
        body["agent"] = _pick(SEEDS.get("agents") or [SEEDS["agent"]], body)
    elif label == "POST /v1/chat/completions" and _name(body.get("model")):
        # An agent answers a conversation that ends with the user's turn (a raw model any).
        messages = body.get("messages")
        last = messages[-1] if isinstance(messages, list) and messages else {}
        to_agent = heads and isinstance(last, dict) and last.get("role") == "user"
        agents = SEEDS.get("agents") or [SEEDS["agent"]]  # every kind, the remote one too
        body["model"] = _pick(agents, body) if to_agent else SEEDS["model"]
    elif label == "POST /v1/responses" and _name(body.get("model")):
        body["model"] = SEEDS["agent"] if heads else SEEDS["model"]
    elif label == "PUT /v1/sessions/{session_id}/memory" and body:
        entries = next(iter(body.values()))
        body.clear()
        body["memory"] = entries


# ?after= on the lists: an item that exists.
def _after(path: str) -> str | None:
    """?after= on a list: an item that exists."""
    return {
        "/v1/agents": SEEDS["agent"],
        "/v1/sessions": SEEDS["sessions"][0],
        "/v1/sessions/{session_id}/runs": SEEDS["run"],
        "/v1/agents/{name}/versions": "1",
    }.get(path)


@schemathesis.hook
def filter_case(context: Any, case: Any) -> bool:
    """No DELETE of the seeded agent or sessions."""
    if case.operation.method.upper() != "DELETE":
        return True
    kept = {
        SEEDS["agent"],
        *SEEDS.get("agents", []),
        *SEEDS["sessions"],
        SEEDS.get("response"),
        SEEDS.get("conversation"),
    }
    return not set(map(str, (case.path_parameters or {}).values())) & kept


@schemathesis.hook
def map_case(context: Any, case: Any) -> Any:
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or meta.phase.name == "stateful":
        return case
    heads = _heads(case)
    label = f"{case.operation.method.upper()} {case.operation.path}"
    _pin_body(label, case.body, heads)
    if not heads:
        return case
    delete = case.operation.method.upper() == "DELETE"
    params = dict(case.path_parameters or {})
    for name in params:
        if delete and name in _throwaway:
            with _lock:
                params[name] = next(_throwaway[name])
        elif name == "name":
            params[name] = SEEDS["agent"]
        elif name == "session_id":
            params[name] = SEEDS["sessions"][len(str(params[name])) % len(SEEDS["sessions"])]
        elif name == "run_id":
            params[name] = SEEDS["run"]
        elif name == "model_id":
            params[name] = SEEDS["model"]
        elif name == "response_id" and not delete and SEEDS.get("response"):
            params[name] = SEEDS["response"]
        elif name == "conversation_id" and not delete and SEEDS.get("conversation"):
            params[name] = SEEDS["conversation"]
        elif name == "version":  # the seeded agent's first version
            params[name] = "1"
    case.path_parameters = params
    query = case.query
    if isinstance(query, dict):
        if isinstance(query.get("agent"), str):
            query["agent"] = SEEDS["agent"]
        after = _after(case.operation.path)
        if after is not None and isinstance(query.get("after"), str):
            query["after"] = after
    return case


@schemathesis.hook
def after_call(context: Any, case: Any, response: Any) -> None:
    with _lock:
        _statuses[response.status_code] += 1


@schemathesis.hook
def filter_failure(context: Any, failure: Any, case: Any, response: Any) -> bool:
    """Keep every failure but a rejected positive case answered with a ``STATE_CODES`` code."""
    if type(failure).__name__ != "RejectedPositiveData":
        return True
    try:
        code = json.loads(response.content)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return True
    return code not in STATE_CODES


@atexit.register
def _write_stats() -> None:
    if STATS_PATH:
        with _lock, open(STATS_PATH, "w") as out:
            json.dump({str(k): v for k, v in sorted(_statuses.items())}, out)
