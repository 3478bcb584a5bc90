"""Restart PostgreSQL under load (a private cluster, never the shared one): while it is down
requests fail fast with 503 and the error envelope; after, they succeed with the same process."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.resilience.procs import PrivatePostgres, Service, running, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.live, pytest.mark.postgres]

WORKERS = 8
FAST_S = 2.0  # "fail fast": well under any client timeout, nowhere near the 30 s pool timeout


@dataclass
class Outcome:
    """One request of the load."""

    start: float
    end: float
    status: int  # 0: no HTTP response at all
    body: str


class Load:
    """Workers that each send messages to their own session and read it back, until stopped."""

    def __init__(self, base_url: str, sessions: list[str]) -> None:
        self.base_url = base_url
        self.sessions = sessions
        self.outcomes: list[Outcome] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._work, args=(s,)) for s in sessions]

    def _work(self, sid: str) -> None:
        headers = {"Authorization": "Bearer key-tenant-a"}
        with httpx.Client(base_url=self.base_url, headers=headers, timeout=30) as c:
            n = 0
            while not self.stop.is_set():
                n += 1
                for method, path, body in (
                    ("POST", f"/v1/sessions/{sid}/messages", {"message": f"{sid} {n}"}),
                    ("GET", f"/v1/sessions/{sid}", None),
                ):
                    start = time.monotonic()
                    try:
                        resp = c.request(method, path, json=body)
                        status, text = resp.status_code, resp.text
                    except httpx.HTTPError as exc:
                        status, text = 0, repr(exc)
                    self.outcomes.append(Outcome(start, time.monotonic(), status, text[:300]))
                time.sleep(0.02)

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)

    def between(self, start: float, end: float) -> list[Outcome]:
        """Requests sent and answered inside [start, end]."""
        return [o for o in list(self.outcomes) if o.start >= start and o.end <= end]


def is_envelope_503(o: Outcome) -> bool:
    """A 503 with the OpenAI error envelope."""
    return o.status == 503 and '"error"' in o.body and '"type"' in o.body


def test_postgres_restart_under_load(private_pg: PrivatePostgres, tmp_path: Path) -> None:
    with running(Service(private_pg.url, tmp_path)) as svc, svc.client(timeout=30) as c:
        pid = svc.proc.pid if svc.proc else None
        spec = {"kind": "agent", "model": "echo"}
        assert c.post("/v1/agents", json={"name": "bot", "spec": spec}).status_code == 201
        sessions = [
            c.post("/v1/sessions", json={"agent": "bot"}).json()["id"] for _ in range(WORKERS)
        ]
        with Load(svc.url, sessions) as load:
            healthy = lambda: sum(o.status == 200 for o in load.outcomes) >= 2 * WORKERS  # noqa: E731
            wait_until(healthy, 30, "the load to run")
            t_down = time.monotonic()
            private_pg.stop("fast")
            time.sleep(4)
            ready_down = c.get("/readyz")
            t_up = time.monotonic()
            private_pg.start()
            # Recovery without restarting the service: a fresh request succeeds soon.
            wait_until(
                lambda: c.get(f"/v1/sessions/{sessions[0]}").status_code == 200, 15, "recovery"
            )
            t_ok = time.monotonic()
            time.sleep(2)
            t_end = time.monotonic()

        assert svc.proc is not None and svc.proc.pid == pid and svc.proc.poll() is None
        marks = {"pg down": t_down, "pg start": t_up, "recovered": t_ok, "end": t_end}
        report = _timeline(load, marks)
        before = load.between(0, t_down)
        assert before and all(o.status in {200, 201} for o in before), report
        # While it is down (after in-flight requests drained): 503 + envelope, fast.
        down = load.between(t_down + 1.0, t_up)
        assert len(down) >= WORKERS, report
        assert all(is_envelope_503(o) for o in down), report
        assert max(o.end - o.start for o in down) < FAST_S, report
        assert ready_down.status_code == 503
        # Across the transitions: answered, never a 500 or a hang.
        every = load.between(0, t_end)
        assert all(o.status in {200, 201, 503} for o in every), report
        assert max(o.end - o.start for o in every) < 10, report
        # After recovery every request succeeds, sessions included (no lock left behind).
        after = load.between(t_ok + 0.5, t_end)
        assert after and all(o.status == 200 for o in after), report
        assert c.get("/readyz").status_code == 200
        for sid in sessions:
            resp = c.post(f"/v1/sessions/{sid}/messages", json={"message": "after"})
            assert resp.status_code == 200 and resp.json()["run"]["status"] == "completed"
            # Nothing half-done: every run has a final status, memory holds only whole turns.
            runs = c.get(f"/v1/sessions/{sid}/runs", params={"limit": 100}).json()["data"]
            assert all(r["status"] not in {"queued", "running"} for r in runs), runs
            memory = [
                (m["sender"], m["content"])
                for m in c.get(f"/v1/sessions/{sid}/memory").json()["memory"]
            ]
            assert len(memory) % 2 == 0 and memory[-2:] == [("user", "after"), ("bot", "after")]
            turns = zip(memory[::2], memory[1::2], strict=True)
            assert all(u[0] == "user" and r == ("bot", u[1]) for u, r in turns), memory


def _timeline(load: Load, marks: dict[str, float]) -> str:
    rows = [(o.start, f"{o.status} {o.end - o.start:.2f}s {o.body[:120]}") for o in load.outcomes]
    rows += [(t, f"---- {name}") for name, t in marks.items()]
    return "\n".join(f"{t:.2f} {text}" for t, text in sorted(rows))
