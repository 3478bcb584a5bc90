"""uvicorn's HTTP/1.1 protocol, closing idle keep-alive connections without losing a request.

An idle keep-alive connection is closed by the server after ``AGENTSTATION_KEEP_ALIVE_S``. A
client that sends a request on it at that moment gets no response (``httpx.ReadError``,
aiohttp's ``ServerDisconnectedError``) and cannot tell whether the request was processed. Two
defences (see docs/operations.md, "Keep-alive"):

- the timeout (75 s by default) outlasts the idle expiry of common clients and proxies (httpx
  5 s, aiohttp 15 s, nginx 60 s, AWS ALB 60 s), so they retire an idle connection before the
  server closes it. uvicorn's default, 5 s, equals httpx's: under load a request went out on a
  connection the server was closing (issue 20);
- the close is a half-close (FIN) that lingers 2 s: a request that still arrives was sent
  as the server closed; it is logged at warning level (it got no response and was not
  processed) and read, so the client sees the connection closed rather than reset.
"""

from __future__ import annotations

import logging

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger("agentstation.http")
# After the half-close, how long the client gets to close its side before the server does.
LINGER_S = 2.0


class KeepAliveHttpProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` whose keep-alive timeout never drops a request silently."""

    idle_closing = False  # half-closed by the keep-alive timeout: nothing more is served

    def timeout_keep_alive_handler(self) -> None:
        """Idle for the keep-alive timeout: half-close, and close when the client has (or soon)."""
        self.timeout_keep_alive_task = None
        if self.transport.is_closing():
            return
        if not self.transport.can_write_eof():
            self.transport.close()
            return
        self.idle_closing = True
        self.transport.write_eof()  # the client sees the close before it reuses the connection
        self.timeout_keep_alive_task = self.loop.call_later(LINGER_S, self.transport.close)

    def data_received(self, data: bytes) -> None:
        """Parse a request; after the keep-alive half-close, log one that came too late."""
        if not self.idle_closing:
            super().data_received(data)
            return
        log.warning(
            "closed connection from %s without a response: a request arrived after the "
            "keep-alive timeout closed it (not processed; the client should retry on a new "
            "connection and expire idle connections sooner than AGENTSTATION_KEEP_ALIVE_S)",
            _peer(self.client),
        )
        self.transport.close()


def _peer(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "an unknown client"
