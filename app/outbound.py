"""Which outbound URLs agent specs may name (remote A2A agents, MCP servers): no SSRF by default.

``AGENTSTATION_OUTBOUND_ALLOW`` lists what is allowed beyond the public internet: host names,
``host:port`` pairs or CIDR ranges (``127.0.0.1:9000,10.0.0.0/8,mcp.internal``). Without an
entry, a URL is allowed only when every address its host resolves to is a public (global) one:
loopback, private, link-local (cloud metadata) and other reserved ranges are refused.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

# A DNS name (letters, digits, '-', '.', '_'; IDNs in their ASCII form) or an IP literal.
_HOST = re.compile(r"[A-Za-z0-9._\-]+|[0-9A-Fa-f:.]+")
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class OutboundRefused(ValueError):
    """The URL may not be reached from this service."""


@dataclass(frozen=True)
class OutboundPolicy:
    """The allowlist, parsed once."""

    names: frozenset[str] = frozenset()  # "host" or "host:port", lower case
    networks: tuple[Network, ...] = field(default_factory=tuple)

    @classmethod
    def parse(cls, entries: Iterable[str]) -> OutboundPolicy:
        """From the setting's entries."""
        names: set[str] = set()
        networks: list[Network] = []
        for entry in (e.strip().lower() for e in entries):
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                names.add(entry)
        return cls(frozenset(names), tuple(networks))

    def check_syntax(self, url: str) -> tuple[str, int]:
        """The URL's host and port; refused unless http(s) with a host and no credentials."""
        try:
            parts = urlsplit(url)
            host = parts.hostname
        except ValueError as exc:  # e.g. "Invalid IPv6 URL"
            raise OutboundRefused(f"{url!r} is not a valid URL: {exc}") from None
        if parts.scheme not in ("http", "https") or not host:
            raise OutboundRefused(f"{url!r} is not an http(s) URL with a host")
        if not _HOST.fullmatch(host):
            raise OutboundRefused(f"{url!r}: {host!r} is not a host name or address")
        if parts.username or parts.password:
            raise OutboundRefused("credentials in the URL are not accepted; use api_key_env")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError as exc:
            raise OutboundRefused(f"{url!r}: {exc}") from None
        return host.lower(), port

    def listed(self, host: str, port: int) -> bool:
        """Named in the allowlist (by host, host:port, or an address in a listed range)."""
        if host in self.names or f"{host}:{port}" in self.names:
            return True
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(address in net for net in self.networks)

    def check(self, url: str) -> None:
        """Refuse ``url`` unless listed or public (resolves the host: call off the event loop)."""
        host, port = self.check_syntax(url)
        if self.listed(host, port):
            return
        try:
            infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
        except (OSError, UnicodeError) as exc:  # UnicodeError: a label over 63 characters
            raise OutboundRefused(f"{host!r} does not resolve: {exc}") from None
        for info in infos:
            address = ipaddress.ip_address(info[4][0])
            if any(address in net for net in self.networks):
                continue
            if not address.is_global:
                raise OutboundRefused(
                    f"{host!r} is a non-public address ({address}); "
                    "add it to AGENTSTATION_OUTBOUND_ALLOW to allow it"
                )
