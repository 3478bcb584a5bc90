"""Every ``python`` block in docs/multi-agent.md runs as written, top to bottom."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "multi-agent.md"
BLOCK = re.compile(r"^(`{3,4})python\n(.*?)^\1$", re.DOTALL | re.MULTILINE)


def test_multi_agent_docs_run() -> None:
    blocks = [m.group(2) for m in BLOCK.finditer(DOC.read_text(encoding="utf-8"))]
    assert len(blocks) >= 6
    namespace: dict[str, object] = {"__name__": "docs_multi_agent"}
    for i, code in enumerate(blocks):
        exec(compile(code, f"docs/multi-agent.md[block {i}]", "exec"), namespace)
