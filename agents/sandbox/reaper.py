"""Per-session uids (held by file locks across processes) and reaping of leftover sandboxes."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

from agents.sandbox import cgroups

log = logging.getLogger("agents.sandbox")


def _processes() -> Iterator[tuple[int, int, bytes]]:
    """(pid, real uid, cmdline) of every process."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            uid = os.stat(entry.path).st_uid
            with open(f"{entry.path}/cmdline", "rb") as handle:
                cmdline = handle.read()
        except OSError:
            continue
        yield pid, uid, cmdline


def kill_uid(uid: int) -> int:
    """SIGKILL every process owned by ``uid`` (a sandbox uid held by this process)."""
    killed = 0
    for _ in range(5):
        found = [pid for pid, owner, _ in _processes() if owner == uid]
        if not found:
            break
        for pid in found:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
    return killed


def kill_referencing(path: str) -> int:
    """SIGKILL every process whose command line mentions ``path`` (a dead pool's run dir)."""
    needle = path.encode()
    killed = 0
    for pid, _, cmdline in _processes():
        if needle in cmdline and pid != os.getpid():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
    return killed


class FileLock:
    """An exclusive ``flock`` that the kernel releases when its holder dies."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None

    def try_acquire(self) -> bool:
        """Take the lock without waiting; False if a live process holds it."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self.fd = fd
        return True

    def release(self) -> None:
        """Drop the lock."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class UidAllocator:
    """Hands out sandbox uids that no other live pool on this machine uses."""

    def __init__(self, lock_dir: Path, base: int, count: int) -> None:
        self.lock_dir = lock_dir
        self.base = base
        self.count = count
        self._next = os.getpid() % count
        self._held: dict[int, FileLock] = {}

    def acquire(self) -> int:
        """A free uid; processes a dead owner left under it are killed first."""
        self.lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        for _ in range(self.count):
            uid = self.base + self._next
            self._next = (self._next + 1) % self.count
            if uid in self._held:
                continue
            lock = FileLock(self.lock_dir / f"{uid}.lock")
            if lock.try_acquire():
                self._held[uid] = lock
                kill_uid(uid)
                return uid
        raise RuntimeError("no free sandbox uid left")

    def release(self, uid: int) -> None:
        """Kill what still runs under ``uid`` and free it."""
        lock = self._held.pop(uid, None)
        if lock is not None:
            kill_uid(uid)
            lock.release()

    def release_all(self) -> None:
        """Free every uid this allocator holds."""
        for uid in list(self._held):
            self.release(uid)


def reap_leftovers(run_root: Path) -> int:
    """Kill the sandboxes of pools whose process is gone; returns how many dirs were reaped."""
    reaped = 0
    if not run_root.is_dir():
        return 0
    for pool_dir in run_root.iterdir():
        lock = FileLock(pool_dir / ".lock")
        try:
            alive = not lock.try_acquire()
        except OSError:
            continue
        if alive:
            continue
        killed = kill_referencing(str(pool_dir))
        for dirs in cgroups.leftovers(pool_dir.name + "-"):
            cgroups.kill_group(dirs)
        shutil.rmtree(pool_dir, ignore_errors=True)
        lock.release()
        reaped += 1
        log.info("reaped leftover sandbox %s (%d processes killed)", pool_dir.name, killed)
    return reaped
