"""API keys: static keys from settings and hashed keys in the database; tenants."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.cache import TTLCache, invalidate_on_commit
from app.db.base import new_id, utcnow
from app.db.models import ApiKey, Tenant
from app.errors import Unauthorized

ANONYMOUS_TENANT = "default"
T = TypeVar("T")


@dataclass(frozen=True)
class Principal:
    """Who is calling: a tenant (and whether it came without a key), and the raw models its
    key may use (None: every configured model)."""

    tenant_id: str
    anonymous: bool = False
    models: frozenset[str] | None = None

    def may_use(self, model: str) -> bool:
        """Whether this key may call the raw model ``model`` (or name it in an agent spec)."""
        return self.models is None or model in self.models

    def visible(self, models: list[str]) -> list[str]:
        """The configured models this key may use, in their order."""
        return [m for m in models if self.may_use(m)]


def hash_key(key: str) -> str:
    """SHA-256 hex of a key (keys are random, so no salt or KDF is needed)."""
    return hashlib.sha256(key.encode()).hexdigest()


def generate_key() -> str:
    """A new random key."""
    return "as-" + secrets.token_urlsafe(32)


async def ensure_tenant(db: AsyncSession, tenant_id: str) -> None:
    """Create the tenant row if missing."""
    if await db.get(Tenant, tenant_id) is None:
        db.add(Tenant(id=tenant_id))
        await db.flush()


async def create_key(db: AsyncSession, tenant_id: str, models: list[str] | None = None) -> str:
    """Store a new hashed key for ``tenant_id`` (limited to ``models`` if given); returns the
    plaintext key, shown this once (``list_keys`` shows its id)."""
    await ensure_tenant(db, tenant_id)
    key = generate_key()
    key_id = new_id("key")
    db.add(
        ApiKey(
            id=key_id, tenant_id=tenant_id, key_hash=hash_key(key), prefix=key[:8], models=models
        )
    )
    await db.flush()
    # Anonymous access ends with the first key: apps in this process (tests run the CLI
    # in-process) forget "no stored key" now, other processes within their cache TTL.
    invalidate_on_commit(db, "auth")
    return key


async def list_keys(db: AsyncSession, tenant_id: str | None = None) -> list[ApiKey]:
    """Stored keys (never their secret: only a hash and an 8-character prefix are stored)."""
    query = sa.select(ApiKey).order_by(ApiKey.tenant_id, ApiKey.created_at)
    if tenant_id is not None:
        query = query.where(ApiKey.tenant_id == tenant_id)
    return list(await db.scalars(query))


async def revoke_key(db: AsyncSession, key_id: str) -> ApiKey | None:
    """Mark a key revoked (every replica refuses it once its auth cache entry expires)."""
    row = await db.get(ApiKey, key_id)
    if row is not None and row.revoked_at is None:
        row.revoked_at = utcnow()
        await db.flush()
        invalidate_on_commit(db, "auth")
    return row


class Authenticator:
    """Resolves a bearer key to a principal; stored keys are cached for ``ttl_s`` per replica.

    A static key (settings) never touches the database; a stored key (CLI) is looked up once per
    ``ttl_s``, so a key revoked in the database keeps working on a replica for at most that long.
    Unknown keys are cached too (so a client repeating one does not cost a query each time), in
    a separate, smaller cache: a flood of random keys evicts only other unknown keys.
    """

    def __init__(
        self,
        static_keys: list[tuple[str, str]],
        allow_anonymous: bool,
        ttl_s: float = 5.0,
        max_keys: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.static = {hash_key(key): tenant for tenant, key in static_keys}
        self.allow_anonymous = allow_anonymous
        self.keys: TTLCache[str, Principal] = TTLCache("auth", ttl_s, max_keys, clock)
        self.unknown: TTLCache[str, bool] = TTLCache("auth", ttl_s, 1024, clock)
        self.stored: TTLCache[str, bool] = TTLCache("auth", ttl_s, 1, clock)

    async def any_stored_key(self, db: AsyncSession) -> bool:
        """True once a key was created with the CLI (which ends anonymous access)."""
        found = await db.scalar(sa.select(ApiKey.id).where(ApiKey.revoked_at.is_(None)).limit(1))
        return found is not None

    async def authenticate(
        self, sessions: async_sessionmaker[AsyncSession], authorization: str | None
    ) -> Principal:
        """The principal for an ``Authorization`` header value, or 401."""
        if not authorization:
            if self.allow_anonymous and not await self._any_stored_key(sessions):
                return Principal(ANONYMOUS_TENANT, anonymous=True)
            raise Unauthorized("missing API key: send Authorization: Bearer <key>")
        scheme, _, key = authorization.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise Unauthorized("invalid Authorization header: expected Bearer <key>")
        digest = hash_key(key.strip())
        for known, tenant in self.static.items():
            if hmac.compare_digest(known, digest):
                return Principal(tenant)
        principal = self.keys.get(digest)
        if principal is not None:
            return principal
        if self.unknown.get(digest) is None:
            # Concurrent misses share one query (TTLCache.load).
            principal = await self.keys.load(digest, lambda: self._load_key(sessions, digest))
            if principal is not None:
                return principal
        raise Unauthorized("invalid API key")

    async def _any_stored_key(self, sessions: async_sessionmaker[AsyncSession]) -> bool:
        # Concurrent misses share one query (TTLCache.load).
        return bool(await self.stored.load("any", lambda: self._load_any_stored_key(sessions)))

    async def _load_any_stored_key(self, sessions: async_sessionmaker[AsyncSession]) -> bool:
        async with sessions() as db:
            return await self.any_stored_key(db)

    async def _load_key(
        self, sessions: async_sessionmaker[AsyncSession], digest: str
    ) -> Principal | None:
        async with sessions() as db:
            row = (
                await db.execute(
                    sa.select(ApiKey.tenant_id, ApiKey.models).where(
                        ApiKey.key_hash == digest, ApiKey.revoked_at.is_(None)
                    )
                )
            ).first()
        if row is None:
            self.unknown.put(digest, True)
            return None
        models = frozenset(row.models) if row.models is not None else None
        return Principal(row.tenant_id, models=models)
