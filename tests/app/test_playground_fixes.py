"""The playground as a new user finds it (issue 28) in a real browser: the defects fixed (an
agent created from the JSON view, a reload mid-run, the page's icon), the first visit (no
error before the user did anything), sessions named by their first message, renamed and
deleted. Screenshots go to tests/output/playground/."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.app.test_playground import KEY, last, server, shot

pytestmark = [pytest.mark.live, pytest.mark.kernel, pytest.mark.slow]
__all__ = ["server"]  # the fixture, shared with test_playground


def _connect(page: Any) -> None:
    from playwright.sync_api import expect

    page.fill("#api-key", KEY)
    page.keyboard.press("Enter")
    expect(page.locator("#conn")).to_contain_text("connected")


def test_the_defects_are_fixed(server: str) -> None:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=20_000)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(20_000)
            missing: list[str] = []
            page.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)
            page.goto(server + "/")
            # A first visit: no red error before the user did anything; the key box asks.
            expect(page.locator("#conn")).to_contain_text("enter your API key")
            expect(page.locator("#conn")).not_to_have_class("conn bad")
            expect(page.locator("#api-key")).to_be_focused()
            page.wait_for_load_state("networkidle")
            assert missing == [], missing  # no /favicon.ico 404 (the page links its icon)
            _connect(page)

            # An agent created from the JSON view (the hidden form's name no longer blocks it).
            page.click("#agent-new")
            page.click("#view-json")
            agent = {"name": "jsonbot", "spec": {"kind": "agent", "model": "poet"}}
            page.fill("#f-json", json.dumps(agent))
            page.click("#agent-save")
            expect(page.locator("#agent-msg")).to_contain_text("saved jsonbot v1")
            expect(page.locator("#agent-list")).to_contain_text("jsonbot")
            # A bad one says why, from the API.
            page.click("#agent-new")
            page.fill("#f-json", json.dumps({"name": "bad", "spec": {"model": "nope"}}))
            page.click("#agent-save")
            expect(page.locator("#agent-msg")).to_contain_text("unknown model 'nope'")
            expect(page.locator("#agent-msg")).to_have_class("msg bad")

            # A reload mid-run: the replayed messages without "No messages yet" above them.
            page.locator("#agent-list button", has_text="ticker").click()
            box = page.locator("#composer-input")
            expect(box).to_have_attribute(
                "placeholder", "Pick a session of ticker, or start one with New"
            )
            page.click("#session-new")
            expect(page.locator("#transcript .msg-item.empty")).to_have_count(1)
            expect(box).to_have_attribute(
                "placeholder", "Message ticker (Enter sends, Shift+Enter: new line)"
            )
            page.keyboard.type("count")
            page.keyboard.press("Enter")
            expect(box).to_have_attribute("placeholder", "ticker is answering… (Esc cancels)")
            expect(page.locator("#transcript .msg-item.empty")).to_have_count(0)
            expect(last(page, ".msg-item.assistant .body")).to_contain_text("tick tick")
            page.reload()
            expect(page.locator("#run-status")).to_have_text("running")
            expect(last(page, ".msg-item.assistant .body")).to_contain_text("tick tick")
            expect(page.locator("#transcript .msg-item.user")).to_have_count(1)
            assert page.locator("#transcript .msg-item.empty").count() == 0
            assert page.locator("#transcript .msg-item").first.get_attribute("class") == (
                "msg-item user"
            )
            shot(page, "20-reload-mid-run")
            page.keyboard.press("Escape")
            expect(page.locator("#run-status")).to_have_text("cancelled")
        finally:
            browser.close()


def test_the_icon(server: str) -> None:
    import httpx

    with httpx.Client(base_url=server) as http:
        icon = http.get("/favicon.ico")
        assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
        assert icon.text.startswith("<svg")
