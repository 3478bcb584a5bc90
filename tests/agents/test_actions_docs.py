"""Every ``python`` block in docs/tools.md runs as written (``py`` blocks are illustrations)."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "tools.md"
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def test_docs_examples_run() -> None:
    blocks = BLOCK.findall(DOC.read_text(encoding="utf-8"))
    assert len(blocks) == 6
    namespace: dict[str, object] = {"__name__": "docs_tools"}
    for i, code in enumerate(blocks):
        exec(compile(code, f"docs/tools.md[block {i}]", "exec"), namespace)
