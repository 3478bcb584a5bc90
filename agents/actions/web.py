"""WebBrowser: fetch a URL and return its readable text (lagent's tool name, a real fetcher).

Private, loopback and link-local addresses are refused unless ``allow_private=True``: a
model must not reach the service's own database or cloud metadata. The check runs on every
resolved address and on every redirect hop, which are followed here, not by aiohttp.
"""

from __future__ import annotations

import ipaddress
import socket
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urljoin, urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from agents.actions.base import AsyncActionMixin, BaseAction, tool_api

_SKIP_TAGS = {"script", "style", "noscript", "template", "svg", "head"}
_BLOCK_TAGS = {
    "p",
    "div",
    "br",
    "li",
    "tr",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "section",
    "article",
    "pre",
    "title",
}


class BlockedAddressError(OSError):
    """The URL resolves to an address the browser may not visit."""


_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def _check_ip(host: str) -> None:
    ip = ipaddress.ip_address(host)
    embedded: ipaddress.IPv4Address | None = None
    if isinstance(ip, ipaddress.IPv6Address):  # IPv4 hidden in IPv6 must be public too
        embedded = ip.ipv4_mapped or ip.sixtofour
        if ip in _NAT64:
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    for addr in (ip, embedded):
        if addr is not None and (not addr.is_global or addr.is_multicast):
            raise BlockedAddressError(f"refusing to fetch non-public address {host}")


class _PublicResolver(AbstractResolver):
    """The default resolver, refusing names that resolve to non-public addresses."""

    def __init__(self) -> None:
        self._inner = aiohttp.ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        for result in results:
            _check_ip(result["host"])
        return results

    async def close(self) -> None:
        await self._inner.close()


class _TextExtractor(HTMLParser):
    """Visible text of an HTML page, one block per line, plus its title."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title = ""
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._in_title = tag == "title"
        if tag in _SKIP_TAGS and tag != "head":
            self._skip += 1
        if tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP_TAGS and tag != "head" and self._skip:
            self._skip -= 1
        if tag == "title":
            self._in_title = False
        if tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skip:
            self.parts.append(data)

    def text(self) -> str:
        lines = (" ".join(line.split()) for line in "".join(self.parts).splitlines())
        return "\n".join(line for line in lines if line)


class WebBrowser(BaseAction):
    """Opens web pages and returns their text."""

    def __init__(
        self, timeout: float = 15.0, max_chars: int = 20_000, max_bytes: int = 2_000_000,
        allow_private: bool = False, max_redirects: int = 5,
        description: dict[str, Any] | None = None,
    ) -> None:  # fmt: skip
        super().__init__(description)
        self.timeout, self.max_chars, self.max_bytes = timeout, max_chars, max_bytes
        self.allow_private, self.max_redirects = allow_private, max_redirects

    @tool_api
    async def open_url(self, url: str) -> str:
        """Open a web page (http or https) and return its title and text.

        Args:
            url: the address of the page.
        """
        connector = aiohttp.TCPConnector(resolver=None if self.allow_private else _PublicResolver())
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            try:
                return await self._follow(session, url)
            except aiohttp.ClientConnectorError as exc:
                if isinstance(exc.os_error, BlockedAddressError):
                    raise exc.os_error from None  # the reason, not aiohttp's wrapper
                raise

    async def _follow(self, session: aiohttp.ClientSession, url: str) -> str:
        """Fetch ``url``, following redirects here so every hop is checked."""
        for _ in range(self.max_redirects + 1):
            self._check_url(url)
            async with session.get(url, allow_redirects=False) as resp:
                if resp.status in (301, 302, 303, 307, 308) and "Location" in resp.headers:
                    url = urljoin(url, resp.headers["Location"])
                    continue
                resp.raise_for_status()
                body = bytearray()
                async for chunk in resp.content.iter_chunked(65536):
                    body += chunk
                    if len(body) >= self.max_bytes:  # a page is not a download
                        break
                return self._render(url, resp, bytes(body[: self.max_bytes]))
        raise ValueError(f"more than {self.max_redirects} redirects")

    def _check_url(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"only http(s) URLs can be opened, got {url!r}")
        if self.allow_private:
            return
        try:
            ipaddress.ip_address(parts.hostname)
        except ValueError:
            return  # a host name: the resolver checks its addresses
        _check_ip(parts.hostname)  # IP literals never reach the resolver

    def _render(self, url: str, resp: aiohttp.ClientResponse, body: bytes) -> str:
        text = body.decode(resp.charset or "utf-8", errors="replace")
        if "html" in resp.content_type:
            extractor = _TextExtractor()
            extractor.feed(text)
            title, text = " ".join(extractor.title.split()), extractor.text()
            text = f"Title: {title}\n{text}" if title else text
        if len(text) > self.max_chars:
            text = text[: self.max_chars] + "\n…[truncated]"
        return f"URL: {url}\n{text}"


class AsyncWebBrowser(AsyncActionMixin, WebBrowser):  # type: ignore[misc]
    """lagent's async twin of ``WebBrowser``: ``await browser(inputs, "open_url")``.

    It answers to the same tool name (``WebBrowser``), so prompts and tool calls carry over;
    the fetching is the one async implementation above.
    """

    def __init__(self, description: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if description is None:
            description = {**self.__tool_description__, "name": "WebBrowser"}
        super().__init__(description=description, **kwargs)
