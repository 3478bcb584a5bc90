"""Built-in tools: Calculator, Clock, WebBrowser (against a local HTTP server)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import datetime

import pytest
from aiohttp import web

from agents.actions import AsyncActionExecutor, AsyncWebBrowser, Calculator, Clock, WebBrowser
from agents.schema import ActionStatusCode, AgentMessage

PAGE = """<html><head><title>Der  Bär</title><style>p {color: red}</style></head>
<body><h1>Grüße</h1><p>Hello <b>world</b> &amp; 世界</p><script>alert(1)</script>
<ul><li>one</li><li>two</li></ul></body></html>"""


@pytest.fixture
async def site() -> AsyncIterator[str]:
    async def page(request: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html", charset="utf-8")

    async def hop(request: web.Request) -> web.Response:
        raise web.HTTPFound("/page")

    async def loop(request: web.Request) -> web.Response:
        raise web.HTTPFound("/loop")

    async def big(request: web.Request) -> web.Response:
        return web.Response(text="x" * 300_000 + "END", content_type="text/plain")

    async def missing(request: web.Request) -> web.Response:
        raise web.HTTPNotFound()

    app = web.Application()
    app.add_routes(
        [
            web.get("/page", page),
            web.get("/hop", hop),
            web.get("/loop", loop),
            web.get("/big", big),
            web.get("/missing", missing),
        ]
    )
    runner = web.AppRunner(app)
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def browse(browser: WebBrowser, url: str) -> AgentMessage:
    executor = AsyncActionExecutor([browser])
    return await executor(
        AgentMessage(content={"name": "WebBrowser.open_url", "parameters": {"url": url}})
    )


async def test_browser_extracts_text(site: str) -> None:
    reply = await browse(WebBrowser(allow_private=True), site + "/hop")
    assert reply.content.state == ActionStatusCode.SUCCESS
    assert reply.content.format_result() == (
        f"URL: {site}/page\nTitle: Der Bär\nGrüße\nHello world & 世界\none\ntwo"
    )


async def test_browser_truncates_and_reports_http_errors(site: str) -> None:
    browser = WebBrowser(allow_private=True, max_chars=100)
    text = (await browse(browser, site + "/big")).content.format_result()
    assert text == f"URL: {site}/big\n" + "x" * 100 + "\n…[truncated]"
    whole = (await browse(WebBrowser(allow_private=True, max_chars=10**6), site + "/big")).content
    assert whole.format_result().endswith("xEND")
    cut = WebBrowser(allow_private=True, max_chars=10**6, max_bytes=1000)
    assert (await browse(cut, site + "/big")).content.format_result() == (
        f"URL: {site}/big\n" + "x" * 1000
    )
    missing = (await browse(browser, site + "/missing")).content
    assert missing.state == ActionStatusCode.API_ERROR and "404" in missing.errmsg
    looping = (await browse(browser, site + "/loop")).content
    assert looping.errmsg == "ValueError: more than 5 redirects"


async def test_browser_refuses_private_addresses_by_default(site: str) -> None:
    blocked = [
        site + "/page",
        "http://localhost:1/",
        "http://169.254.169.254/latest",
        "http://[::ffff:127.0.0.1]:1/",
        "http://[64:ff9b::7f00:1]:1/",
        "http://[2002:7f00:1::]:1/",
    ]
    for url in blocked:
        result = (await browse(WebBrowser(), url)).content
        assert result.state == ActionStatusCode.API_ERROR
        assert "refusing to fetch non-public address" in result.errmsg
    ftp = (await browse(WebBrowser(), "file:///etc/passwd")).content
    assert ftp.errmsg == "ValueError: only http(s) URLs can be opened, got 'file:///etc/passwd'"


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("2 + 3 * 4", "14"),
        ("(1 + 2) / 4", "0.75"),
        ("sqrt(16) + abs(-2)", "6.0"),
        ("2**10", "1024"),
    ],
)
async def test_calculator(expression: str, value: str) -> None:
    assert (await Calculator().acall({"expression": expression})).format_result() == value


@pytest.mark.parametrize(
    ("expression", "problem"),
    [
        ("__import__('os').system('id')", "unsupported expression"),
        ("(1).__class__", "unsupported expression"),
        ("9**9**9", "result too large"),
        ("factorial(10**6)", "result too large"),
    ],
)
async def test_calculator_refuses(expression: str, problem: str) -> None:
    result = await Calculator().acall({"expression": expression})
    assert result.state == ActionStatusCode.API_ERROR and problem in (result.errmsg or "")


async def test_clock() -> None:
    result = await Clock().acall({"timezone": "Asia/Shanghai"}, "current_time")
    stamp = datetime.fromisoformat(result.format_result())
    assert stamp.utcoffset() is not None and stamp.utcoffset().total_seconds() == 8 * 3600  # type: ignore[union-attr]
    bad = await Clock().acall({"timezone": "Mars/Olympus"}, "current_time")
    assert bad.state == ActionStatusCode.API_ERROR
    assert re.search("unknown time zone 'Mars/Olympus'", bad.errmsg or "")


async def test_async_web_browser_is_the_lagent_twin(site: str) -> None:
    """``from agents.actions import AsyncWebBrowser`` (lagent programs port); same tool name."""
    browser = AsyncWebBrowser(allow_private=True)
    assert browser.name == "WebBrowser"
    direct = await browser({"url": site + "/page"}, "open_url")  # lagent's awaitable call
    assert direct.state == ActionStatusCode.SUCCESS
    assert "Grüße" in direct.format_result()
    reply = await browse(browser, site + "/hop")  # and through an executor, by the same name
    assert reply.content.format_result().startswith(f"URL: {site}/page")
    blocked = await AsyncWebBrowser()({"url": "http://127.0.0.1:9/"}, "open_url")
    assert blocked.state != ActionStatusCode.SUCCESS and "non-public" in (blocked.errmsg or "")
