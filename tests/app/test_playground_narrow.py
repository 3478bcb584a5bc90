"""The playground at 400 px wide (a phone) in a real browser (issue 28): one panel at a time
with a switcher; the whole flow — create a tool agent with approval in the form, chat, approve
the call, read the memory, the timeline and the code, rename and delete the session — with
nothing scrolling sideways and a usable message box. Screenshots: tests/output/playground/."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.app.test_playground import CHROMIUM, KEY, SHOTS, last, server, shot

pytestmark = [pytest.mark.live, pytest.mark.kernel, pytest.mark.slow]
__all__ = ["server"]  # the fixture, shared with test_playground

WIDTH, HEIGHT = 400, 800


@pytest.fixture
def phone(server: str) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
            page.set_default_timeout(20_000)
            page.goto(server + "/")
            yield page
        finally:
            browser.close()


def fits(page: Any) -> None:
    """Nothing scrolls sideways; the page itself does not scroll down either."""
    width, height = page.evaluate(
        "() => [document.documentElement.scrollWidth, document.documentElement.scrollHeight]"
    )
    assert width <= WIDTH, f"scrolls sideways: {width} > {WIDTH}"
    assert height <= HEIGHT, f"scrolls down: {height} > {HEIGHT}"


def showing(page: Any, panel: str) -> None:
    """The switcher shows ``panel`` (and only it)."""
    from playwright.sync_api import expect

    expect(page.locator("#grid")).to_have_attribute("data-view", panel)
    expect(page.locator(f"#grid > .panel[data-panel={panel}]")).to_be_visible()
    expect(page.locator("#grid > .panel:visible")).to_have_count(1)


def test_the_whole_flow_at_400_px(phone: Any) -> None:
    from playwright.sync_api import expect

    page = phone
    expect.set_options(timeout=20_000)
    expect(page.locator("#views")).to_be_visible()  # the switcher, narrow screens only
    expect(page.locator("#conn")).to_contain_text("enter your API key")
    fits(page)
    shot(page, "30-phone-first-visit")
    page.fill("#api-key", KEY)
    page.keyboard.press("Enter")
    expect(page.locator("#conn")).to_contain_text("connected")
    showing(page, "agents")  # nothing picked yet: the agents first
    expect(page.locator("#agent-list")).to_be_visible()
    expect(page.locator("#session-list")).to_be_hidden()  # one panel at a time
    fits(page)

    # Create a tool agent whose tool calls wait for approval, with the form.
    page.click("#agent-new")
    showing(page, "inspector")
    expect(page.locator("#f-name")).to_be_focused()
    page.keyboard.type("pocket")
    page.select_option("#f-kind", "tool_agent")
    page.select_option("#f-model", "scripted")
    page.check("#f-tools input.tool-use[value=IPythonInteractive]")
    page.check("#f-tools input.tool-ask[value=IPythonInteractive]")
    fits(page)
    shot(page, "31-phone-agent-form")
    page.click("#agent-save")
    expect(page.locator("#agent-msg")).to_contain_text("saved pocket v1")

    # A session and a message: the chat takes the screen, its message box the width.
    page.click("#views button[data-panel=sessions]")
    expect(page.locator("#sessions-h")).to_be_visible()
    page.click("#session-new")
    showing(page, "chat")
    box = page.locator("#composer-input")
    expect(box).to_be_focused()
    width = box.bounding_box()["width"]
    assert width >= 250, f"the message box is {width} px wide"
    page.keyboard.type("primes, please")
    page.keyboard.press("Enter")

    # The call waits: it stands out, and Approve runs it in the real kernel.
    approvals = page.locator("#approvals")
    expect(approvals).to_be_visible()
    expect(approvals).to_contain_text("waits for your approval")
    expect(page.locator("#run-status")).to_have_text("requires_action")
    expect(page.locator("#run-usage")).to_contain_text(" out = ")  # known once it stopped
    assert page.title().startswith("⚠ Approval needed")
    fits(page)
    shot(page, "32-phone-approval")
    approvals.locator("button.approve").click()
    expect(last(page, ".msg-item.tool-result")).to_contain_text("[2, 3, 5, 7")
    expect(page.locator("#run-status")).to_have_text("completed")
    expect(last(page, ".msg-item.assistant")).to_contain_text("The sandbox ran the code above")
    assert page.title() == "AgentStation playground"
    fits(page)
    shot(page, "33-phone-answered")

    # The memory, the run's timeline and its code, in the inspector.
    page.click("#views button[data-panel=inspector]")
    page.click("#tab-memory")
    expect(page.locator("#memory-view")).to_contain_text("AsyncActionExecutor")
    fits(page)
    page.click("#tab-timeline")
    rows = page.locator("#timeline .tl-row")
    expect(rows).to_have_count(4)
    expect(rows.nth(0)).to_contain_text("calls IPythonInteractive")
    expect(rows.nth(1)).to_contain_text("waiting for approval")
    expect(rows.nth(2)).to_contain_text("tool IPythonInteractive")
    expect(rows.nth(3)).to_contain_text("replies")
    fits(page)
    shot(page, "34-phone-timeline")
    page.click("#tab-code")
    sid = page.evaluate("window.playground.state.session")
    expect(page.locator("#code-view")).to_contain_text(f"/v1/sessions/{sid}/messages")
    expect(page.locator("#code-view")).to_contain_text('model="pocket"')
    fits(page)
    shot(page, "35-phone-code")

    # The session, named by its first message: renamed, then deleted.
    page.click("#views button[data-panel=sessions]")
    item = page.locator("#session-list li.session").first
    expect(item.locator(".session-open")).to_contain_text("primes, please")
    item.locator(".session-rename").click()
    page.keyboard.press("Control+A")
    page.keyboard.type("pocket primes")
    page.keyboard.press("Enter")
    expect(item.locator(".session-open")).to_contain_text("pocket primes")
    fits(page)
    item.locator(".session-delete").click()
    item.locator(".session-confirm").click()
    expect(page.locator("#session-list li.session")).to_have_count(0)
    fits(page)
    shot(page, "36-phone-deleted")

    # Wider again (a tablet, then a laptop): every panel at once, no switcher, still no scroll.
    for width, height in [(900, 700), (1280, 800)]:
        page.set_viewport_size({"width": width, "height": height})
        expect(page.locator("#views")).to_be_hidden()
        expect(page.locator("#grid > .panel:visible")).to_have_count(4)
        sizes = page.evaluate(
            "() => [document.documentElement.scrollWidth, document.documentElement.scrollHeight]"
        )
        assert sizes[0] <= width and sizes[1] <= height, (width, sizes)
    shot(page, "37-laptop-again")
