"""Prints the spans of some traces as JSON, read through Arize Phoenix's own client.

Run by tests/ops/test_tracing_phoenix.py with the Phoenix venv's Python (scripts/
install-phoenix-env.sh), where ``phoenix.client`` is installed; the service's venv has no
Phoenix. Usage: ``python phoenix_spans.py BASE_URL PROJECT TRACE_ID...``.
"""

from __future__ import annotations

import json
import sys

from phoenix.client import Client


def main() -> None:
    base_url, project, *trace_ids = sys.argv[1:]
    client = Client(base_url=base_url)
    spans = client.spans.get_spans(project_identifier=project, trace_ids=trace_ids, limit=10000)
    json.dump(spans, sys.stdout, default=str)


if __name__ == "__main__":
    main()
