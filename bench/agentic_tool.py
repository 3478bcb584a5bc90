"""bench/agentic.py's server-side tool: the sandboxed IPython tool with the cell pinned.

Registered in the benchmark's gateway through the ``agentstation.tools`` entry point
(``bench/agentic_site``, put on the gateway's ``PYTHONPATH``): the product's plugin path. It
runs cells exactly as ``IPythonInteractive`` does (the session's sandboxed kernel); only the
schema the model sees differs: ``command`` can only be ``bench.agentic_cell.CELL``.

With ``BENCH_AGENTIC_METRICS_PORT`` set, importing it also serves prometheus_client's default
registry on that port: the in-process vLLM engine's own counters (``vllm:prefix_cache_*``),
which the gateway's ``/metrics`` (a registry of its own) does not show, and a count of the
database statements the gateway sends (``bench_agentic_db_statements_total``).
"""

from __future__ import annotations

import copy
import os
from typing import Any

from agents.actions.ipython import AsyncIPythonInteractive
from bench.agentic_cell import DESCRIPTION, PARAMETERS, TOOL_NAME


class AsyncIPythonBenchCell(AsyncIPythonInteractive):
    """The sandboxed IPython tool whose ``command`` is pinned to the benchmark's cell."""

    def tool_schemas(self, separator: str = "__") -> list[dict[str, Any]]:
        schemas = super().tool_schemas(separator)
        for schema in schemas:
            schema["function"].update(
                name=TOOL_NAME, description=DESCRIPTION, parameters=copy.deepcopy(PARAMETERS)
            )
        return schemas


if os.environ.get("BENCH_AGENTIC_METRICS_PORT"):
    import prometheus_client
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    from app.db import raw

    # Database statements the gateway sends (the run store's raw ones and SQLAlchemy's):
    # statements per model call, a load-proof figure of the run's storage work.
    STATEMENTS = prometheus_client.Counter(
        "bench_agentic_db_statements", "Database statements sent by the gateway"
    )
    raw.listeners.append(lambda _sql: STATEMENTS.inc())
    event.listen(Engine, "before_cursor_execute", lambda *_a, **_k: STATEMENTS.inc())
    prometheus_client.start_http_server(
        int(os.environ["BENCH_AGENTIC_METRICS_PORT"]), addr="127.0.0.1"
    )
