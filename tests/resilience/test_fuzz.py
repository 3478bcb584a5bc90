"""Schemathesis over the service's own OpenAPI schema, in-process over ASGI on PostgreSQL: at
least 1,000 authenticated requests across every operation, no 5xx, no response that violates
the schema."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from hypothesis.strategies import SearchStrategy
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.errors import UnsupportedSchema
from schemathesis.core.failures import FailureGroup
from schemathesis.python import asgi
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
)

from app.main import create_app
from tests.app.conftest import KEY_A, make_settings

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

AUTH = {"authorization": f"Bearer {KEY_A}"}
CHECKS = [
    not_a_server_error,
    response_schema_conformance,
    content_type_conformance,
    response_headers_conformance,
]
# Examples per operation: positive cases reach the handlers, negative ones the validation.
EXAMPLES = {GenerationMode.POSITIVE: 40, GenerationMode.NEGATIVE: 20}
SEEDED_EXAMPLES = 30
MIN_REQUESTS = 1000


@pytest.fixture
def fuzz_app(shared_pg_url: str) -> Iterator[FastAPI]:
    """The app on a fresh PostgreSQL database (stricter than SQLite: no NUL in text, jsonb);
    schemathesis runs its lifespan in its own event loop thread."""
    app = create_app(make_settings(shared_pg_url, rate_limit=None))
    try:
        yield app
    finally:
        asgi.shutdown_lifespans()


def seed(client: requests.Session) -> dict[str, str]:
    """Real objects, so generated requests also reach past the 404s; path parameter values."""
    spec = {"kind": "agent", "model": "echo"}
    created = client.post("/v1/agents", json={"name": "helper", "spec": spec})
    assert created.status_code == 201, created.text
    session = client.post("/v1/sessions", json={"agent": "helper", "id": "s1"})
    assert session.status_code == 201, session.text
    sent = client.post("/v1/sessions/s1/messages", json={"message": "hi"})
    assert sent.status_code == 200, sent.text
    run_id = sent.json()["run"]["id"]
    return {"name": "helper", "session_id": "s1", "run_id": run_id, "model_id": "echo"}


class Recorder:
    """Sends each case and records failed checks instead of raising, so Hypothesis spends
    the budget exploring rather than shrinking one failure."""

    def __init__(self, client: requests.Session) -> None:
        self.client = client
        self.requests = 0
        self.statuses: Counter[int] = Counter()
        self.failures: dict[str, str] = {}
        self.unsupported: list[str] = []  # operations schemathesis could not negate

    def __call__(self, case: Any) -> None:
        response = case.call(session=self.client, timeout=30)
        self.requests += 1
        self.statuses[response.status_code] += 1
        try:
            case.validate_response(response, checks=CHECKS, headers=AUTH)
        except FailureGroup as exc:  # one group listing every failed check
            key = f"{case.method} {case.path} -> {response.status_code} {type(exc).__name__}"
            self.failures.setdefault(
                key,
                f"{case.as_curl_command(headers=AUTH)}\n{str(exc)[:600]}\n{response.text[:300]}",
            )


def explore(strategy: SearchStrategy[Any], examples: int, record: Recorder) -> None:
    """Draw ``examples`` cases from ``strategy`` (deterministically) and send each."""

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,  # the same cases every run: a CI failure reproduces locally
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def send(case: Any) -> None:
        record(case)

    send()


def _pin_model(body: dict[str, Any]) -> None:
    # Alternate the raw scripted model and the seeded agent, so both paths get real traffic.
    body["model"] = "helper" if len(body.get("messages") or []) % 2 else "echo"


def _pin_spec(body: dict[str, Any]) -> None:
    if isinstance(body.get("spec"), dict):
        body["spec"].update(kind="agent", model="echo")


# Bodies naming things that exist, so generated values reach the engine and the registry.
PINS: dict[str, Callable[[dict[str, Any]], None]] = {
    "POST /v1/chat/completions": _pin_model,
    "POST /v1/sessions": lambda body: body.update(agent="helper"),
    "POST /v1/agents": _pin_spec,
    "PUT /v1/agents/{name}": _pin_spec,
}


def pinned(op: Any, known: dict[str, str], headers: dict[str, str] | None) -> Any:
    """Positive cases on the seeded objects (path parameters and names in bodies); None when
    there is nothing to pin. No DELETE: the seeds must outlive the pass."""
    names = {p.name for p in op.path_parameters}
    if op.method.upper() == "DELETE" or not names <= known.keys():
        return None
    if not names and op.label not in PINS:
        return None
    fixed = {name: known[name] for name in names}
    pin = PINS.get(op.label)

    def apply(case: Any) -> Any:
        if pin is not None and isinstance(case.body, dict):
            pin(case.body)
        return case

    return op.as_strategy(path_parameters=fixed or None, headers=headers).map(apply)


def test_fuzz_every_operation(fuzz_app: FastAPI) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", fuzz_app)
    operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]
    assert len(operations) >= 20, [op.label for op in operations]
    with asgi.get_client(fuzz_app) as client:  # type: ignore[arg-type]
        client.headers.update(AUTH)
        known = seed(client)
        record = Recorder(client)
        for op in operations:
            headers = AUTH if op.path.startswith("/v1/") else None  # the bearer key
            for mode, examples in EXAMPLES.items():
                try:
                    explore(op.as_strategy(mode, headers=headers), examples, record)
                except Unsatisfiable:
                    # Nothing to make invalid (no parameters, no body): positive cases cover it.
                    assert mode is GenerationMode.NEGATIVE, op.label
                except UnsupportedSchema as exc:
                    # Schemathesis could not negate a part of this body's schema ("a `not` whose
                    # complement is not spelled out"): seen for POST /v1/agents only when the
                    # test ran after tests/kernel, with a byte-identical OpenAPI document. Its
                    # positive and seeded cases still run; any other operation or mode fails.
                    assert mode is GenerationMode.NEGATIVE, (op.label, exc)
                    record.unsupported.append(op.label)
            if (strategy := pinned(op, known, headers)) is not None:
                explore(strategy, SEEDED_EXAMPLES, record)
    print(f"fuzz: {record.requests} requests over {len(operations)} operations: {record.statuses}")
    assert len(record.unsupported) <= 1, record.unsupported  # never more than that one
    assert not record.failures, json.dumps(record.failures, indent=1)
    assert record.requests >= MIN_REQUESTS, record.requests
    # Authenticated for real: nearly every request gets past auth, and many succeed.
    assert record.statuses[401] < record.requests / 10, record.statuses
    assert sum(n for code, n in record.statuses.items() if code < 300) >= 50, record.statuses
