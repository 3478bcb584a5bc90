"""Session work dirs: owned by the session's uid, kept across cells and restarts."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from agents.sandbox.output import CellResult

_MAX_ENTRIES = 20_000  # stop counting past this many files (the cell gets an error anyway)


def ensure(workdir: Path, uid: int | None) -> None:
    """Create the dir, and hand it (recursively, if the uid changed) to ``uid``."""
    workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
    if uid is None or workdir.stat().st_uid == uid:
        return
    # A session gets a new uid after its kernels were stopped: its files follow it.
    for root, dirs, files in os.walk(workdir):
        for name in dirs + files:
            os.lchown(os.path.join(root, name), uid, uid)
    os.chown(workdir, uid, uid)
    workdir.chmod(0o700)


def usage(workdir: Path) -> tuple[int, int]:
    """(bytes, entries) used under ``workdir``, counting at most ``_MAX_ENTRIES`` entries."""
    total = entries = 0
    stack = [str(workdir)]
    while stack and entries < _MAX_ENTRIES:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    entries += 1
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    else:
                        total += entry.stat(follow_symlinks=False).st_blocks * 512
        except OSError:
            continue
    return total, entries


def check_size(dirs: Sequence[Path], limit: int, result: CellResult) -> None:
    """Turn the cell into an error when the writable dirs hold more than the limit."""
    # The socket dir is writable inside the sandbox too: count it with the work dir.
    counts = [usage(d) for d in dirs]
    used, entries = sum(c[0] for c in counts), sum(c[1] for c in counts)
    if used <= limit and entries < _MAX_ENTRIES:
        return
    mib = 1 << 20
    note = (
        f"DiskQuotaExceeded: the work dir holds {used // mib} MiB in {entries} entries "
        f"(limit {limit // mib} MiB, {_MAX_ENTRIES} entries): delete files"
    )
    result.notes.append(note)
    if result.status == "ok":
        result.status = "error"
        result.ename, result.evalue = "DiskQuotaExceeded", note.split(": ", 1)[1]


def save(workdir: Path, relpath: str, data: bytes, uid: int | None) -> Path:
    """Write ``data`` under the work dir, owned by the session's uid."""
    target = workdir / relpath
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    if uid is not None:
        for path in (target.parent, target):
            os.chown(path, uid, uid)
    return target


def remove(workdir: Path) -> None:
    """Delete a session's files."""
    shutil.rmtree(workdir, ignore_errors=True)
