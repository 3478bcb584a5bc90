"""Per-kernel cgroups (v1 memory + pids, or v2) where the service may write them."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
GROUP = "agentstation"


@dataclass(frozen=True)
class KernelCgroup:
    """The cgroup directories of one kernel (one per controller; one in all on v2)."""

    dirs: tuple[Path, ...]

    @property
    def procs_files(self) -> tuple[Path, ...]:
        """Files a child writes its pid to, to join."""
        return tuple(d / "cgroup.procs" for d in self.dirs)

    def pids(self) -> set[int]:
        """Every process still in the group."""
        found: set[int] = set()
        for procs in self.procs_files:
            with contextlib.suppress(OSError):
                found |= {int(line) for line in procs.read_text().split()}
        return found

    def oom_killed(self) -> bool:
        """Whether the memory controller killed something in the group."""
        for d in self.dirs:
            for name, key in (("memory.oom_control", "oom_kill "), ("memory.events", "oom_kill ")):
                with contextlib.suppress(OSError):
                    for line in (d / name).read_text().splitlines():
                        if line.startswith(key) and int(line.split()[1]) > 0:
                            return True
        return False

    def kill(self) -> None:
        """SIGKILL every member until the group is empty, then remove it."""
        kill_group(self.dirs)


def kill_group(dirs: tuple[Path, ...]) -> None:
    """Kill every process in the cgroup dirs and remove them."""
    for d in dirs:
        with contextlib.suppress(OSError):
            (d / "cgroup.kill").write_text("1")  # v2: atomic
    for _ in range(50):
        pids: set[int] = set()
        for d in dirs:
            with contextlib.suppress(OSError):
                pids |= {int(x) for x in (d / "cgroup.procs").read_text().split()}
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
    for d in dirs:
        with contextlib.suppress(OSError):
            d.rmdir()


def _v2() -> bool:
    return (ROOT / "cgroup.controllers").exists()


def parents() -> tuple[Path, ...]:
    """The writable parent groups the kernels' groups go under (empty: no cgroups)."""
    if os.geteuid() != 0:
        return ()
    candidates = (ROOT / GROUP,) if _v2() else (ROOT / "memory" / GROUP, ROOT / "pids" / GROUP)
    made: list[Path] = []
    for parent in candidates:
        try:
            parent.mkdir(exist_ok=True)
            if _v2():
                (ROOT / "cgroup.subtree_control").write_text("+memory +pids")
                (parent / "cgroup.subtree_control").write_text("+memory +pids")
        except OSError:
            return ()
        made.append(parent)
    return tuple(made)


def create(name: str, memory_bytes: int, max_procs: int) -> KernelCgroup | None:
    """A fresh group for one kernel with its memory and process limits, or None."""
    bases = parents()
    if not bases:
        return None
    dirs = tuple(base / name for base in bases)
    try:
        for d in dirs:
            d.mkdir(exist_ok=True)
            _limit(d, memory_bytes, max_procs)
    except OSError:
        kill_group(dirs)
        return None
    return KernelCgroup(dirs)


def _limit(d: Path, memory_bytes: int, max_procs: int) -> None:
    files = {
        "memory.limit_in_bytes": memory_bytes,
        "memory.max": memory_bytes,
        "memory.swap.max": 0,
        "pids.max": max_procs,
    }
    for name, value in files.items():
        if (d / name).exists():
            (d / name).write_text(str(value))


def leftovers(prefix: str) -> list[tuple[Path, ...]]:
    """Groups whose name starts with ``prefix`` (one tuple per kernel, all controllers)."""
    by_name: dict[str, list[Path]] = {}
    for base in parents():
        with contextlib.suppress(OSError):
            for d in base.iterdir():
                if d.is_dir() and d.name.startswith(prefix):
                    by_name.setdefault(d.name, []).append(d)
    return [tuple(v) for v in by_name.values()]
