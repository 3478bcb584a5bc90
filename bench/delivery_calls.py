"""Python calls per streamed stored turn when every token is its own run event (load-proof).

``bench.responses_chain_cpu``'s turns stream their 64 tokens in one go, so the run's deltas
merge into two ``message.delta`` events and the per-event delivery path (the follower, the
Responses events, the SSE frames) hardly shows. On the engine at 32 chains a turn lasts
seconds and every ``event_flush_s`` (0.1 s) publishes a delta: tens of run events per turn.
Here ``event_flush_s`` is 0, so each of the scripted model's 64 tokens (1 ms apart) is one
``message.delta`` run event and one ``response.output_text.delta`` frame (and the same turn as
a chat completion has 64 chunks): the per-event path, 64 times a turn.

The app runs in process on SQLite, streamed through ``bench.asgi_stream``'s transport; the
client reads raw bytes only (its per-chunk work, counted too, is kept small). Per target: the
Python and C calls per turn (cProfile; total, and ``app_calls``: calls of the gateway's own
Python functions, under ``app/``) and the event loop thread's CPU per turn (noisy).

``python -m bench.delivery_calls [--turns 20] [--baseline DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import statistics
import time
from pathlib import Path
from typing import Any

from bench.inproc import REPLY, app_client, last_json


async def measure(turns: int) -> dict[str, Any]:
    async with app_client("delivery", chunk_delay_s=0.001, event_flush_s=0.0) as client:
        previous: list[str | None] = [None]
        messages: list[dict[str, str]] = []

        async def responses(k: int) -> int:
            body: dict[str, Any] = {"model": "scripted", "input": f"turn {k}",
                                    "stream": True, "max_output_tokens": 64}  # fmt: skip
            if previous[0]:
                body["previous_response_id"] = previous[0]
            raw = b""
            async with client.stream("POST", "/v1/responses", json=body) as resp:
                async for chunk in resp.aiter_raw():
                    raw += chunk
            head = raw.split(b"\n\n", 1)[0].split(b"data: ", 1)[1]
            previous[0] = json.loads(head)["response"]["id"]
            return raw.count(b"event: response.output_text.delta\n")

        async def chat(k: int) -> int:
            messages.append({"role": "user", "content": f"turn {k}"})
            body = {"model": "scripted", "messages": messages, "stream": True,
                    "max_tokens": 64}  # fmt: skip
            raw = b""
            async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
                async for chunk in resp.aiter_raw():
                    raw += chunk
            messages.append({"role": "assistant", "content": REPLY})
            return raw.count(b'"content":')

        out: dict[str, Any] = {}
        for name, turn in (("responses", responses), ("chat", chat)):
            for k in range(3):  # warm
                await turn(k)
            cpu, frames = [], 0
            for k in range(turns):
                start = time.thread_time()
                frames += await turn(k)
                cpu.append(time.thread_time() - start)
            prof = cProfile.Profile()
            prof.enable()
            for k in range(turns):
                await turn(k)
            prof.disable()
            stats = pstats.Stats(prof)
            app_calls = sum(
                v[1]  # ncalls
                for (file, _, _), v in stats.stats.items()  # type: ignore[attr-defined]
                if f"{os.sep}app{os.sep}" in file and "site-packages" not in file
            )
            out[name] = {
                "calls": round(stats.total_calls / turns),  # type: ignore[attr-defined]
                "app_calls": round(app_calls / turns),
                "cpu_us": round(1e6 * statistics.median(cpu)),
                "text_frames": round(frames / turns, 1),
            }
        return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--baseline", type=Path, help="another checkout, measured after this one")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    got = asyncio.run(measure(args.turns))
    if args.json:
        print(json.dumps(got))
        return 0
    print(json.dumps({"tree": "new", **got}), flush=True)
    if args.baseline is not None:
        flags = ["--json", "--turns", str(args.turns)]
        print(json.dumps({"tree": "old", **last_json(args.baseline, __file__, flags)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
