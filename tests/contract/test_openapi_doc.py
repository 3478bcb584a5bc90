"""The OpenAPI document's shape (fast, in-process): errors in the service's envelope on every
operation, the key as a security scheme, 405s whose Allow lists the path's methods, and
docs/api.md naming every error code the service answers with. The live check against the
running service is test_schemathesis.py."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.db.migrate import upgrade
from app.main import create_app
from app.openapi import EXTRA, error_codes
from app.runtime.builders import default_registry
from tests.app.conftest import KEY_A, make_settings
from tests.lifespan import LifespanManager

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'doc.db'}"
    await asyncio.to_thread(upgrade, url)
    app = create_app(make_settings(url))
    async with LifespanManager(app):
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {KEY_A}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://t", headers=headers
        ) as c:
            yield c


def operations(document: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{method.upper()} {path}", operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
    ]


async def test_every_error_is_the_envelope(client: httpx.AsyncClient) -> None:
    document = (await client.get("/openapi.json")).json()
    text = json.dumps(document)
    assert "HTTPValidationError" not in text
    # Bounds as JSON Schema spells them (pydantic leaves "ge" where it cannot map a constraint).
    assert not re.search(r'"(ge|le|gt|lt)": ', text)
    envelope = {"$ref": "#/components/schemas/ErrorEnvelope"}
    assert document["components"]["schemas"]["ErrorEnvelope"]["required"] == ["error"]
    labels = set()
    for label, operation in operations(document):
        labels.add(label)
        responses = operation["responses"]
        errors = {int(s): r for s, r in responses.items() if int(s) >= 400}
        if label.split(" ")[1].startswith("/v1/"):
            assert {401, 429, 503} <= errors.keys(), label
            assert operation["security"] == [{"bearerAuth": []}], label
            assert "authorization" not in {p["name"] for p in operation.get("parameters", [])}
            for status, response in errors.items():
                assert response["content"]["application/json"]["schema"] == envelope, label
                assert all(
                    f"`{code}`" in response["description"]
                    for code in error_codes(label, operation)[status]
                ), label
        if "requestBody" in operation:
            assert {400, 413} <= errors.keys(), label
        if "{" in label:
            assert 404 in errors, label
    assert set(EXTRA) <= labels  # no table entry for an operation that is gone


async def test_405_allow_lists_every_method_of_the_path(client: httpx.AsyncClient) -> None:
    for path, allowed in [
        ("/v1/agents", "GET, POST"),
        ("/v1/agents/x", "DELETE, GET, PUT"),
        ("/v1/sessions/x/memory", "GET, PUT"),
    ]:
        resp = await client.request("OPTIONS", path)
        assert resp.status_code == 405, resp.text
        assert resp.headers["allow"] == allowed, path
        assert resp.json()["error"]["code"] == "method_not_allowed"


async def test_paging_bounds_are_the_documented_ones(client: httpx.AsyncClient) -> None:
    for query, param in [("limit=0", "limit"), ("limit=101", "limit"), ("after=", "after")]:
        resp = await client.get(f"/v1/sessions?{query}")
        assert resp.status_code == 422, resp.text
        assert resp.json()["error"]["param"] == param
    document = (await client.get("/openapi.json")).json()
    params = {p["name"]: p["schema"] for p in document["paths"]["/v1/agents"]["get"]["parameters"]}
    assert params["limit"]["minimum"] == 1 and params["limit"]["maximum"] == 100
    assert params["after"]["anyOf"][0]["minLength"] == 1


async def test_numbers_are_strict(client: httpx.AsyncClient) -> None:
    """JSON true is not 1: the document says integer and number, and so does the service."""
    spec: dict[str, Any] = {"model": "echo", "gen_params": {"seed": False}}
    resp = await client.post("/v1/agents", json={"name": "a", "spec": spec})
    assert resp.status_code == 422 and resp.json()["error"]["param"] == "spec.gen_params.seed"
    body = {"model": "echo", "messages": [{"role": "user", "content": "x"}], "temperature": True}
    resp = await client.post("/v1/chat/completions", json=body)
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "temperature"
    body = {"model": "echo", "messages": [{"role": "user", "content": "x"}], "max_tokens": 4.0}
    assert (await client.post("/v1/chat/completions", json=body)).status_code == 200


def _source_codes() -> set[str]:
    """Every error code the service's code names (app/)."""
    codes: set[str] = set()
    for path in (ROOT / "app").rglob("*.py"):
        text = path.read_text()
        codes |= set(re.findall(r'\bcode\s*[:=]\s*(?:str\s*=\s*)?"([a-z_]+)"', text))
        codes |= set(re.findall(r'ERROR_CODE = "([a-z_]+)"', text))
        codes |= set(re.findall(r'"code": "([a-z_]+)"', text))
        codes |= set(re.findall(r'error_body\([^)]*"([a-z_]+)"\)', text))
        codes |= set(re.findall(r'EngineError\([^)]*, "([a-z_]+)"\)', text))
        codes |= (
            {f"run_{s}" for s in ("failed", "cancelled", "interrupted")}
            if ('code=f"run_' in text)
            else set()
        )
    return codes


