"""The playground at ``/`` in a real browser: Debian's chromium driven by Playwright's Python
API (no browser download), against a live server with real sandboxed kernels.

A user enters the key, creates an agent, talks to it and sees the answer stream in pieces,
watches a tool agent's call and result arrive, has a dropped stream resumed, cancels a slow
run with the keyboard, reloads and finds the session's history. Screenshots of each step go
to tests/output/playground/ (CI keeps them as artefacts).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.db.migrate import upgrade
from app.demo_agents import scripted_model_config
from app.settings import Settings
from tests.app.live import live_server

pytestmark = [pytest.mark.live, pytest.mark.kernel, pytest.mark.slow]

CHROMIUM = Path("/usr/bin/chromium")
SHOTS = Path(__file__).resolve().parents[1] / "output" / "playground"
KEY = "sk-playground"
POEM = (
    "Roses are red, violets are blue, every token streams on its own, one after the other, "
    "until the whole answer is there."
)
MODELS = [
    {"name": "poet", "backend": "scripted", "replies": [POEM], "chunk_delay_s": 0.12},
    {"name": "slow", "backend": "scripted", "replies": [" ".join(["tick"] * 200)],
     "chunk_delay_s": 0.25},
    scripted_model_config(),
]  # fmt: skip
CODER: dict[str, Any] = {
    "name": "coder",
    "description": "scripted tool agent",
    "spec": {"kind": "tool_agent", "model": "scripted",
             "tools": [{"name": "IPythonInteractive"}], "max_turn": 3},
}  # fmt: skip


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if not CHROMIUM.exists():
        pytest.fail("no /usr/bin/chromium: `apt-get install -y chromium` (scripts/install.sh)")
    base = Path(tempfile.mkdtemp(prefix="agentstation-play-"))
    base.chmod(0o711)  # sandbox uids must traverse it
    monkeypatch.setenv("AGENTSTATION_SANDBOX_BASE_DIR", str(base))
    monkeypatch.setenv("AGENTSTATION_SANDBOX_TIMEOUT_S", "20")
    url = f"sqlite+aiosqlite:///{tmp_path / 'play.db'}"
    upgrade(url)
    settings = Settings(
        database_url=url,
        models=json.dumps(MODELS),
        api_keys=f"t:{KEY}",
        sandbox_enabled=True,
        event_flush_s=0.05,
    )
    try:
        with live_server(settings) as base_url:
            headers = {"Authorization": f"Bearer {KEY}"}
            with httpx.Client(base_url=base_url, headers=headers) as http:
                assert http.post("/v1/agents", json=CODER).status_code == 201
                slow = {"name": "ticker", "spec": {"kind": "agent", "model": "slow"}}
                assert http.post("/v1/agents", json=slow).status_code == 201
                for _ in range(600):  # the sandbox's self-test runs in the background
                    if http.get("/readyz").json()["sandbox"]["level"] is not None:
                        break
                    time.sleep(0.05)
            yield base_url
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def page(server: str) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(20_000)
            page.goto(server + "/")
            yield page
        finally:
            browser.close()


def shot(page: Any, name: str) -> None:
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def last(page: Any, selector: str) -> Any:
    return page.locator(f"#transcript {selector}").last


def no_overflow(page: Any) -> None:
    """Nothing is cut off or scrolls the page at 1280x800."""
    sizes = page.evaluate(
        "() => [document.documentElement.scrollWidth, document.documentElement.scrollHeight]"
    )
    assert sizes[0] <= 1280 and sizes[1] <= 800, sizes


def test_a_new_user_in_the_playground(page: Any) -> None:
    from playwright.sync_api import expect

    expect.set_options(timeout=20_000)
    # 1. The key, typed and kept in the browser.
    expect(page.locator("#conn")).to_contain_text("enter your API key")  # asked, not an error
    expect(page.locator("#composer-input")).to_have_attribute(
        "placeholder", "Enter your API key above first"
    )
    shot(page, "01-no-key")
    page.fill("#api-key", KEY)
    page.keyboard.press("Enter")
    expect(page.locator("#conn")).to_contain_text("connected · 2 agents")
    assert page.evaluate("localStorage.getItem('agentstation.key')") == KEY
    no_overflow(page)
    shot(page, "02-connected")

    # 2. Create an agent with the form, keyboard only.
    page.click("#agent-new")
    page.fill("#f-name", "bard")
    page.select_option("#f-model", "poet")
    page.fill("#f-system", "Answer in verse.")
    expect(page.locator("#f-tools")).to_be_hidden()  # tools belong to tool agents
    page.select_option("#f-kind", "tool_agent")
    expect(page.locator("#f-tools")).to_contain_text("IPythonInteractive")
    page.select_option("#f-kind", "agent")
    page.focus("#agent-save")
    page.keyboard.press("Enter")
    expect(page.locator("#agent-list")).to_contain_text("bard")
    expect(page.locator("#agent-msg")).to_contain_text("saved bard v1")
    # The JSON view shows the same agent.
    page.click("#view-json")
    spec = json.loads(page.input_value("#f-json"))
    assert spec["name"] == "bard" and spec["spec"]["model"] == "poet"
    assert spec["spec"]["system_prompt"] == "Answer in verse."
    page.click("#view-form")
    shot(page, "03-agent-created")

    # 3. A session, a message, and the answer growing piece by piece.
    page.click("#session-new")
    expect(page.locator("#composer-input")).to_be_focused()
    page.keyboard.type("Write me a poem")
    page.keyboard.press("Enter")
    answer = last(page, ".msg-item.assistant .body")
    seen: list[str] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        current = answer.text_content() if answer.count() else ""
        if current and (not seen or seen[-1] != current):
            seen.append(current)
            if len(seen) == 3:
                shot(page, "04-streaming")
        if current == POEM:
            break
        time.sleep(0.03)
    assert seen[-1] == POEM
    assert len(seen) >= 4, seen  # in pieces, not all at once
    assert all(POEM.startswith(s) for s in seen)
    expect(page.locator("#run-status")).to_have_text("completed")
    expect(page.locator("#run-usage")).to_contain_text(" out = ")
    no_overflow(page)
    shot(page, "05-answered")

    # 4. The tool agent: its call (the code) and its result (the kernel's output) arrive.
    page.locator("#agent-list button", has_text="coder").click()
    page.click("#session-new")
    expect(page.locator("#composer-input")).to_be_focused()
    page.keyboard.type("primes, please")
    page.keyboard.press("Enter")
    call = last(page, ".msg-item.tool-call")
    expect(call).to_contain_text("calls IPythonInteractive")
    expect(call).to_contain_text("primes = [n for n in range(2, 50)")
    result = last(page, ".msg-item.tool-result")
    expect(result).to_contain_text("[2, 3, 5, 7, 11, 13, 17, 19, 23")
    expect(page.locator("#run-status")).to_have_text("completed")
    expect(last(page, ".msg-item.assistant")).to_contain_text("The sandbox ran the code above")
    page.click("#tab-memory")
    expect(page.locator("#memory-view")).to_contain_text("AsyncActionExecutor")
    shot(page, "06-tool-call")
    page.click("#tab-agent")

    # 5. A slow run: the stream drops and resumes (Last-Event-ID), then Esc cancels it.
    page.locator("#agent-list button", has_text="ticker").click()
    page.click("#session-new")
    expect(page.locator("#composer-input")).to_be_focused()
    page.keyboard.type("count")
    page.keyboard.press("Enter")
    ticks = last(page, ".msg-item.assistant .body")
    expect(ticks).to_contain_text("tick tick")
    page.evaluate("window.playground.dropStream()")
    expect(page.locator("#transcript")).to_contain_text("stream resumed after event")
    before = len(ticks.text_content() or "")
    deadline = time.monotonic() + 20
    while len(ticks.text_content() or "") < before + 20 and time.monotonic() < deadline:
        time.sleep(0.05)  # the resumed stream goes on growing the same answer
    text = ticks.text_content() or ""
    assert text.split() == ["tick"] * len(text.split())  # no event twice, none lost
    expect(page.locator("#run-status")).to_have_text("running")
    shot(page, "07-resumed")
    # A reload mid-run: the page replays the run's events so far and follows it.
    page.reload()
    expect(page.locator("#run-status")).to_have_text("running")
    ticks = last(page, ".msg-item.assistant .body")
    expect(ticks).to_contain_text("tick tick")
    expect(page.locator("#transcript .msg-item.user")).to_have_text("usercount")
    grown = len(ticks.text_content() or "")
    deadline = time.monotonic() + 20
    while len(ticks.text_content() or "") < grown + 10 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(ticks.text_content() or "") >= grown + 10
    page.keyboard.press("Escape")
    expect(page.locator("#run-status")).to_have_text("cancelled")
    expect(page.locator("#transcript")).to_contain_text("run cancelled")
    shot(page, "08-cancelled")

    # 6. Reload: the key, the agent and the coder's session come back with their history.
    page.locator("#agent-list button", has_text="coder").click()
    page.locator("#session-list button").first.click()
    expect(last(page, ".msg-item.tool-result")).to_contain_text("[2, 3, 5, 7")
    page.reload()
    expect(page.locator("#conn")).to_contain_text("connected")
    expect(page.locator("#agent-list button[aria-current=true]")).to_contain_text("coder")
    expect(page.locator("#transcript .msg-item.user")).to_contain_text("primes, please")
    expect(last(page, ".msg-item.tool-call")).to_contain_text("IPythonInteractive")
    expect(last(page, ".msg-item.tool-result")).to_contain_text("[2, 3, 5, 7")
    expect(page.locator("#run-status")).to_have_text("completed")
    no_overflow(page)
    shot(page, "09-reloaded")


def tab_to(page: Any, selector: str, limit: int = 80) -> None:
    """Press Tab until ``selector`` has the focus (keyboard only)."""
    for _ in range(limit):
        if page.evaluate("s => document.activeElement?.matches(s) ?? false", selector):
            return
        page.keyboard.press("Tab")
    raise AssertionError(f"Tab never reached {selector}")


def test_keyboard_only(page: Any) -> None:
    from playwright.sync_api import expect

    expect.set_options(timeout=20_000)
    tab_to(page, "#api-key")
    page.keyboard.type(KEY)
    page.keyboard.press("Enter")
    expect(page.locator("#conn")).to_contain_text("connected")
    tab_to(page, "#agent-new")
    page.keyboard.press("Enter")
    expect(page.locator("#f-name")).to_be_focused()
    page.keyboard.type("keys")
    tab_to(page, "#f-model")
    page.keyboard.press("End")  # the last model (scripted)
    page.keyboard.press("Home")  # the first: poet
    expect(page.locator("#f-model")).to_have_value("poet")
    tab_to(page, "#agent-save")
    page.keyboard.press("Enter")
    expect(page.locator("#agent-msg")).to_contain_text("saved keys v1")
    page.keyboard.press("Shift+Tab")  # back from the inspector to the panels
    tab_to(page, "#session-new")
    page.keyboard.press("Enter")
    expect(page.locator("#composer-input")).to_be_focused()
    page.keyboard.type("hello")
    page.keyboard.press("Enter")
    expect(last(page, ".msg-item.assistant .body")).to_have_text(POEM)
    page.keyboard.press("Shift+Tab")
    tab_to(page, "#tab-agent")
    page.keyboard.press("ArrowRight")
    expect(page.locator("#tab-memory")).to_be_focused()
    expect(page.locator("#memory-view")).to_contain_text(POEM.split(",")[0])
    no_overflow(page)
    shot(page, "10-keyboard-only")


def test_the_page_and_its_files(server: str) -> None:
    with httpx.Client(base_url=server) as http:
        index = http.get("/")
        assert index.status_code == 200 and "text/html" in index.headers["content-type"]
        assert "frame-ancestors 'none'" in index.headers["content-security-policy"]
        vocab = http.get("/playground/vocab.js").text
        assert '"RUN_COMPLETED": "run.completed"' in vocab and "IPythonInteractive" in vocab
        missing = http.get("/playground/nope.js")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
        assert http.get("/playground/..%2Fmain.py").status_code == 404
