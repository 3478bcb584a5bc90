"""UpstreamPool: which upstream a request goes to, and how long a failed one stays out."""

from __future__ import annotations

import pytest

from agents.llms.upstreams import UpstreamPool, prefix_key

URLS = [f"http://engine-{i}:8000/v1" for i in range(4)]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_session_routing_moves_only_the_sessions_of_an_upstream_taken_out() -> None:
    clock = Clock()
    pool = UpstreamPool(URLS, "session", clock=clock)
    keys = [f"tenant:sess_{i}" for i in range(400)]
    before = {k: pool.order(k)[0].url for k in keys}
    assert {k: pool.order(k)[0].url for k in keys} == before  # stable
    counts = [list(before.values()).count(u) for u in URLS]
    assert min(counts) > 60  # spread over every upstream (400 / 4 = 100 each on average)
    out = pool.upstreams[2]
    pool.failed(out)
    after = {k: pool.order(k)[0].url for k in keys}
    moved = {k for k in keys if after[k] != before[k]}
    assert moved == {k for k in keys if before[k] == out.url}
    # Each moved session goes to its second choice, the same one every time.
    assert all(after[k] == pool.order(k)[0].url != out.url for k in moved)
    clock.now += 1.0  # the backoff is over: its sessions come back
    assert {k: pool.order(k)[0].url for k in keys} == before


def test_backoff_doubles_up_to_the_cap_and_a_success_resets_it() -> None:
    clock = Clock()
    pool = UpstreamPool(URLS[:2], "round_robin", backoff_s=1.0, max_backoff_s=4.0, clock=clock)
    up = pool.upstreams[0]
    waits = []
    for _ in range(4):
        pool.failed(up)
        pool.failed(up)  # a second failure while out (requests in flight) does not count
        waits.append(up.down_until - clock.now)
        assert pool.status()[up.url] == "down"
        assert [u.url for u in pool.order(None)] == [URLS[1]]
        clock.now = up.down_until
    assert waits == [1.0, 2.0, 4.0, 4.0]
    pool.succeeded(up)
    pool.failed(up)
    assert up.down_until - clock.now == 1.0


def test_every_upstream_out_tries_the_one_due_back_first() -> None:
    clock = Clock()
    pool = UpstreamPool(URLS[:3], "least_loaded", clock=clock)
    for i, up in enumerate(pool.upstreams):
        up.failures = 3 - i  # different backoffs: 4, 2, 1 s
        pool.failed(up)
    assert [u.url for u in pool.order("k")] == [URLS[2]]


def test_least_loaded_and_round_robin() -> None:
    pool = UpstreamPool(URLS[:3], "least_loaded")
    pool.upstreams[0].inflight, pool.upstreams[1].inflight = 5, 1
    assert [u.url for u in pool.order("k")] == [URLS[2], URLS[1], URLS[0]]
    rr = UpstreamPool(URLS[:3], "round_robin")
    assert [rr.order("same key")[0].url for _ in range(6)] == URLS[:3] * 2


def test_prefix_key_is_one_conversation() -> None:
    first = [{"role": "system", "content": "s"}, {"role": "user", "content": "hello"}]
    later = [*first, {"role": "assistant", "content": "hi"}, {"role": "user", "content": "more"}]
    other = [{"role": "system", "content": "s"}, {"role": "user", "content": "bye"}]
    assert prefix_key(first) == prefix_key(later) != prefix_key(other)


def test_bad_pools_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one"):
        UpstreamPool([])
    with pytest.raises(ValueError, match="duplicate"):
        UpstreamPool([URLS[0], URLS[0]])
    with pytest.raises(ValueError, match="routing"):
        UpstreamPool(URLS, "random")
