"""Every ``python`` block in docs/agents.md runs as written (``py`` blocks are illustrations)."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "agents.md"
BLOCK = re.compile(r"^(`{3,4})python\n(.*?)^\1$", re.DOTALL | re.MULTILINE)


def test_docs_examples_run() -> None:
    blocks = [m.group(2) for m in BLOCK.finditer(DOC.read_text(encoding="utf-8"))]
    assert len(blocks) >= 7
    namespace: dict[str, object] = {"__name__": "docs_agents"}
    for i, code in enumerate(blocks):
        exec(compile(code, f"docs/agents.md[block {i}]", "exec"), namespace)
