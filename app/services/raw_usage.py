"""Raw-model calls charged to the tenant like agent runs (its usage counter and token budget)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from app.models.encoded import EncodedJSON
from app.state import AppState


async def charge(state: AppState, tenant_id: str, limit: int | None, usage: Any) -> None:
    """Count a completion's tokens for the tenant (batched when it has no budget)."""
    if isinstance(usage, dict):
        tokens = int(usage.get("total_tokens") or 0)
        if tokens:
            await state.tenant_usage.charge(tenant_id, tokens, limited=limit is not None)


async def charged_stream(
    state: AppState,
    tenant_id: str,
    limit: int | None,
    chunks: AsyncIterator[dict[str, Any]],
    client_wants_usage: bool,
) -> AsyncIterator[dict[str, Any]]:
    """A raw stream asked for with usage: the usage chunk is charged, and passed on only if
    the client asked for it; a stream cut short is charged for what it reported."""
    usage: Any = None
    try:
        async for chunk in chunks:
            if chunk.get("usage") is not None and not chunk.get("choices"):
                usage = chunk["usage"]
                if not client_wants_usage:
                    continue
            elif not client_wants_usage and "usage" in chunk:
                chunk = _without_usage(chunk)  # the "usage": null every chunk then carries
            yield chunk
    finally:
        await charge(state, tenant_id, limit, usage)


def _without_usage(chunk: dict[str, Any]) -> dict[str, Any]:
    """``chunk`` without its ``"usage": null`` (pre-encoded bytes edited, not re-encoded)."""
    if isinstance(chunk, EncodedJSON):
        return chunk.without_null("usage")
    return {k: v for k, v in chunk.items() if k != "usage"}
