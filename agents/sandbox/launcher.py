"""How a kernel process is spawned at each level: command line, environment, child setup."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from agents.sandbox.config import Level, SandboxConfig

#: Where the session's work dir appears inside a bubblewrap sandbox.
SANDBOX_WORKDIR = "/workspace"


@dataclass(frozen=True)
class LaunchSpec:
    """Everything needed to spawn one kernel."""

    level: Level
    uid: int | None
    workdir: Path
    run_dir: Path
    connection_file: Path
    cgroup_procs: tuple[Path, ...] = ()


def bwrap_path() -> str | None:
    """The bubblewrap binary, if installed."""
    return shutil.which("bwrap") or ("/usr/bin/bwrap" if Path("/usr/bin/bwrap").exists() else None)


def kernel_workdir(spec: LaunchSpec) -> str:
    """The work dir path as code inside the kernel sees it."""
    return SANDBOX_WORKDIR if spec.level == "L3" else str(spec.workdir)


def kernel_env(config: SandboxConfig, spec: LaunchSpec, marker: str) -> dict[str, str]:
    """A cleared environment: nothing of the service's (keys, DB URL) reaches the kernel."""
    home = kernel_workdir(spec)
    return {
        "PATH": f"{config.kernel_env}/bin:/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp" if spec.level == "L3" else home,
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
        "MPLCONFIGDIR": ("/tmp" if spec.level == "L3" else home) + "/.matplotlib",
        "IPYTHONDIR": ("/tmp" if spec.level == "L3" else home) + "/.ipython",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        # Threads multiply virtual memory (RLIMIT_AS) and processes (RLIMIT_NPROC).
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MALLOC_ARENA_MAX": "2",
        "AGENTSTATION_SANDBOX_MARKER": marker,
    }


STARTUP_FILE = "startup.py"
# Cooperative: cuts a huge print inside the kernel (so it is fast and shows its first part).
# Code can bypass it; the service-side limit and zmq MAXMSGSIZE still hold then.
_STARTUP = """
def _agentstation_cap_output(limit):
    import sys
    state = {"left": limit}
    def reset(*_):
        state["left"] = limit
    def capped(write):
        def capped_write(text):
            left = state["left"]
            if len(text) > left:
                state["left"] = 0
                if left > 0:
                    write(text[:left])
                return len(text)
            state["left"] = left - len(text)
            return write(text)
        return capped_write
    for stream in (sys.stdout, sys.stderr):
        stream.write = capped(stream.write)
    get_ipython().events.register("pre_execute", reset)
_agentstation_cap_output(%d)
del _agentstation_cap_output
"""


def write_startup(config: SandboxConfig, run_dir: Path) -> None:
    """The file the kernel runs at start (one character over the limit marks truncation)."""
    (run_dir / STARTUP_FILE).write_text(_STARTUP % (config.output_bytes + 1))


def sandboxed(config: SandboxConfig, spec: LaunchSpec, argv: list[str]) -> list[str]:
    """``argv`` as it runs in the session's sandbox: limits and the session uid
    (``_privilege_drop``), and at L3 bubblewrap (no network, only the work dir writable).
    Used for programs other than the kernel (an MCP server over stdio)."""
    inner = argv
    if spec.level == "L3":
        bwrap = bwrap_path()
        if bwrap is None:
            raise RuntimeError("bubblewrap (bwrap) is not installed")
        inner = [bwrap, *_bwrap_args(config, spec), "--", *argv]
    return [*_privilege_drop(config, spec), *inner]


def kernel_command(config: SandboxConfig, spec: LaunchSpec) -> list[str]:
    """argv for the kernel; at L3 wrapped in bubblewrap."""
    kernel = [
        str(config.kernel_python),
        "-m",
        "ipykernel_launcher",
        "-f",
        str(spec.connection_file),
        "--IPKernelApp.parent_handle=0",
        "--HistoryManager.enabled=False",
        f"--IPKernelApp.exec_files={spec.run_dir / STARTUP_FILE}",
    ]
    if spec.level != "L3":
        return kernel
    bwrap = bwrap_path()
    if bwrap is None:
        raise RuntimeError("bubblewrap (bwrap) is not installed")
    return [bwrap, *_bwrap_args(config, spec), "--", *kernel]


