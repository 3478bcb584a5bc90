"""The shipped nginx config (deploy/nginx/nginx.conf) over three small upstreams that say who
answered: which key routes a request, whether nginx had the JSON body when it picked the
upstream, and what a client gets when an upstream is down or dies mid-request."""

from __future__ import annotations

import json
import secrets
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from tests.fleet.balancer import Nginx


class _Upstream(BaseHTTPRequestHandler):
    """Answers who it is, the X-Route-Key it got and the body's length; ``/die`` reads the
    request and closes the connection without an answer (a replica killed mid-request)."""

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        if self.path.startswith("/die"):
            self.server.died.append(self.command)  # type: ignore[attr-defined]
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        data = json.dumps(
            {
                "upstream": self.server.name,  # type: ignore[attr-defined]
                "route_key": self.headers.get("x-route-key"),
                "body_bytes": len(body),
            }
        ).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = _answer

    def log_message(self, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    def __init__(self, name: str) -> None:
        super().__init__(("127.0.0.1", 0), _Upstream)
        self.name = name
        self.died: list[str] = []


def _upstream(name: str) -> _Server:
    server = _Server(name)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def fleet() -> Iterator[tuple[httpx.Client, list[_Server]]]:
    servers = [_upstream(f"u{i}") for i in range(3)]
    balancer = Nginx([f"127.0.0.1:{s.server_address[1]}" for s in servers]).start()
    try:
        with httpx.Client(base_url=balancer.url, timeout=10) as client:
            yield client, servers
    finally:
        balancer.stop()
        for server in servers:
            server.shutdown()
            server.server_close()


def _who(resp: httpx.Response) -> str:
    assert resp.status_code == 200, resp.text
    return str(resp.json()["upstream"])


def test_every_key_of_a_session_reaches_one_replica(
    fleet: tuple[httpx.Client, list[_Server]],
) -> None:
    client, _ = fleet
    seen = set()
    for n in range(30):
        sid = f"session-{n}"
        path = _who(client.post(f"/v1/sessions/{sid}/messages", json={"message": "hi"}))
        assert _who(client.get(f"/v1/sessions/{sid}/memory")) == path
        header = client.post("/v1/chat/completions", headers={"X-Session-Id": sid}, json={})
        assert _who(header) == path
        # A session's routed requests carry no X-Route-Key (they are not routed by one).
        assert header.json()["route_key"] is None
        seen.add(path)
    assert len(seen) == 3  # and sessions spread over the replicas


def test_a_response_chain_follows_the_route_key_nginx_handed_out(
    fleet: tuple[httpx.Client, list[_Server]],
) -> None:
    client, _ = fleet
    seen = set()
    for _ in range(20):
        first = client.post("/v1/responses", json={"input": "hi"})
        key = first.json()["route_key"]  # nginx's $request_id, first 16 hex chars
        assert len(key) == 16 and int(key, 16) >= 0
        home = _who(first)
        seen.add(home)
        resp_id, conv_id = f"resp_{key}{secrets.token_hex(8)}", f"conv_{key}{secrets.token_hex(8)}"
        # Padding pushes the key past nginx's first body buffer reads: the whole body counts.
        pad = "x" * 200_000
        bodies: list[dict[str, Any]] = [
            {"input": pad, "previous_response_id": resp_id},
            {"model": "m", "conversation": conv_id, "input": "again"},
            {"conversation": {"id": conv_id}, "input": "again"},
        ]
        for body in bodies:
            again = client.post("/v1/responses", content=json.dumps(body, indent=1))
            assert _who(again) == home, body.keys()
            assert again.json()["route_key"] == key  # the service keeps the chain's key
            assert again.json()["body_bytes"] == len(json.dumps(body, indent=1))
        assert _who(client.get(f"/v1/responses/{resp_id}")) == home
        assert _who(client.get(f"/v1/conversations/{conv_id}/items")) == home
        assert _who(client.post("/v1/responses", headers={"X-Route-Key": key}, json={})) == home
    assert len(seen) > 1


def test_requests_without_a_key_spread(
    fleet: tuple[httpx.Client, list[_Server]],
) -> None:
    client, _ = fleet
    assert len({_who(client.get("/v1/agents")) for _ in range(30)}) == 3


def test_a_dead_replica_costs_no_request_and_a_lost_answer_is_a_503_with_retry_after(
    fleet: tuple[httpx.Client, list[_Server]],
) -> None:
    client, servers = fleet
    homes = {n: _who(client.get(f"/v1/sessions/s{n}/memory")) for n in range(30)}
    dead = servers[0]
    dead.shutdown()
    dead.server_close()  # connections to it are refused from now on
    for n, home in homes.items():
        # Not sent anywhere yet: nginx tries the next replica, also for a POST.
        moved = _who(client.post(f"/v1/sessions/s{n}/messages", json={}))
        assert moved != "u0"
        if home != "u0":
            assert moved == home  # the others' sessions stay where they were
        assert _who(client.get(f"/v1/sessions/s{n}/memory")) == moved


def test_a_lost_answer_is_a_503_with_retry_after_and_only_idempotent_requests_are_resent(
    fleet: tuple[httpx.Client, list[_Server]],
) -> None:
    client, servers = fleet
    # A replica that received a POST and died before answering: not resent (it may have run).
    lost = client.post("/die/v1/sessions/s1/messages", json={})
    assert lost.status_code == 503
    assert lost.headers["retry-after"] == "1"
    assert lost.json()["error"]["code"] == "replica_unavailable"
    assert sum(len(s.died) for s in servers) == 1


def test_an_idempotent_request_is_resent_to_the_next_replica(
    fleet: tuple[httpx.Client, list[_Server]],
) -> None:
    client, servers = fleet
    gone = client.get("/die/v1/agents")  # every replica dies on it: 3 tries, then 503
    assert gone.status_code == 503 and gone.headers["retry-after"] == "1"
    assert [len(s.died) for s in servers] == [1, 1, 1]
