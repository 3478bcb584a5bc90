"""Operational settings (env prefix ``AGENTSTATION_``); the gateway's ``Settings`` inherits them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.ops.ratelimit import RateLimit


class OpsSettings(BaseSettings):
    """Rate limits, logs and retention; every field is documented in docs/operations.md."""

    model_config = SettingsConfigDict(env_prefix="AGENTSTATION_", extra="ignore")

    rate_limit: str | None = None  # "120/minute" per API key, fleet-wide on PostgreSQL; None = off
    log_format: Literal["text", "json"] = "text"
    log_level: str = "INFO"
    # One structured line per request (agentstation.access); off by default: a log line costs
    # about half of a bare request's CPU time, and a load balancer usually logs requests too.
    access_log: bool = False
    session_ttl_s: float = Field(default=0.0, ge=0)  # idle finished sessions; 0 = keep
    run_events_ttl_s: float = Field(default=0.0, ge=0)  # event logs of finished runs; 0 = keep
    retention_interval_s: float = Field(default=300.0, gt=0)
    # On shutdown, running runs get this long to finish before they are interrupted
    # (0: interrupt at once; the images set 20).
    shutdown_grace_s: float = Field(default=0.0, ge=0)
    # Idle HTTP keep-alive connections are closed after this long. It must outlast the idle
    # expiry of every client and proxy in front (httpx 5 s, aiohttp 15 s, nginx/ALB 60 s), or a
    # request sent as the server closes gets no response (app/ops/keepalive.py).
    keep_alive_s: int = Field(default=75, ge=1)

    @field_validator("rate_limit")
    @classmethod
    def _rate_limit(cls, value: str | None) -> str | None:
        if value is None or not value.strip() or value.strip().lower() in {"0", "off", "none"}:
            return None
        RateLimit.parse(value)  # fail at start-up, not on the first request
        return value.strip()

    @field_validator("log_level")
    @classmethod
    def _log_level(cls, value: str) -> str:
        level = value.strip().upper()
        if level not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
            raise ValueError(f"unknown log level {value!r}")
        return level
