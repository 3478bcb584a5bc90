"""Declarative base with constraint naming conventions (stable Alembic names) and common types."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, configure_mappers
from sqlalchemy.types import TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    """Base of every table."""

    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend (SQLite returns naive values)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if isinstance(value, datetime) and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value  # type: ignore[no-any-return]


def utcnow() -> datetime:
    """Now, in UTC."""
    return datetime.now(UTC)


T = TypeVar("T", bound=Base)


def transient(cls: type[T], **columns: Any) -> T:
    """A transient ``cls`` with its columns set directly in its ``__dict__``, as the ORM loads
    rows: no attribute events (~1 µs instead of ~15 for a Run). For objects kept in memory
    (written with Core or raw SQL, or never): set every column; they are not change-tracked."""
    mapper = cls.__mapper__
    if not mapper.configured:  # attribute implementations are set up on configuration
        configure_mappers()
    obj: T = mapper.class_manager.new_instance()
    obj.__dict__.update(columns)
    return obj


def new_id(prefix: str) -> str:
    """A random public id such as ``run_3f2a…``: the prefix and a version-4 UUID's 32 hex
    digits, as ``uuid.uuid4().hex`` writes them (its version and variant bits set on 16 random
    bytes directly: ``uuid.UUID``'s constructor was ~200 bytecodes, two ids per new session)."""
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40  # version 4
    b[8] = (b[8] & 0x3F) | 0x80  # variant RFC 4122
    return f"{prefix}_{b.hex()}"
