"""A tool run's timeline in the playground (issue 28), in a real browser: the scripted tool
agent's model call, its tool call in a real sandboxed kernel and its answer as a waterfall with
durations and tokens, drawn live from the stream and the same after a reload (from
GET /v1/runs/{id}/events); and "View code" for what is on the screen."""

from __future__ import annotations

import itertools
import re
from typing import Any

import httpx
import pytest

from tests.app.test_playground import KEY, page, server, shot

pytestmark = [pytest.mark.live, pytest.mark.kernel, pytest.mark.slow]
__all__ = ["page", "server"]  # the fixtures, shared with test_playground

SECONDS = re.compile(r"^(\d+) ms|^(\d+\.\d\d) s")


def _rows(page: Any) -> list[dict[str, Any]]:
    """Each timeline row: its label, figures and bar (left and width, % of the run)."""
    rows: list[dict[str, Any]] = page.evaluate(
        """() => [...document.querySelectorAll('#timeline .tl-row')].map(r => ({
            label: r.querySelector('.tl-label').textContent,
            figs: r.querySelector('.tl-figs').textContent
                  + ' · ' + (r.querySelector('.tl-details')?.textContent ?? ''),
            kind: r.className,
            left: parseFloat(r.querySelector('.tl-bar').style.left),
            width: parseFloat(r.querySelector('.tl-bar').style.width)}))"""
    )
    return rows


def _ms(figures: str) -> float:
    found = SECONDS.match(figures)
    assert found, figures
    return float(found[1]) if found[1] else float(found[2]) * 1000


def test_the_timeline_of_a_tool_run(page: Any, server: str) -> None:
    from playwright.sync_api import expect

    expect.set_options(timeout=20_000)
    page.fill("#api-key", KEY)
    page.keyboard.press("Enter")
    expect(page.locator("#conn")).to_contain_text("connected")
    page.locator("#agent-list button", has_text="coder").click()
    page.click("#tab-timeline")
    expect(page.locator("#timeline")).to_contain_text("No run yet")
    page.click("#session-new")
    expect(page.locator("#composer-input")).to_be_focused()
    page.keyboard.type("primes, please")
    page.keyboard.press("Enter")
    # While it runs, the timeline grows from the stream.
    expect(page.locator("#timeline .tl-row").first).to_contain_text("calls IPythonInteractive")
    # While the kernel runs the call, the usage so far: the first model call's tokens.
    expect(page.locator("#run-usage")).to_have_text(re.compile(r"^\d+ in \+ \d+ out so far$"))
    expect(page.locator("#run-status")).to_have_text("completed")
    expect(page.locator("#timeline .tl-title")).to_contain_text("completed")
    live = _rows(page)
    assert [r["label"] for r in live] == [
        "model scripted: calls IPythonInteractive",
        "tool IPythonInteractive",
        "model scripted: replies",
    ]
    run_id = page.evaluate("window.playground.state.run.id")
    with httpx.Client(base_url=server, headers={"Authorization": f"Bearer {KEY}"}) as http:
        run = http.get(f"/v1/runs/{run_id}").json()
    usage = run["usage"]
    expect(page.locator("#timeline .tl-title")).to_contain_text(
        f"{usage['prompt_tokens']} in + {usage['completion_tokens']} out"
    )
    # Each model call's tokens; together the run's.
    spent = [re.search(r"(\d+) in \+ (\d+) out", r["figs"]) for r in live]
    assert spent[1] is None  # a tool spends no tokens
    prompt = sum(int(m[1]) for m in spent if m)
    completion = sum(int(m[2]) for m in spent if m)
    assert (prompt, completion) == (usage["prompt_tokens"], usage["completion_tokens"])
    # A waterfall: each step starts where the one before ended, the kernel's run takes time.
    for before, after in itertools.pairwise(live):
        assert after["left"] >= before["left"] + before["width"] - 1, live
    assert _ms(live[1]["figs"]) > 0 and "tl-tool" in live[1]["kind"]
    assert live[-1]["left"] + live[-1]["width"] <= 100.5
    shot(page, "40-timeline")

    # After a reload the same waterfall, from the run's stored events.
    page.reload()
    expect(page.locator("#conn")).to_contain_text("connected")
    page.click("#tab-timeline")
    expect(page.locator("#timeline .tl-row")).to_have_count(3)
    replayed = _rows(page)
    assert [(r["label"], r["figs"]) for r in replayed] == [(r["label"], r["figs"]) for r in live]
    expect(page.locator("#timeline-run")).to_have_value(run_id)

    # View code: curl and Python for this agent, session and message; they work as shown.
    page.click("#tab-code")
    code = page.locator("#code-view")
    sid = page.evaluate("window.playground.state.session")
    expect(code).to_contain_text(f"curl -sN {server}/v1/sessions/{sid}/messages")
    expect(code).to_contain_text('"message":"primes, please"')
    expect(code).to_contain_text(f"/v1/runs/{run_id}/events")
    python = code.locator("pre.lang-python").text_content() or ""
    assert f'base_url="{server}/v1"' in python and '"X-Session-Id": "' + sid in python
    shot(page, "41-view-code")
    namespace: dict[str, Any] = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KEY", KEY)
        printed: list[Any] = []
        mp.setitem(namespace, "print", lambda *a: printed.append(a))
        exec(python, namespace)  # the page's own Python, against this server
    assert "The sandbox ran the code above" in str(printed[0][0])


def test_a_trace_id_links_to_the_trace_url(page: Any) -> None:
    """A run that carries a trace id (tracing on: docs/observability.md) links to it with
    AGENTSTATION_TRACE_URL; without the URL the id shows as text; without an id, nothing."""
    from app.api.playground import vocabulary

    assert vocabulary(None, "http://127.0.0.1:16686/trace/{trace_id}")["traceUrl"] == (
        "http://127.0.0.1:16686/trace/{trace_id}"
    )
    assert vocabulary(None)["traceUrl"] is None
    assert page.evaluate("window.AGENTSTATION.traceUrl") is None  # not configured here
    page.click("#tab-timeline")
    draw = """async ([trace, url]) => {
        const m = await import('/playground/timeline.js');
        const run = {id: 'run_1', status: 'completed', created_at: '2026-01-01T00:00:00Z',
                     started_at: '2026-01-01T00:00:00Z', finished_at: '2026-01-01T00:00:02Z',
                     usage: {prompt_tokens: 3, completion_tokens: 4, total_tokens: 7},
                     trace_id: trace};
        m.drawTimeline([{event: 'run.created', data: {run}},
                        {event: 'run.completed', data: {run}}], () => null, url);
        const link = document.querySelector('#timeline .tl-trace');
        return link ? [link.tagName, link.textContent, link.getAttribute('href')] : null;
    }"""
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    assert page.evaluate(draw, [trace, "http://127.0.0.1:16686/trace/{trace_id}"]) == [
        "A",
        f"trace {trace}",
        f"http://127.0.0.1:16686/trace/{trace}",
    ]
    assert page.evaluate(draw, [trace, None]) == ["SPAN", f"trace {trace}", None]
    assert page.evaluate(draw, [None, None]) is None
