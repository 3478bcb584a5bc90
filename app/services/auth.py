"""API keys: static keys from settings and hashed keys in the database; tenants."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.base import new_id
from app.db.models import ApiKey, Tenant
from app.errors import Unauthorized

ANONYMOUS_TENANT = "default"


@dataclass(frozen=True)
class Principal:
    """Who is calling: a tenant (and whether it came without a key)."""

    tenant_id: str
    anonymous: bool = False


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


async def create_key(db: AsyncSession, tenant_id: str) -> str:
    """Store a new hashed key for ``tenant_id`` and return the plaintext once."""
    await ensure_tenant(db, tenant_id)
    key = generate_key()
    db.add(ApiKey(id=new_id("key"), tenant_id=tenant_id, key_hash=hash_key(key), prefix=key[:8]))
    await db.flush()
    return key


class Authenticator:
    """Resolves a bearer key to a principal."""

    def __init__(self, static_keys: list[tuple[str, str]], allow_anonymous: bool) -> None:
        self.static = {hash_key(key): tenant for tenant, key in static_keys}
        self.allow_anonymous = allow_anonymous

    async def any_stored_key(self, db: AsyncSession) -> bool:
        """True once a key was created with the CLI (which ends anonymous access)."""
        found = await db.scalar(sa.select(ApiKey.id).where(ApiKey.revoked_at.is_(None)).limit(1))
        return found is not None

    async def authenticate(self, db: AsyncSession, authorization: str | None) -> Principal:
        """The principal for an ``Authorization`` header value, or 401."""
        if not authorization:
            if self.allow_anonymous and not await self.any_stored_key(db):
                return Principal(ANONYMOUS_TENANT, anonymous=True)
            raise Unauthorized("missing API key: send Authorization: Bearer <key>")
        scheme, _, key = authorization.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise Unauthorized("invalid Authorization header: expected Bearer <key>")
        digest = hash_key(key.strip())
        for known, tenant in self.static.items():
            if hmac.compare_digest(known, digest):
                return Principal(tenant)
        row = await db.scalar(
            sa.select(ApiKey).where(ApiKey.key_hash == digest, ApiKey.revoked_at.is_(None))
        )
        if row is None:
            raise Unauthorized("invalid API key")
        return Principal(row.tenant_id)