def _bwrap_args(config: SandboxConfig, spec: LaunchSpec) -> list[str]:
    args = [
        # --unshare-user explicitly: --disable-userns needs it (no nested namespaces).
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--hostname",
        "sandbox",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    for name in ("lib", "lib64", "bin", "sbin"):
        target = Path("/") / name
        if target.is_symlink():
            args += ["--symlink", os.readlink(target), str(target)]
        elif target.is_dir():
            args += ["--ro-bind", str(target), str(target)]
    for etc in (
        "/etc/ld.so.cache",
        "/etc/localtime",
        "/etc/alternatives",
        "/etc/fonts",
        "/etc/ssl/certs",
    ):
        if Path(etc).exists():
            args += ["--ro-bind", etc, etc]
    env_root = str(config.kernel_env.resolve())
    args += ["--ro-bind", env_root, env_root]
    if str(config.kernel_env) != env_root:
        args += ["--symlink", env_root, str(config.kernel_env)]
    tmp = str(config.tmp_bytes)
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += ["--size", tmp, "--tmpfs", "/tmp", "--size", tmp, "--tmpfs", "/dev/shm"]
    args += ["--bind", str(spec.workdir), SANDBOX_WORKDIR]
    args += ["--bind", str(spec.run_dir), str(spec.run_dir)]
    args += ["--chdir", SANDBOX_WORKDIR]
    # Without this, writes to the root tmpfs bwrap builds would be unbounded RAM.
    args += ["--remount-ro", "/"]
    return args


def _privilege_drop(config: SandboxConfig, spec: LaunchSpec) -> list[str]:
    """``prlimit … -- setpriv … --``: limits, the session uid, death with the service.

    Done by exec-ing util-linux tools rather than in a ``preexec_fn``: running Python in a
    forked child runs the interpreter's after-fork hooks there, which can tear down state the
    parent still uses (an event loop's epoll registrations, for one).
    """
    limits = [
        f"--as={config.memory_bytes}",
        f"--fsize={config.max_file_bytes}",
        f"--cpu={config.cpu_seconds}",
        "--core=0",
        "--nofile=1024",
    ]
    # RLIMIT_NPROC counts every process of the uid: only meaningful with a uid of our own.
    if spec.uid is not None:
        limits.append(f"--nproc={config.max_procs}")
    argv = ["prlimit", *limits, "--"]
    if spec.uid is not None:
        # setpriv sets the parent-death signal after the uid change (which clears it).
        argv += [
            "setpriv", f"--reuid={spec.uid}", f"--regid={spec.uid}", "--clear-groups",
            "--no-new-privs", "--pdeathsig=KILL", "--",
        ]  # fmt: skip
    return argv


# Waits for one line on stdin: the service first moves the process into its cgroups.
_GATE = ["/bin/sh", "-c", 'read -r _ && exec "$@"', "agentstation-sandbox"]


def spawn(config: SandboxConfig, spec: LaunchSpec, marker: str) -> subprocess.Popen[bytes]:
    """Start the kernel process (the bwrap process at L3); its stderr goes to kernel.log."""
    argv = [*_GATE, *_privilege_drop(config, spec), *kernel_command(config, spec)]
    with open(spec.run_dir / "kernel.log", "wb") as log:
        proc = subprocess.Popen(
            argv,
            env=kernel_env(config, spec, marker),
            cwd=str(spec.workdir),
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=log,
            close_fds=True,
            start_new_session=True,
        )
    assert proc.stdin is not None
    try:
        for procs in spec.cgroup_procs:
            procs.write_text(str(proc.pid))
        proc.stdin.write(b"go\n")
    except OSError:
        proc.kill()
        proc.wait()
        raise
    finally:
        proc.stdin.close()
    return proc
