"""A session's turns take its history's render from the aggregator's kept render
(agents/aggregator.py ``_KEPT``): a memory PUT, a reset and a fork between two turns must give the
model exactly what it would see with nothing kept."""

from __future__ import annotations

from typing import Any

import httpx
from fastapi import FastAPI

from agents import aggregator
from tests.app.conftest import make_agent, make_session


def prompts(app: FastAPI) -> list[list[dict[str, Any]]]:
    """The messages of each call of the ``echo`` model so far."""
    handle = app.state.agentstation.models.get("echo")
    return [call["messages"] for call in getattr(handle.llm, "inner", handle.llm).recent]


def texts(prompt: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in prompt if m["role"] != "system"]


async def turn(client: httpx.AsyncClient, sid: str, text: str) -> None:
    resp = await client.post(f"/v1/sessions/{sid}/messages", json={"message": text})
    assert resp.status_code == 200, resp.text


async def test_put_memory_and_reset_between_turns_are_seen_by_the_next_prompt(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    await make_agent(client)
    sid = await make_session(client)
    for text in ("one", "two", "three"):  # the later turns take the earlier render
        await turn(client, sid, text)
    assert aggregator._KEPT  # the session's render is kept
    assert texts(prompts(app)[-1])[-2:] == [("assistant", "two"), ("user", "three")]
    memory = {"memory": [{"sender": "user", "content": "put"}, {"sender": "x", "content": "y"}]}
    resp = await client.put(f"/v1/sessions/{sid}/memory", json=memory)
    assert resp.status_code == 200, resp.text
    await turn(client, sid, "four")
    # "put" and "y" (from "x") are user texts, joined with the new input
    assert texts(prompts(app)[-1]) == [("user", "putyfour")]
    await turn(client, sid, "five")
    assert texts(prompts(app)[-1]) == [
        ("user", "putyfour"),
        ("assistant", "putyfour"),  # the echo of the last user text
        ("user", "five"),
    ]
    resp = await client.post(f"/v1/sessions/{sid}/reset")
    assert resp.status_code == 200, resp.text
    await turn(client, sid, "six")
    assert texts(prompts(app)[-1]) == [("user", "six")]


async def test_a_fork_sees_only_its_prefix_after_its_parent_was_rendered(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    first = await client.post("/v1/responses", json={"model": "echo", "input": "alpha"})
    chain = first.json()["id"]
    for text in ("beta", "gamma"):
        resp = await client.post(
            "/v1/responses", json={"model": "echo", "input": text, "previous_response_id": chain}
        )
        chain = resp.json()["id"]
    assert texts(prompts(app)[-1])[-3:] == [
        ("user", "beta"),
        ("assistant", "beta"),
        ("user", "gamma"),
    ]
    await client.post(
        "/v1/responses",
        json={"model": "echo", "input": "delta", "previous_response_id": first.json()["id"]},
    )
    assert texts(prompts(app)[-1]) == [("user", "alpha"), ("assistant", "alpha"), ("user", "delta")]
