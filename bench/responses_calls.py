"""Python function calls per request of ``/v1/responses`` and ``/v1/chat/completions``, in
process: a measure of the work a front door does that does not move with the machine's load.

``python -m bench.responses_calls [--requests N]`` (run from a tree's root: it measures that
tree's code). The app runs in this process on a fresh SQLite database with the scripted model
in echo mode (as bench/responses.py's gateway), driven through httpx's ASGI transport;
cProfile counts every call made while ``N`` requests of each target run (the client's calls
included: the same for every target). Prints one line per target.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import logging
import pstats
import tempfile
from pathlib import Path
from typing import Any

import httpx
from asgi_lifespan import LifespanManager

from app.db.migrate import upgrade
from app.main import create_app
from app.settings import Settings

KEY = "bench-key"
CHAT = {"model": "scripted", "messages": [{"role": "user", "content": "hello world"}]}
RESPONSES = {"model": "scripted", "input": "hello world", "store": False}
TARGETS: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/v1/chat/completions", CHAT),
    "chat-stream": ("/v1/chat/completions", {**CHAT, "stream": True}),
    "responses": ("/v1/responses", RESPONSES),
    "responses-stream": ("/v1/responses", {**RESPONSES, "stream": True}),
    "responses-stored": ("/v1/responses", {"model": "scripted", "input": "hello world"}),
}


async def measure(requests: int, warm: int = 50) -> dict[str, float]:
    """Calls per request of each target."""
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite+aiosqlite:///{Path(tmp) / 'calls.db'}"
        await asyncio.to_thread(upgrade, url)
        settings = Settings(
            database_url=url,
            models=json.dumps([{"name": "scripted", "backend": "scripted"}]),
            api_keys=f"a:{KEY}",
            sandbox_enabled=False,
            access_log=False,
        )
        app = create_app(settings)
        out: dict[str, float] = {}
        async with LifespanManager(app):
            logging.getLogger("httpx").setLevel(logging.WARNING)
            transport = httpx.ASGITransport(app=app)
            headers = {"Authorization": f"Bearer {KEY}"}
            async with httpx.AsyncClient(
                transport=transport, base_url="http://t", headers=headers
            ) as client:
                for name, (path, body) in TARGETS.items():
                    for _ in range(warm):
                        (await client.post(path, json=body)).raise_for_status()
                    profile = cProfile.Profile()
                    profile.enable()
                    for _ in range(requests):
                        await client.post(path, json=body)
                    profile.disable()
                    out[name] = pstats.Stats(profile).total_calls / requests  # type: ignore[attr-defined]
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    for name, calls in asyncio.run(measure(args.requests)).items():
        print(f"{name}: {calls:,.0f} Python calls per request")


if __name__ == "__main__":
    main()
