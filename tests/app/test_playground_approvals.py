"""The playground's approvals (issue 15) in a real browser: a tool call waiting for approval
shows its arguments and Approve / Deny / Run edited; the run goes on in the transcript; a
reload while it waits asks again."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from tests.app.test_playground import CODER, KEY, last, no_overflow, page, server, shot

pytestmark = [pytest.mark.live, pytest.mark.kernel, pytest.mark.slow]
__all__ = ["page", "server"]  # the fixtures, shared with test_playground

GUARDED = {
    "name": "guarded",
    "spec": {**CODER["spec"], "approval": {"tools": ["IPythonInteractive"]}},
}


def _ask(page: Any, text: str) -> None:
    from playwright.sync_api import expect

    page.click("#session-new")
    expect(page.locator("#composer-input")).to_be_focused()
    page.keyboard.type(text)
    page.keyboard.press("Enter")


def test_approve_deny_and_edit_in_the_playground(page: Any, server: str) -> None:
    from playwright.sync_api import expect

    expect.set_options(timeout=20_000)
    with httpx.Client(base_url=server, headers={"Authorization": f"Bearer {KEY}"}) as http:
        assert http.post("/v1/agents", json=GUARDED).status_code == 201
    page.fill("#api-key", KEY)
    page.keyboard.press("Enter")
    expect(page.locator("#conn")).to_contain_text("connected")
    page.locator("#agent-list button", has_text="guarded").click()

    # Approve: the call waits, nothing ran; approved, the kernel's output and the answer come.
    _ask(page, "primes, please")
    box = page.locator("#approvals")
    expect(box).to_be_visible()
    expect(box).to_contain_text("IPythonInteractive")
    expect(box.locator("textarea")).to_have_value(re.compile(r"primes = \[n for n in range"))
    expect(page.locator("#run-status")).to_have_text("requires_action")
    expect(page.locator("#send")).to_be_disabled()
    assert page.locator("#transcript .msg-item.tool-result").count() == 0
    no_overflow(page)
    shot(page, "11-approval-waiting")
    box.locator("button.approve").click()
    expect(box).to_be_hidden()
    expect(last(page, ".msg-item.tool-result")).to_contain_text("[2, 3, 5, 7")
    expect(page.locator("#run-status")).to_have_text("completed")
    expect(last(page, ".msg-item.assistant")).to_contain_text("The sandbox ran the code above")
    shot(page, "12-approved")

    # Deny, with a reason the model reads as the tool's result.
    _ask(page, "primes again")
    expect(box).to_be_visible()
    box.locator("input.approval-reason").fill("no code today")
    box.locator("button.deny").click()
    expect(page.locator("#run-status")).to_have_text("completed")
    result = last(page, ".msg-item.tool-result")
    expect(result).to_contain_text("no code today")
    expect(result).not_to_contain_text("[2, 3, 5, 7")

    # A reload while it waits asks again; the edited code runs.
    _ask(page, "primes once more")
    expect(box).to_be_visible()
    page.reload()
    expect(page.locator("#conn")).to_contain_text("connected")
    expect(box).to_be_visible()
    expect(page.locator("#run-status")).to_have_text("requires_action")
    box.locator("textarea").fill('{"command": "print(sum(range(10)))"}')
    box.locator("button.edit").click()
    expect(last(page, ".msg-item.tool-result")).to_contain_text("45")
    expect(page.locator("#run-status")).to_have_text("completed")
    shot(page, "13-edited")


def test_a_user_proxy_asks_for_a_reply(page: Any, server: str) -> None:
    """A user_proxy agent's question (a human_input call) is a reply box: Reply sends the
    text on (edit {reply}), Leave ends the conversation (deny)."""
    from playwright.sync_api import expect

    expect.set_options(timeout=20_000)
    with httpx.Client(base_url=server, headers={"Authorization": f"Bearer {KEY}"}) as http:
        bard = {"name": "bard", "spec": {"kind": "agent", "model": "poet"}}
        assert http.post("/v1/agents", json=bard).status_code == 201
        proxy = {"name": "talk", "spec": {"kind": "user_proxy", "agent": "bard"}}
        assert http.post("/v1/agents", json=proxy).status_code == 201, "user_proxy"
    page.fill("#api-key", KEY)
    page.keyboard.press("Enter")
    expect(page.locator("#conn")).to_contain_text("connected")
    page.locator("#agent-list button", has_text="talk").click()
    _ask(page, "A poem, please")
    box = page.locator("#approvals")
    expect(box).to_contain_text("The conversation waits for your reply")
    expect(box.locator(".approval-prompt")).to_contain_text("Roses are red")
    expect(box.locator("textarea.approval-reply")).to_be_focused()
    shot(page, "14-user-proxy-asks")
    page.keyboard.type("More!")
    page.keyboard.press("Enter")
    expect(last(page, ".msg-item.user")).to_contain_text("More!")
    expect(box).to_be_visible()  # asked again after the next reply
    expect(page.locator("#run-status")).to_have_text("requires_action")
    box.locator("button.leave").click()
    expect(page.locator("#run-status")).to_have_text("completed")
    expect(box).to_be_hidden()
