"""``PUT /memory`` and ``POST /reset`` racing turns (issue 12, defect 1): a memory write is
admitted like a run (409 ``session_busy`` while one is queued or running), so no interleaving
leaves a session unusable, and its memory is always the result of one serial order."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tests.app.conftest import make_agent, make_session

ROUNDS = 30
Entry = tuple[str, Any]


def put_body(i: int) -> dict[str, Any]:
    """Memory written by PUT number ``i``."""
    return {
        "memory": [
            {"sender": "user", "content": f"put-{i}"},
            {"sender": "helper", "content": f"put-{i}"},
        ]
    }


def serial_order(memory: list[Entry], turns: set[int], puts: set[int]) -> bool:
    """Whether ``memory`` is what some serial order of the successful operations leaves: the
    last PUT's (or no) memory, then whole turns (user message and reply) each at most once."""
    rest = memory
    if rest and rest[0][1].startswith("put-"):
        i = int(rest[0][1][4:])
        if i not in puts or rest[:2] != [("user", f"put-{i}"), ("helper", f"put-{i}")]:
            return False
        rest = rest[2:]
    seen: set[int] = set()
    while rest:
        pair, rest = rest[:2], rest[2:]
        if len(pair) != 2 or not pair[0][1].startswith("turn-"):
            return False
        j = int(pair[0][1][5:])
        if pair != [("user", f"turn-{j}"), ("helper", f"turn-{j}")] or j not in turns or j in seen:
            return False
        seen.add(j)
    return True


async def test_memory_writes_racing_turns_leave_the_session_usable(
    client: httpx.AsyncClient,
) -> None:
    await make_agent(client)  # echo model: the reply repeats the message
    sid = await make_session(client)
    turns: set[int] = set()
    puts: set[int] = set()

    async def turn(i: int) -> None:
        # Rejected when busy, or queued behind the session's run (then a write is refused).
        body = {"message": f"turn-{i}", "multitask_strategy": "enqueue" if i % 3 else "reject"}
        resp = await client.post(f"/v1/sessions/{sid}/messages", json=body)
        if resp.status_code == 409:
            assert resp.json()["error"]["code"] == "session_busy"
            return
        assert resp.status_code == 200, resp.text
        assert resp.json()["run"]["status"] == "completed", resp.json()["run"]
        turns.add(i)

    async def write(i: int) -> None:
        if i % 5 == 4:
            resp = await client.post(f"/v1/sessions/{sid}/reset")
            body: dict[str, Any] = {"memory": []}
        else:
            body = put_body(i)
            resp = await client.put(f"/v1/sessions/{sid}/memory", json=body)
        if resp.status_code == 409:
            assert resp.json()["error"]["code"] == "session_busy"
            return
        assert resp.status_code == 200, resp.text
        puts.add(i)

    for i in range(0, 2 * ROUNDS, 2):
        # Several orders of arrival: writes landing while turns are admitted, run or queued.
        ops = [turn(i), write(i), turn(i + 1), write(i + 1)]
        await asyncio.gather(*(ops if i % 4 else ops[::-1]))
        memory = (await client.get(f"/v1/sessions/{sid}/memory")).json()["memory"]
        entries = [(m["sender"], m["content"]) for m in memory]
        assert serial_order(entries, turns, puts), (i, entries)
    assert turns and puts  # both kinds of operation got through
    # Usable: the next turn completes and lands after the memory.
    before = (await client.get(f"/v1/sessions/{sid}/memory")).json()["memory"]
    resp = await client.post(f"/v1/sessions/{sid}/messages", json={"message": "last"})
    assert resp.status_code == 200 and resp.json()["run"]["status"] == "completed"
    after = (await client.get(f"/v1/sessions/{sid}/memory")).json()["memory"]
    assert after[: len(before)] == before and [m["content"] for m in after[-2:]] == ["last"] * 2
