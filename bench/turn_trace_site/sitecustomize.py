"""Loaded by every Python process started with ``PYTHONPATH=bench/turn_trace_site:.``; traces
the gateway's turns when ``TRACE_TURNS`` is set (bench/turn_trace.py)."""

import os
import sys

if os.environ.get("TRACE_TURNS") and "agentstation" in " ".join(sys.argv):
    from bench.turn_trace import install

    install(os.environ["TRACE_TURNS"])
