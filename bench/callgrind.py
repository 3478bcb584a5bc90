"""Counting a served gateway's machine instructions under callgrind (load-proof figures):
start the server as ``valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=DIR/cg.%p
…``, then ``control(pid, "-i", "on")``, and per window ``control(pid, "-z")`` (zero), the
requests, ``control(pid, "-d")`` (dump) and ``dumped(DIR, pid)``."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path


def control(pid: int, *args: str) -> None:
    """``callgrind_control ARGS PID``."""
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True)


def dumped(out: Path, pid: int) -> int:
    """Instructions of process ``pid``'s newest callgrind dump in ``out``."""
    newest = max(out.glob(f"cg.{pid}.*"), key=lambda p: int(p.suffix[1:]))
    found = re.search(r"^summary: (\d+)$", newest.read_text(errors="replace"), re.M)
    assert found is not None, newest
    return int(found.group(1))
