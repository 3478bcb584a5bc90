"""Collect one cell's outputs from IOPub messages, bounded in bytes."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from typing import Any, Literal

CellStatus = Literal["ok", "error", "timeout", "died", "refused"]
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def strip_ansi(text: str) -> str:
    """Remove terminal colour codes (IPython tracebacks are coloured)."""
    return _ANSI.sub("", text)


@dataclass
class CellResult:
    """What one cell produced: text, images, the error if any, and how it ended."""

    status: CellStatus = "ok"
    text: list[str] = field(default_factory=list)
    images: list[bytes] = field(default_factory=list)
    ename: str = ""
    evalue: str = ""
    traceback: list[str] = field(default_factory=list)
    truncated: bool = False
    notes: list[str] = field(default_factory=list)
    execution_count: int | None = None
    kernel: str = ""  # the kernel that ran it (its name in the pool)
    fresh: bool = False  # that kernel was started for this cell (nothing defined before it)

    @property
    def output(self) -> str:
        """All text output of the cell, in order, with any truncation note."""
        return "".join(self.text)

    def error_summary(self, lines: int = 3) -> str:
        """The traceback's last lines (what lagent reports), or the notes."""
        if self.traceback:
            clean = [strip_ansi(x) for x in self.traceback]
            tail = [x for x in "\n".join(clean).splitlines() if x.strip()]
            return "\n".join(tail[-lines:])
        if self.ename:
            return f"{self.ename}: {self.evalue}"
        return "\n".join(self.notes)


class OutputCollector:
    """Accumulates IOPub content up to ``limit`` bytes; the rest is dropped with a note."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.result = CellResult()
        self.idle = False

    def _room(self, size: int) -> bool:
        if self.used + size <= self.limit:
            self.used += size
            return True
        self.truncate()
        return False

    def truncate(self) -> None:
        """Mark the cell truncated (once, with a note)."""
        if not self.result.truncated:
            self.result.truncated = True
            self.result.notes.append(
                f"[output truncated: the cell printed more than {self.limit} bytes]"
            )

    def add_text(self, text: str) -> None:
        """Append text, cutting it at the byte limit."""
        data = text.encode("utf-8", "replace")
        if self._room(len(data)):
            self.result.text.append(text)
            return
        room = self.limit - self.used
        if room > 0:
            self.used = self.limit
            self.result.text.append(data[:room].decode("utf-8", "ignore"))

    def feed(self, msg: dict[str, Any]) -> None:
        """Handle one IOPub message belonging to the cell."""
        kind = msg["msg_type"]
        content = msg["content"]
        if kind == "stream":
            self.add_text(content.get("text", ""))
        elif kind in ("execute_result", "display_data"):
            self._add_data(content.get("data", {}))
        elif kind == "error":
            self.result.ename = content.get("ename", "")
            self.result.evalue = content.get("evalue", "")
            self.result.traceback = list(content.get("traceback", []))[-50:]
        elif kind == "status" and content.get("execution_state") == "idle":
            self.idle = True

    def _add_data(self, data: dict[str, Any]) -> None:
        png = data.get("image/png")
        if isinstance(png, str):
            raw = base64.b64decode(png)
            if self._room(len(raw)):
                self.result.images.append(raw)
            return
        text = data.get("text/plain")
        if isinstance(text, str):
            self.add_text(text if text.endswith("\n") else text + "\n")
