"""The playground as a new user finds it (issue 28) in a real browser: the defects fixed (an
agent created from the JSON view, a reload mid-run, the page's icon), the first visit (no
error before the user did anything), sessions named by their first message, renamed and
deleted. Screenshots go to tests/output/playground/."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.app.test_playground import KEY, last, page, server, shot

pytestmark = [pytest.mark.live, pytest.mark.kernel, pytest.mark.slow]
__all__ = ["page", "server"]  # the fixtures, shared with test_playground


def _connect(page: Any) -> None:
    from playwright.sync_api import expect

    page.fill("#api-key", KEY)
    page.keyboard.press("Enter")
    expect(page.locator("#conn")).to_contain_text("connected")


def _first_turn(page: Any, message: str) -> str:
    """Connect, open a new session of `coder`, send ``message``, wait for the run; its id."""
    from playwright.sync_api import expect

    expect.set_options(timeout=20_000)
    _connect(page)
    page.locator("#agent-list button", has_text="coder").click()
    page.click("#session-new")
    expect(page.locator("#composer-input")).to_be_focused()
    page.keyboard.type(message)
    page.keyboard.press("Enter")
    expect(page.locator("#run-status")).to_have_text("completed")
    return str(page.evaluate("window.playground.state.session"))


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
            # Its one model call has not ended: no usage yet, rather than "0 in + 0 out".
            expect(page.locator("#run-status")).to_have_text("running")
            expect(page.locator("#run-usage")).to_have_text("")
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
    with httpx.Client(base_url=server) as http:
        icon = http.get("/favicon.ico")
        assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
        assert icon.text.startswith("<svg")


def test_sessions_are_named_renamed_and_deleted(page: Any, server: str) -> None:
    from playwright.sync_api import expect

    sid = _first_turn(page, "Primes below fifty, please\nand their product")
    # Named by its first message's first line; the id on hover; kept on the server.
    item = page.locator("#session-list li.session").first
    expect(item.locator(".session-open")).to_contain_text("Primes below fifty, please")
    assert item.locator(".session-open").get_attribute("title") == sid
    expect(page.locator("#chat-title")).to_contain_text("coder / Primes below fifty, please")
    with httpx.Client(
        base_url=server, headers={"Authorization": f"Bearer {KEY}"}, timeout=30
    ) as http:
        assert http.get(f"/v1/sessions/{sid}").json()["metadata"] == {
            "title": "Primes below fifty, please"
        }
        # A second message leaves the title alone (its own run: the badge still says the first
        # run's "completed" until the new run is on the screen).
        first_run = page.locator("#run-id").get_attribute("title") or ""
        page.keyboard.type("again")
        page.keyboard.press("Enter")
        expect(page.locator("#run-id")).not_to_have_attribute("title", first_run)
        expect(page.locator("#run-status")).to_have_text("completed")
        expect(item.locator(".session-open")).to_contain_text("Primes below fifty, please")

        # Renamed in place (Enter saves), then kept by the server.
        item.locator(".session-rename").click()
        expect(page.locator("#session-list input.session-title")).to_be_focused()
        page.keyboard.press("Control+A")
        page.keyboard.type("My primes")
        page.keyboard.press("Enter")
        expect(item.locator(".session-open")).to_contain_text("My primes")
        assert http.get(f"/v1/sessions/{sid}").json()["metadata"]["title"] == "My primes"
        shot(page, "21-session-renamed")

        # Deleted after a confirmation: gone from the list, the chat and the server.
        item.locator(".session-delete").click()
        expect(item).to_contain_text("Delete “My primes”")
        item.locator(".session-keep").click()  # not yet
        expect(item.locator(".session-open")).to_contain_text("My primes")
        item.locator(".session-delete").click()
        # The page's DELETE answered in time (it once hung for SQLite's busy_timeout, 30 s:
        # tests/app/test_session_delete.py) and said 204: a failure names which went wrong.
        with page.expect_response(
            lambda r: r.request.method == "DELETE" and r.url.endswith(f"/v1/sessions/{sid}")
        ) as deleted:
            item.locator(".session-confirm").click()
        answer = deleted.value
        assert answer.status == 204, (answer.status, answer.text())
        expect(page.locator("#session-list li.session")).to_have_count(0)
        expect(page.locator("#transcript .msg-item")).to_have_count(0)
        expect(page.locator("#composer-input")).to_be_disabled()
        assert http.get(f"/v1/sessions/{sid}").status_code == 404


def test_a_slow_list_load_does_not_bring_a_deleted_session_back(page: Any, server: str) -> None:
    """The list reloads when a run ends; on a busy server that answer can arrive after the user
    deleted (or renamed) a session, and it must not put the old list back."""
    from playwright.sync_api import expect

    sid = _first_turn(page, "keep me briefly")
    item = page.locator("#session-list li.session").first
    expect(item.locator(".session-open")).to_contain_text("keep me briefly")
    mine = page.locator(f"#session-list .session-open[title='{sid}']")

    held: list[Any] = []  # list loads held back in the browser
    page.route("**/v1/sessions?*", lambda route: held.append(route))
    page.evaluate("() => { window.playground.reloadSessions(); }")  # what a run's end does
    for _ in range(100):
        if held:
            break
        page.wait_for_timeout(100)
    assert held, "the list load was not sent"
    stale = held[0]
    answer = stale.fetch()  # the server answers before the delete…
    assert sid in answer.text()
    item.locator(".session-delete").click()
    item.locator(".session-confirm").click()
    expect(mine).to_have_count(0)
    stale.fulfill(response=answer)  # …and the browser gets that stale answer after it
    for route in held[1:]:
        route.continue_()
    page.unroute("**/v1/sessions?*")
    page.wait_for_timeout(500)
    expect(mine).to_have_count(0)
    with httpx.Client(
        base_url=server, headers={"Authorization": f"Bearer {KEY}"}, timeout=30
    ) as http:
        assert http.get(f"/v1/sessions/{sid}").status_code == 404


def test_tools_mcp_servers_and_approval_in_the_form(page: Any, server: str) -> None:
    from playwright.sync_api import expect

    expect.set_options(timeout=20_000)
    _connect(page)
    page.click("#agent-new")
    page.fill("#f-name", "formbot")
    page.select_option("#f-kind", "tool_agent")
    page.select_option("#f-model", "scripted")
    # The tools a user adds; not the agent loop's own actions, nor `mcp` (a server list below).
    tools = page.locator("#f-tools input.tool-use")
    names = [tools.nth(i).get_attribute("value") for i in range(tools.count())]
    assert "IPythonInteractive" in names and "SendMessage" in names
    assert not {"FinishAction", "InvalidAction", "NoAction", "mcp"} & set(names), names
    page.check("#f-tools input.tool-use[value=IPythonInteractive]")
    page.check("#f-tools input.tool-ask[value=IPythonInteractive]")
    page.click("#f-mcp-add")
    expect(page.locator("#f-mcp-list .mcp-where")).to_be_focused()
    page.keyboard.type("https://mcp.example.com/mcp")
    page.fill("#f-mcp-list .mcp-name", "calc")
    page.click("#f-mcp-add")
    page.locator("#f-mcp-list .mcp-where").nth(1).fill("python -m my_server")
    page.fill("#f-approval-timeout", "600")
    page.select_option("#f-approval-on-timeout", "cancel")
    shot(page, "22-tools-form")
    page.click("#agent-save")
    expect(page.locator("#agent-msg")).to_contain_text("saved formbot v1")
    with httpx.Client(
        base_url=server, headers={"Authorization": f"Bearer {KEY}"}, timeout=30
    ) as http:
        spec = http.get("/v1/agents/formbot").json()["spec"]
        assert [(t["name"], t["config"]) for t in spec["tools"]] == [
            ("IPythonInteractive", {}),
            ("mcp", {"url": "https://mcp.example.com/mcp", "name": "calc"}),
            ("mcp", {"command": ["python", "-m", "my_server"]}),
        ]
        assert spec["approval"] == {
            "tools": ["IPythonInteractive"], "timeout_s": 600, "on_timeout": "cancel"
        }  # fmt: skip
        # Back in the form (a reload): the same fields; every call waits, one server less.
        page.reload()
        expect(page.locator("#conn")).to_contain_text("connected")
        expect(page.locator("#f-name")).to_have_value("formbot")
        expect(page.locator("#f-tools input.tool-ask[value=IPythonInteractive]")).to_be_checked()
        expect(page.locator("#f-mcp-list .mcp-where")).to_have_count(2)
        expect(page.locator("#f-mcp-list .mcp-name").first).to_have_value("calc")
        page.locator("#f-mcp-list .mcp-remove").nth(1).click()
        page.check("#f-approval-all")
        expect(page.locator("#f-tools input.tool-ask[value=IPythonInteractive]")).to_be_disabled()
        page.click("#agent-save")
        expect(page.locator("#agent-msg")).to_contain_text("saved formbot v2")
        spec = http.get("/v1/agents/formbot").json()["spec"]
        assert [t["name"] for t in spec["tools"]] == ["IPythonInteractive", "mcp"]
        assert spec["approval"] == {"tools": "all", "timeout_s": 600, "on_timeout": "cancel"}


def test_agent_versions_shown_and_rolled_back(page: Any, server: str) -> None:
    from playwright.sync_api import expect

    expect.set_options(timeout=20_000)
    with httpx.Client(
        base_url=server, headers={"Authorization": f"Bearer {KEY}"}, timeout=30
    ) as http:
        first = {"name": "verse", "spec": {"kind": "agent", "model": "poet"}}
        assert http.post("/v1/agents", json=first).status_code == 201
        second = {"spec": {"kind": "agent", "model": "slow", "system_prompt": "Count."}}
        assert http.put("/v1/agents/verse", json=second).status_code == 200
        _connect(page)
        page.locator("#agent-list button", has_text="verse").click()
        versions = page.locator("#version-list li.version")
        expect(versions).to_have_count(2)
        expect(versions.nth(0)).to_contain_text("v2 (current) · agent · slow")
        expect(versions.nth(1)).to_contain_text("v1 · agent · poet")
        expect(versions.nth(0).locator(".version-rollback")).to_have_count(0)
        # Show: version 1 in the editor, nothing saved.
        versions.nth(1).locator(".version-show").click()
        expect(page.locator("#f-model")).to_have_value("poet")
        expect(page.locator("#f-system")).to_have_value("")
        expect(page.locator("#agent-msg")).to_contain_text(
            "version 1 in the editor: Save makes it version 3"
        )
        assert http.get("/v1/agents/verse").json()["version"] == 2
        # Roll back: version 1's spec is current again, as version 3.
        versions.nth(1).locator(".version-rollback").click()
        expect(page.locator("#agent-msg")).to_contain_text(
            "rolled back: version 1's spec is now version 3"
        )
        expect(versions).to_have_count(3)
        expect(versions.nth(0)).to_contain_text("v3 (current) · agent · poet")
        expect(page.locator("#agent-save")).to_have_text("Save version 4")
        expect(page.locator("#agent-list")).to_contain_text("agent · poet · v3")
        current = http.get("/v1/agents/verse").json()
        assert current["version"] == 3 and current["spec"]["model"] == "poet"
        shot(page, "23-versions")
        # A new agent has none.
        page.click("#agent-new")
        expect(page.locator("#versions")).to_be_hidden()
