"""Service configuration from the environment (prefix ``AGENTSTATION_``)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from app.ops.config import OpsSettings


class ModelConfig(BaseModel):
    """One configured model; backend-specific keys stay in the model's extra fields."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1)
    backend: str = Field(min_length=1)  # a name in app.models.backends (built in or installed)

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, value: str) -> str:
        from app.models.backends import backend_names

        if value not in backend_names():
            raise ValueError(f"unknown model backend {value!r}; known: {backend_names()}")
        return value

    def options(self) -> dict[str, Any]:
        """Every key of the entry (for backend constructors)."""
        return self.model_dump()


def parse_models(value: Any) -> list[ModelConfig]:
    """``MODELS`` as inline JSON, a path to a YAML/JSON file, or an already parsed list."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        text = value.strip()
        if not text.startswith(("[", "{")):
            text = Path(text).expanduser().read_text(encoding="utf-8")
        value = yaml.safe_load(text)  # YAML is a superset of JSON
    if isinstance(value, dict):
        value = value.get("models", [value])
    if not isinstance(value, list):
        raise ValueError("MODELS must be a list of model entries")
    models = [m if isinstance(m, ModelConfig) else ModelConfig.model_validate(m) for m in value]
    names = [m.name for m in models]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate model names in MODELS: {names}")
    return models


def parse_api_keys(value: Any) -> list[tuple[str, str]]:
    """``tenant:key,tenant:key`` pairs."""
    if value is None or value == "":
        return []
    if isinstance(value, list):
        items = [str(v) for v in value]
    else:
        items = [v.strip() for v in str(value).split(",") if v.strip()]
    pairs: list[tuple[str, str]] = []
    for item in items:
        tenant, sep, key = item.partition(":")
        if not sep or not tenant or not key:
            raise ValueError("API_KEYS entries must look like tenant:key")
        pairs.append((tenant.strip(), key.strip()))
    return pairs


class Settings(OpsSettings):
    """Everything configurable; see docs/api.md (Configuration) and docs/operations.md."""

    model_config = SettingsConfigDict(env_prefix="AGENTSTATION_", extra="ignore")

    database_url: str = "sqlite+aiosqlite:///./agentstation.db"
    # PostgreSQL pool per replica (SQLite ignores these): size + overflow connections at most.
    # The pool keeps up to ``db_pool_size`` open; overflow connections are closed when given
    # back, so the size covers the run slots (32 of 40): see docs/operations.md.
    db_pool_size: int = Field(default=32, ge=1)
    db_max_overflow: int = Field(default=8, ge=0)
    db_connect_timeout_s: float = Field(default=5.0, gt=0)
    # A pooled connection idle this long is pinged before use (0: every use, pool_pre_ping).
    db_ping_idle_s: float = Field(default=1.0, ge=0)
    # Per-replica caches (0 disables one): how long another replica's change can go unseen here.
    auth_cache_ttl_s: float = Field(default=5.0, ge=0)  # stored API keys, "no key yet"
    agent_cache_ttl_s: float = Field(default=2.0, ge=0)  # each tenant's agents by name
    # What a turn reads of a session (tenants and agents without budgets): see services/runs.
    session_cache_ttl_s: float = Field(default=2.0, ge=0)
    tenant_budget_ttl_s: float = Field(default=2.0, ge=0)  # "this tenant has no budget"
    usage_flush_s: float = Field(default=1.0, ge=0)  # unlimited tenants' usage, batched
    models: Annotated[list[ModelConfig], NoDecode] = Field(default_factory=list)
    api_keys: Annotated[list[tuple[str, str]], NoDecode] = Field(default_factory=list)
    host: str = "127.0.0.1"
    port: int = 8000
    max_body_bytes: int = 1_048_576
    cors_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Runs and streams
    sse_ping_s: float = 15.0
    sse_retry_ms: int = 3000
    event_flush_s: float = 0.1  # merged deltas go to live followers at least this often
    event_store_s: float = Field(default=1.0, ge=0)  # ...and are stored at least this often
    cancel_timeout_s: float = 1.0
    # How often each replica looks for runs waiting for approval past their timeout_s.
    approval_check_s: float = Field(default=1.0, gt=0, le=3600)
    # Replica liveness (app/runtime/liveness.py): a heartbeat in the database this often; a
    # replica with no connection left is dead at once, one whose heartbeat is older than
    # replica_ttl_s (hung or stopped, yet connected) is fenced; a live replica interrupts their
    # runs. The beat comes from a thread of its own, as of the event loop's last tick (0.5 s).
    heartbeat_s: float = Field(default=1.0, gt=0)
    # Part of this replica's id (logs, the replicas table): e.g. the pod's name; default: host.
    replica_name: str = Field(default="", max_length=32)
    replica_ttl_s: float = Field(default=10.0, gt=0)
    # Outbound URLs agent specs may name beyond public hosts (app.outbound): host names,
    # host:port pairs, CIDR ranges.
    outbound_allow: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Sandbox: other AGENTSTATION_SANDBOX_* variables are read by agents.sandbox.SandboxConfig.
    sandbox_enabled: bool = True
    # Without MODELS, `agentstation serve` creates the demo agents (app.demo_agents); 0 skips.
    demo_agents: bool = True
    # The playground links a run's trace id here ({trace_id} replaced), e.g. a Jaeger or
    # Phoenix trace page; without it the id shows as text (docs/playground.md).
    trace_url: str | None = Field(default=None, max_length=2048, pattern=r"^https?://\S+$")

    @field_validator("models", mode="before")
    @classmethod
    def _models(cls, value: Any) -> list[ModelConfig]:
        return parse_models(value)

    @field_validator("api_keys", mode="before")
    @classmethod
    def _api_keys(cls, value: Any) -> list[tuple[str, str]]:
        return parse_api_keys(value)

    @field_validator("cors_origins", "outbound_allow", mode="before")
    @classmethod
    def _cors(cls, value: Any) -> list[str]:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return [str(v) for v in json.loads(text)]
            return [v.strip() for v in text.split(",") if v.strip()]
        return list(value or [])

    @property
    def is_sqlite(self) -> bool:
        """True when the database is SQLite."""
        return self.database_url.startswith("sqlite")

    @property
    def is_loopback(self) -> bool:
        """True when the server binds only to the loopback interface."""
        return self.host in {"127.0.0.1", "localhost", "::1"}


@lru_cache
def get_settings() -> Settings:
    """The process settings, read once from the environment."""
    return Settings()
