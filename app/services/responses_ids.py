"""Ids of the Responses API and the agents it runs (docs/responses.md, "Ids and routing").

Response ids are ``resp_<K><R>``, conversation ids ``conv_<K><R>`` and the sessions of
``previous_response_id`` chains ``chain_<K><R>``: ``K`` is a 16-hex-digit route key, ``R``
16 random hex digits. ``K`` is the ``X-Route-Key`` header's (its first 16 hex digits; the load
balancer sets it), else the parent's (the response or conversation the request continues: a
continuation or a fork stays with its parent), else random. A load balancer hashing on ``K``
sends a chain's requests to one replica.
"""

from __future__ import annotations

import hashlib
import random
import re

RESPONSE = "resp_"
CONVERSATION = "conv_"
CHAIN = "chain_"
ROUTE_KEY_HEADER = "X-Route-Key"
KEY_LENGTH = 16
_HEX = re.compile(r"^[0-9a-f]{16}")
_MINTED = re.compile(r"^(resp_|conv_|chain_)([0-9a-f]{16})[0-9a-f]{16,}$")
# The agent a raw model runs as (kind ``model``): ``responses.<model>``, its name made safe.
IMPLICIT_AGENT = "responses."
_UNSAFE = re.compile(r"[^A-Za-z0-9._\-]")


def key_of(minted: str | None) -> str | None:
    """The route key of a minted id (None: not one of ours)."""
    found = _MINTED.match(minted or "")
    return found.group(2) if found else None


def route_key(header: str | None, parent: str | None = None) -> str:
    """``K``: the header's first 16 hex digits (another value is hashed to 16), else the
    parent id's, else random."""
    if header:
        value = header.strip().lower()
        found = _HEX.match(value)
        return found.group(0) if found else hashlib.sha256(value.encode()).hexdigest()[:16]
    inherited = key_of(parent)
    return inherited if inherited is not None else f"{random.getrandbits(64):016x}"


def mint(prefix: str, key: str) -> str:
    """A new id: ``prefix``, the route key, 16 random hex digits (an identifier, not a
    secret: no urandom syscall, as chat completion ids)."""
    return f"{prefix}{key}{random.getrandbits(64):016x}"


def implicit_agent_name(model: str) -> str:
    """The name of the agent a raw model runs as (``responses.<model>``)."""
    safe = _UNSAFE.sub("-", model).strip("-.") or "model"
    return f"{IMPLICIT_AGENT}{safe}"[:128]
