"""KernelPool: one sandboxed kernel per (session, agent), started lazily (or ahead, with the
session: ``prestart``), bounded, reaped.

One module of ~370 lines on purpose: the pool's start-up (single-flight), admission, reaping
and shutdown share its lock and bookkeeping; the kernel itself is agents/sandbox/kernel.py.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import logging
import os
import secrets
import shutil
import sys
import time
from pathlib import Path

from agents import tracing
from agents.sandbox import cgroups, selftest, workdirs
from agents.sandbox.config import Level, SandboxConfig, level_rank
from agents.sandbox.kernel import SandboxKernel
from agents.sandbox.launcher import SANDBOX_WORKDIR, LaunchSpec, kernel_env, sandboxed
from agents.sandbox.loop import LoopThread
from agents.sandbox.output import CellResult
from agents.sandbox.reaper import FileLock, UidAllocator, reap_leftovers

log = logging.getLogger("agents.sandbox")
KernelKey = tuple[str, str]
# A stdio server's first step (run by the service's Python, before the sandbox drops its
# privileges): join the cgroup (its ``cgroup.procs`` files, then ``--``), then exec the rest.
JOIN_CGROUP = (
    "import os, sys\n"
    "cut = sys.argv.index('--')\n"
    "for procs in sys.argv[1:cut]:\n"
    "    open(procs, 'w').write(str(os.getpid()))\n"
    "os.execvp(sys.argv[cut + 1], sys.argv[cut + 1:])\n"
)


class SandboxError(RuntimeError):
    """Code cannot run: the isolation level is too low, or no kernel slot is free."""


class KernelPool:
    """Sandboxed IPython kernels for many sessions (see docs/sandbox.md)."""

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig.from_env()
        self.pool_id = f"p{os.getpid()}{secrets.token_hex(3)}"
        self.level: Level | None = None
        self.kernels: dict[KernelKey, SandboxKernel] = {}
        self._locks: dict[KernelKey, asyncio.Lock] = {}
        self._uids: dict[str, int] = {}
        self._stdio_groups: dict[str, list[cgroups.KernelCgroup]] = {}  # stdio servers' cgroups
        self._thread: LoopThread | None = None
        self._start_slots: asyncio.Semaphore | None = None
        self._slot_freed: asyncio.Condition | None = None
        self._reaper: asyncio.Task[None] | None = None
        self._lock: FileLock | None = None
        self._allocator: UidAllocator | None = None
        self._starting: asyncio.Future[Level] | None = None  # the one start-up (see _start)
        self._unused: set[SandboxKernel] = set()  # started, no cell run yet (fresh for one)
        self._prestarting: set[asyncio.Task[bool]] = set()  # cancelled by aclose (no leak)
        self._room_waiters = 0  # cells waiting in _make_room (a prestart never takes their slot)
        self.start_error: str | None = None  # why the last start-up failed (None: it did not)
        self.closed = False

    # -- public API (callable from any event loop or thread) --------------------------------

    async def start(self) -> Level:
        """Reap leftovers, detect the isolation level by a self-test, start idle reaping.

        Single-flight: concurrent callers share the one start-up, and this waits for it to
        end (the self-test's kernels are bounded by ``start_timeout_s`` each)."""
        return await self._loop().run(self._start(wait_s=None))

    def start_sync(self) -> Level:
        """``start()`` for sync code."""
        return self._loop().run_sync(self._start(wait_s=None))

    @property
    def level_ok(self) -> bool:
        """Whether the detected level meets ``min_level``."""
        minimum = level_rank(self.config.min_level)
        return self.level is not None and level_rank(self.level) >= minimum

    async def execute(
        self, session_key: str, code: str, *, agent: str = "default", timeout_s: float | None = None
    ) -> CellResult:
        """Run one cell in the (session, agent) kernel, starting it if needed."""
        tracer = tracing.TRACER  # a hook point (agents/tracing.py: the kernel cell's span)
        if tracer is None:
            return await self._loop().run(self._execute((session_key, agent), code, timeout_s))
        with tracer.span("kernel.cell", _cell_attributes(agent, code)) as span:
            cell = await self._loop().run(self._execute((session_key, agent), code, timeout_s))
            span.set_attribute("agentstation.kernel.status", cell.status)
            return cell

    def execute_sync(
        self, session_key: str, code: str, *, agent: str = "default", timeout_s: float | None = None
    ) -> CellResult:
        """``execute()`` for sync code."""
        tracer = tracing.TRACER
        if tracer is None:
            return self._loop().run_sync(self._execute((session_key, agent), code, timeout_s))
        with tracer.span("kernel.cell", _cell_attributes(agent, code)) as span:
            cell = self._loop().run_sync(self._execute((session_key, agent), code, timeout_s))
            span.set_attribute("agentstation.kernel.status", cell.status)
            return cell

    def prestart(
        self, session_key: str, agent: str = "default"
    ) -> concurrent.futures.Future[bool] | None:
        """Start the (session, agent) kernel in the background, so that its first cell finds
        it up; returns at once (None: nothing scheduled). Only into a free slot below
        ``max_kernels`` (never evicting a kernel), through the same ``start_concurrency``
        slots as any start; skipped while the pool's start-up has not ended, when the
        kernel exists or a cell is on it, or with ``prestart`` off. The future says whether a
        kernel was started; a failure is logged, never raised (the first cell starts one)."""
        if not self.config.prestart or self.closed or self.level is None or not self.level_ok:
            return None
        if self._thread is None:
            return None
        return self._thread.submit(self._prestart((session_key, agent)))

    async def shutdown_session(self, session_key: str, remove_files: bool = False) -> None:
        """Stop the session's kernels (all agents); with ``remove_files`` drop its work dir."""
        if self._thread is not None:
            await self._thread.run(self._shutdown_session(session_key, remove_files))

    def workdir(self, session_key: str) -> Path:
        """The session's work dir on the host."""
        name = hashlib.sha256(session_key.encode()).hexdigest()[:32]
        return self.config.base_dir / "sessions" / name

    async def stdio_launch(
        self, session_key: str, argv: list[str]
    ) -> tuple[list[str], dict[str, str], str]:
        """(argv, env, cwd) that run ``argv`` in the session's sandbox, as its kernels run
        (uid, rlimits, bubblewrap at L3, a cleared environment, and a cgroup with the
        kernels' memory and process limits where cgroups are writable), with stdin/stdout
        left to the caller (an MCP stdio server). The process joins its cgroup itself before
        anything else runs (``JOIN_CGROUP``: it writes its pid, then execs the sandbox), so
        stdin stays the protocol's; the group is removed with the session's kernels."""
        return await self._loop().run(self._stdio_launch(session_key, argv))

    async def _stdio_launch(
        self, session_key: str, argv: list[str]
    ) -> tuple[list[str], dict[str, str], str]:
        if self.level is None:
            await self._start(self.config.start_timeout_s)
        if not self.level_ok or self.level is None:
            raise SandboxError(
                f"sandbox isolation level {self.level} is below the required "
                f"{self.config.min_level}: refusing to start a stdio server"
            )
        workdir = self.workdir(session_key)
        uid = self._uid_for(session_key)
        workdirs.ensure(workdir, uid)
        run_dir = self.run_root / self.pool_id / f"stdio-{secrets.token_hex(4)}"
        run_dir.mkdir(mode=0o700, parents=True)
        if uid is not None:
            os.chown(run_dir, uid, uid)
        spec = LaunchSpec(self.level, uid, workdir, run_dir, run_dir / "unused.json")
        marker = f"{self.pool_id}-stdio"
        env = kernel_env(self.config, spec, marker)
        command = sandboxed(self.config, spec, argv)
        groups = self._stdio_groups.setdefault(session_key, [])
        for ended in [g for g in groups if not g.pids()]:  # servers that have exited
            ended.kill()
            groups.remove(ended)
        group = cgroups.create(
            f"{marker}-{run_dir.name}", self.config.memory_bytes, self.config.max_procs
        )
        if group is not None:
            groups.append(group)
            procs = [str(p) for p in group.procs_files]
            command = [sys.executable, "-c", JOIN_CGROUP, *procs, "--", *command]
        return command, env, str(workdir)

    def save_file(self, session_key: str, relpath: str, data: bytes) -> str:
        """Write a file into the session's work dir; returns its path as the kernel sees it."""
        target = workdirs.save(
            self.workdir(session_key), relpath, data, self._uids.get(session_key)
        )
        return f"{SANDBOX_WORKDIR}/{relpath}" if self.level == "L3" else str(target)

    async def aclose(self) -> None:
        """Stop every kernel and the pool's thread."""
        if self._thread is None or self.closed:
            self.closed = True
            return
        await self._thread.run(self._aclose())
        self._thread.stop()

    def close(self) -> None:
        """``aclose()`` for sync code."""
        if self._thread is None or self.closed:
            self.closed = True
            return
        self._thread.run_sync(self._aclose())
        self._thread.stop()

    # -- on the pool's loop ------------------------------------------------------------------

    def _loop(self) -> LoopThread:
        if self.closed:
            raise SandboxError("the kernel pool is closed")
        if self._thread is None:
            self._thread = LoopThread(f"sandbox-{self.pool_id}")
        return self._thread

    @property
    def run_root(self) -> Path:
        """Parent of every pool's run dir (sockets, connection files)."""
        return self.config.base_dir / "run"

    async def _start(self, wait_s: float | None) -> Level:
        """Single-flight: every caller (the service's start-up self-test, a tool call that
        arrives meanwhile) waits for the one start-up, a tool call at most ``wait_s``. A
        failed start-up is a ``SandboxError`` for each of them, and the next call retries."""
        if self.level is not None:
            return self.level
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._start_once())
        starting = self._starting
        try:
            return await asyncio.wait_for(asyncio.shield(starting), wait_s)
        except TimeoutError:
            raise SandboxError(
                f"the sandbox is still starting (self-test running for over {wait_s:g} s, "
                "AGENTSTATION_SANDBOX_START_TIMEOUT_S); try again shortly"
            ) from None
        except SandboxError:
            raise
        except Exception as exc:
            raise SandboxError(f"the sandbox failed to start: {type(exc).__name__}") from exc
        finally:
            failed = starting.done() and (starting.cancelled() or starting.exception() is not None)
            if failed and self._starting is starting:
                self._starting = None  # a failed start-up may be tried again

    async def _start_once(self) -> Level:
        try:
            level = await self._detect()
        except BaseException as exc:
            self.start_error = f"{type(exc).__name__}: {exc}"
            log.exception("the sandbox failed to start")
            raise
        self.start_error = None
        return level

    async def _detect(self) -> Level:
        self._prepare_dirs()
        self._start_slots = asyncio.Semaphore(max(1, self.config.start_concurrency))
        self._slot_freed = asyncio.Condition()
        if not self.config.kernel_python.exists():
            log.warning(
                "kernel environment %s missing (run scripts/install-kernel-env.sh); "
                "falling back to the service's Python at L0",
                self.config.kernel_env,
            )
            self.config = dataclasses.replace(self.config, kernel_env=Path(sys.prefix))
        self.level = await selftest.detect(self)
        log_fn = log.info if self.level_ok else log.error
        log_fn("sandbox isolation level %s (minimum %s)", self.level, self.config.min_level)
        self._reaper = asyncio.create_task(self._reap_idle())
        return self.level

    def _prepare_dirs(self) -> None:
        base = self.config.base_dir
        for d in (base, base / "sessions", self.run_root):
            d.mkdir(parents=True, exist_ok=True)
            # Traversable, not listable: a kernel reaches only dirs whose names it is given.
            d.chmod(0o711)
        if reaped := reap_leftovers(self.run_root):
            log.warning("reaped %d leftover sandbox run dirs", reaped)
        own = self.run_root / self.pool_id
        if self._lock is None:  # once per pool (a start-up that failed later may be retried)
            own.mkdir(mode=0o711, exist_ok=True)
            self._lock = FileLock(own / ".lock")
            self._lock.try_acquire()
        # Machine-wide: a pool releasing a uid kills its processes, so pools never share one.
        lock_dir = Path("/run/agentstation/uids") if os.geteuid() == 0 else base / "uids"
        self._allocator = UidAllocator(lock_dir, self.config.uid_base, self.config.uid_count)

    def _uid_for(self, session_key: str) -> int | None:
        if self.level == "L0" or self._allocator is None:
            return None
        uid = self._uids.get(session_key)
        if uid is None:
            uid = self._uids[session_key] = self._allocator.acquire()
        return uid

    def new_kernel(self, level: Level, name: str, workdir: Path, uid: int | None) -> SandboxKernel:
        """A kernel object (not started) with its own run dir under this pool's."""
        run_dir = self.run_root / self.pool_id / name
        return SandboxKernel(
            self.config, level, name=f"{self.pool_id}-{name}", run_dir=run_dir,
            workdir=workdir, uid=uid,
        )  # fmt: skip

    async def _execute(self, key: KernelKey, code: str, limit_s: float | None) -> CellResult:
        if self.level is None:
            await self._start(self.config.start_timeout_s)
        if not self.level_ok:
            raise SandboxError(
                f"sandbox isolation level {self.level} is below the required "
                f"{self.config.min_level} (AGENTSTATION_SANDBOX_MIN_LEVEL): refusing to run "
                "code; see docs/sandbox.md"
            )
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            kernel = await self._kernel(key)
            fresh = kernel in self._unused  # its first cell (it may have been prestarted)
            self._unused.discard(kernel)
            result = await kernel.execute(code, limit_s or self.config.timeout_s)
            result.kernel, result.fresh = kernel.name, fresh
            if result.status in ("timeout", "died"):
                await self._hard_restart(key, kernel, result)
            dirs = [self.workdir(key[0]), kernel.run_dir]
            workdirs.check_size(dirs, self.config.workdir_bytes, result)
            return result

    async def _hard_restart(self, key: KernelKey, kernel: SandboxKernel, res: CellResult) -> None:
        """Kill the whole sandbox; the next cell starts a fresh kernel on new sockets."""
        oom = kernel.oom_killed()
        await self._drop(key)
        code = kernel.proc.returncode if kernel.proc else None
        grace = self.config.interrupt_grace_s
        res.ename, res.evalue = (
            ("KernelDied", f"the kernel died ({'out of memory' if oom else f'exit code {code}'})")
            if res.status == "died"
            else ("TimeoutError", f"the cell did not stop within {grace:g} s of an interrupt")
        )
        res.notes.append(
            f"{res.ename}: {res.evalue}; the kernel was restarted "
            "(variables are lost, files in the work dir are kept)"
        )

    async def _kernel(self, key: KernelKey) -> SandboxKernel:
        kernel = self.kernels.get(key)
        if kernel is not None and kernel.alive:
            return kernel
        if kernel is not None:
            await self._drop(key)
        await self._make_room()
        return await self._spawn(key)

    async def _prestart(self, key: KernelKey) -> bool:
        """``prestart`` on the pool's loop: a kernel only into a free slot, else nothing."""
        task = asyncio.current_task()
        if self.closed or task is None:
            return False
        self._prestarting.add(task)
        try:
            return await self._prestart_in_slot(key)
        finally:
            self._prestarting.discard(task)

    async def _prestart_in_slot(self, key: KernelKey) -> bool:
        lock = self._locks.setdefault(key, asyncio.Lock())
        if lock.locked():  # a cell (or another prestart) is on this kernel already
            return False
        try:
            async with lock:
                kernel = self.kernels.get(key)
                if kernel is not None and kernel.alive:
                    return False
                if kernel is not None:
                    await self._drop(key)
                if len(self.kernels) >= self.config.max_kernels or self._room_waiters:
                    log.debug("no free kernel slot: session %s starts its kernel lazily", key[0])
                    return False
                await self._spawn(key)  # no await since the check: the slot is this one's
                return True
        except Exception:
            log.exception("kernel of session %s: the start ahead of its first cell failed", key[0])
            return False

    async def _spawn(self, key: KernelKey) -> SandboxKernel:
        """Start the key's kernel in a slot the caller made sure is free."""
        assert self._start_slots is not None and self.level is not None
        workdir = self.workdir(key[0])
        uid = self._uid_for(key[0])
        workdirs.ensure(workdir, uid)
        kernel = self.new_kernel(self.level, secrets.token_hex(4), workdir, uid)
        self.kernels[key] = kernel  # counts against max_kernels while it starts
        kernel.busy = True  # not a candidate for eviction or idle reaping while starting
        try:
            async with self._start_slots:
                await kernel.start(self.pool_id)
        except BaseException:
            self.kernels.pop(key, None)
            kernel.kill()
            raise
        finally:
            kernel.busy = False
        self._unused.add(kernel)
        return kernel

    async def _make_room(self) -> None:
        """Below max_kernels: evict an idle kernel (one started ahead that never ran a cell
        first: it holds no session's state; else the least recently used), or wait, or fail."""
        assert self._slot_freed is not None
        deadline = time.monotonic() + self.config.queue_timeout_s
        while len(self.kernels) >= self.config.max_kernels:
            idle = [
                (k not in self._unused, k.last_used, key)
                for key, k in self.kernels.items()
                if not k.busy
            ]
            if idle:
                victim = min(idle)[2]
                log.info("evicting idle kernel of session %s to make room", victim[0])
                await self._drop(victim)
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SandboxError(
                    f"all {self.config.max_kernels} kernels are busy "
                    "(AGENTSTATION_SANDBOX_MAX_KERNELS); try again later"
                )
            self._room_waiters += 1
            try:
                async with self._slot_freed:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._slot_freed.wait(), remaining)
            finally:
                self._room_waiters -= 1

    async def _drop(self, key: KernelKey) -> None:
        kernel = self.kernels.pop(key, None)
        if kernel is not None:
            self._unused.discard(kernel)
            await kernel.shutdown()
        if self._slot_freed is not None:
            async with self._slot_freed:
                self._slot_freed.notify_all()

    async def _shutdown_session(self, session_key: str, remove_files: bool) -> None:
        for key in [k for k in self.kernels if k[0] == session_key]:
            await self._drop(key)
        for group in self._stdio_groups.pop(session_key, []):
            group.kill()
        uid = self._uids.pop(session_key, None)
        if uid is not None and self._allocator is not None:
            self._allocator.release(uid)  # also kills what a kernel left running
        if remove_files:
            workdirs.remove(self.workdir(session_key))

    async def _reap_idle(self) -> None:
        period = max(0.5, min(30.0, self.config.idle_timeout_s / 4))
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            for key, kernel in list(self.kernels.items()):
                idle = now - kernel.last_used
                if not kernel.busy and (idle > self.config.idle_timeout_s or not kernel.alive):
                    log.info("stopping kernel of session %s (idle %.0f s)", key[0], idle)
                    try:
                        await self._drop(key)
                    except Exception:  # one failed stop must not end reaping for all
                        log.exception("stopping kernel of session %s failed", key[0])

    async def _aclose(self) -> None:
        self.closed = True
        if self._reaper is not None:
            self._reaper.cancel()
        # A start ahead still under way would outlive the loop: its kernel and client sockets
        # never closed (a ResourceWarning in a later test). Cancelled, it kills what it made.
        starting = list(self._prestarting)
        for task in starting:
            task.cancel()
        await asyncio.gather(*starting, return_exceptions=True)
        await asyncio.gather(*(self._drop(key) for key in list(self.kernels)))
        for groups in self._stdio_groups.values():
            for group in groups:
                group.kill()
        self._stdio_groups.clear()
        if self._allocator is not None:
            self._allocator.release_all()
        shutil.rmtree(self.run_root / self.pool_id, ignore_errors=True)
        if self._lock is not None:
            self._lock.release()


def _cell_attributes(agent: str, code: str) -> dict[str, object]:
    """A kernel cell span's attributes (the code itself is the tool call's arguments)."""
    return {"agentstation.kernel.agent": agent, "agentstation.kernel.code_length": len(code)}