def test_docs_list_every_error_code() -> None:
    documented = set(re.findall(r"`([a-z_]+)`", (ROOT / "docs/api.md").read_text()))
    in_tables = {c for operation in EXTRA.values() for codes in operation.values() for c in codes}
    codes = _source_codes() | in_tables
    assert len(codes) > 25, codes
    assert codes <= documented, sorted(codes - documented)


SPECS: list[dict[str, Any]] = [
    {"model": "echo"},
    {"kind": "agent", "model": "echo", "tools": [{"name": "Calculator"}]},  # agents take none
    {"kind": "agent"},  # no model
    {"kind": "agent", "model": "nope"},
    {"kind": "nope", "model": "echo"},
    {"kind": "tool_agent", "model": "echo", "tools": [{"name": "Calculator"}]},
    {"kind": "tool_agent", "model": "echo", "tools": [{"name": "NoSuchTool"}]},
    {"kind": "tool_agent", "model": "echo", "approval": {"tools": "all"}},
    {"kind": "agent", "model": "echo", "approval": {"tools": "all"}},  # approval: tool agents
    {"kind": "agent", "model": "echo", "max_turns": 3},  # a task's field
    {"kind": "task", "agent": {"model": "echo"}},
    {"kind": "task"},  # a task needs its agent
    {"kind": "task", "agent": {"kind": "tool_agent", "model": "echo", "approval": {}}},
    {"model": "echo", "sub_agents": {"a.b": {"model": "echo"}}},  # a key with a dot
    {"model": "echo", "sub_agents": {"critic": {"model": "echo"}}},
    {"model": "echo", "api_key_env": "AGENTSTATION_REMOTE_KEY_X"},  # for remote agents only
    {"remote": "http://127.0.0.1:9/a2a/x/", "model": "anything", "max_turns": 3},
    {"kind": "model", "model": "echo"},
    {"kind": "model", "model": "echo", "max_turns": 2},
    {"kind": "user_proxy", "agent": {"model": "echo"}},
    {"kind": "user_proxy"},  # it needs the agent it talks for
    {"kind": "user_proxy", "agent": {"model": "echo"}, "done": {"contains": "x"}},
    {"kind": "user_proxy", "agent": {"model": "echo"}, "human_input_mode": "NEVER"},
    {"model": "echo", "max_consecutive_auto_reply": 9},  # a user proxy's field
    {"kind": "task", "agent": {"kind": "model", "model": "echo", "human_input_mode": "NEVER"}},
]


async def test_the_published_agent_spec_is_what_the_server_accepts(
    client: httpx.AsyncClient,
) -> None:
    """``AgentSpec`` in the document is a variant per registered kind plus a remote one
    (app/openapi_specs.py): a spec valid against it is stored, an invalid one is refused (the
    fuzzer's "schema-valid request rejected" and "schema-violating request accepted")."""
    import jsonschema

    document = (await client.get("/openapi.json")).json()
    schemas = document["components"]["schemas"]
    titles = [v["title"] for v in schemas["AgentSpec"]["oneOf"]]
    kinds = list(default_registry().kinds)
    assert titles == [*(f"kind {k}" for k in kinds), "remote agent"]
    # The document's own references resolve against a root that holds its components.
    root = {"$ref": "#/components/schemas/AgentSpec", "components": document["components"]}
    validator = jsonschema.Draft202012Validator(root)
    for i, spec in enumerate(SPECS):
        valid = validator.is_valid(spec)
        resp = await client.post("/v1/agents", json={"name": f"spec-{i}", "spec": spec})
        code = resp.json()["error"]["code"] if resp.status_code >= 400 else None
        # The outbound policy is a documented refusal no schema states (it depends on DNS).
        assert valid == (resp.status_code == 201 or code == "url_not_allowed"), (spec, resp.text)
