"""Schemathesis over the live service's OpenAPI schema: ≥1,000 authenticated requests, no 5xx,
no response that violates the schema."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
)

from app.db.migrate import upgrade
from tests.app.conftest import KEY_A, make_settings
from tests.app.live import live_server

pytestmark = [pytest.mark.live, pytest.mark.slow]
AUTH = {"Authorization": f"Bearer {KEY_A}"}
CHECKS = [not_a_server_error, response_schema_conformance, content_type_conformance]
# Examples per operation and mode; operations without inputs stop after a few unique cases.
EXAMPLES = {GenerationMode.POSITIVE: 30, GenerationMode.NEGATIVE: 20}
MIN_REQUESTS = 1000


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    db = Path(tmp_path_factory.mktemp("fuzz")) / "fuzz.db"
    url = f"sqlite+aiosqlite:///{db}"
    upgrade(url)
    with live_server(make_settings(url, rate_limit=None)) as base:
        yield base


def seed(base: str, n: int) -> dict[str, str]:
    """Fresh objects for generated requests to hit besides the 404s: path parameter values."""
    agent, session = f"helper-{n}", f"s-{n}"
    with httpx.Client(base_url=base, headers=AUTH) as c:
        spec = {"kind": "agent", "model": "echo"}
        assert c.post("/v1/agents", json={"name": agent, "spec": spec}).status_code == 201
        assert c.post("/v1/sessions", json={"agent": agent, "id": session}).status_code == 201
        sent = c.post(f"/v1/sessions/{session}/messages", json={"message": "hi"})
        assert sent.status_code == 200
    run_id = sent.json()["run"]["id"]
    return {"name": agent, "session_id": session, "run_id": run_id, "model_id": "echo"}


class Recorder:
    """Sends each case, validates the response, and records failures instead of raising
    (so Hypothesis does not spend the budget shrinking one failure)."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.session = requests.Session()
        self.requests = 0
        self.statuses: Counter[int] = Counter()
        self.failures: list[str] = []

    def __call__(self, case: Any) -> None:
        response = case.call(base_url=self.base, session=self.session, headers=AUTH, timeout=30)
        self.requests += 1
        self.statuses[response.status_code] += 1
        try:
            case.validate_response(response, checks=CHECKS, headers=AUTH)
        except (Exception, FailureGroup) as exc:  # one error listing every failed check
            body = response.text[:300]
            self.failures.append(
                f"{case.method} {case.formatted_path} -> {response.status_code}: "
                f"{type(exc).__name__}: {str(exc)[:3000]} body={body!r}"
            )


def run_operation(strategy: Any, examples: int, record: Callable[[Any], None]) -> None:
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,  # the same cases every run: a CI failure reproduces locally
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def test(case: Any) -> None:
        record(case)

    test()


def test_fuzz_the_openapi_schema(base_url: str) -> None:
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json")
    record = Recorder(base_url)
    results = list(schema.get_all_operations())
    assert all(isinstance(r, Ok) for r in results), [r for r in results if not isinstance(r, Ok)]
    operations = [r.ok() for r in results if isinstance(r, Ok)]
    assert len(operations) >= 15, [op.label for op in operations]
    for n, operation in enumerate(operations):
        for mode, examples in EXAMPLES.items():
            try:
                run_operation(operation.as_strategy(generation_mode=mode), examples, record)
            except Unsatisfiable:
                # Nothing to make invalid (no parameters, no body): positive cases cover it.
                assert mode is GenerationMode.NEGATIVE, operation.label
        # Again on the seeded objects, so bodies and queries reach past the 404s.
        names = {p.name for p in operation.path_parameters}
        known = seed(base_url, n)  # fresh: an earlier DELETE may have removed the last ones
        if names and names <= known.keys():
            fixed = {name: known[name] for name in names}
            strategy = operation.as_strategy(path_parameters=fixed)
            run_operation(strategy, EXAMPLES[GenerationMode.POSITIVE], record)
    print(f"fuzz: {record.requests} requests, {len(operations)} operations, {record.statuses}")
    for failure in record.failures:
        if "-> 5" in failure:
            print(failure)
    report = json.dumps(record.failures[:20], indent=1)
    assert record.failures == [], f"{len(record.failures)} failures:\n{report}"
    assert record.requests >= MIN_REQUESTS, record.requests
    # Authenticated for real: most requests get past auth (401 only where a case sends its own
    # Authorization header).
    assert record.statuses[401] < record.requests / 4, record.statuses
    assert sum(n for code, n in record.statuses.items() if code < 300) >= 100, record.statuses
