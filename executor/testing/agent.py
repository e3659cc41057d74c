"""The in-container agent run as a real process on the host, for tests: start, stop, capture, inspect processes.

The agent runs as root there (the test runner is root) and drops every command to its own session uid, as in a
container; it sets PR_SET_CHILD_SUBREAPER so orphans reparent to it as they would to PID 1. The pytest fixtures
over these helpers live in ``tests/sandbox/agent/conftest.py``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import executor.sandbox.agent as _agent_pkg
from executor.models import RunSpec

__all__ = [
    "FILEOPS_BUILDS",
    "GID",
    "UID",
    "Capture",
    "LiveAgent",
    "build_fileops_standalone",
    "children_of",
    "pid_alive",
    "seccomp_deny",
    "start_agent",
    "stop_agent",
]

UID = 2000 + int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
"""The session user's uid the host agent drops commands to: one of its own per test worker. On the host the agent
sees every process of its session uid (no pid namespace), and a run that has the session to itself kills each one
started since it began: with the containers' uid (1000) it killed other tests' session processes, and with one uid
for every xdist worker, the host agents of two workers killed each other's commands."""
GID = UID
"""The session user's gid."""


@dataclass
class LiveAgent:
    """One running ``agent init`` and its folders."""

    proc: subprocess.Popen[bytes]
    root: Path
    socket: str
    workspace: Path
    home: Path
    state: Path
    log: Path
    extra_env: dict[str, str] = field(default_factory=dict)

    def spec(self, command: str, **kwargs: object) -> RunSpec:
        """A RunSpec with test-friendly bounds (2 s deadline, 300 ms grace and drain)."""
        values: dict[str, object] = {
            "command": command,
            "cwd": str(self.workspace),
            "timeout_ms": 5000,
            "grace_ms": 300,
            "drain_ms": 300,
        }
        values.update(kwargs)
        return RunSpec.model_validate(values)

    def stderr(self) -> str:
        """What the agent logged."""
        return self.log.read_text(errors="replace")


def start_agent(
    binary: Path,
    *,
    extra_args: list[str] | None = None,
    env: dict[str, str] | None = None,
    preexec_fn: Callable[[], object] | None = None,
) -> LiveAgent:
    """Start ``agent init`` in a fresh folder tree and wait for its socket (``preexec_fn`` runs in the child before
    exec, for example to install a seccomp filter)."""
    root = Path(tempfile.mkdtemp(prefix="agent-", dir="/tmp"))
    root.chmod(0o755)
    workspace, home, state, run = root / "ws", root / "home", root / "state", root / "run"
    workspace.mkdir()
    home.mkdir()
    run.mkdir(mode=0o700)
    sock = str(run / "agent.sock")
    log = root / "agent.log"
    full_env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:exitcode=86",
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:exitcode=87",
        **(env or {}),
    }
    args = [str(binary), "init", "--listen", sock, "--uid", str(UID), "--gid", str(GID)]
    args += ["--workspace", str(workspace), "--home", str(home), "--state-dir", str(state)]
    args += extra_args or []
    with log.open("wb") as log_file:
        proc = subprocess.Popen(
            args,
            env=full_env,
            stdout=log_file,
            stderr=log_file,
            stdin=subprocess.DEVNULL,
            preexec_fn=preexec_fn,
        )
    deadline = time.monotonic() + 10
    while not Path(sock).exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the agent did not start: {log.read_text(errors='replace')}")
        time.sleep(0.01)
    return LiveAgent(proc, root, sock, workspace, home, state, log)


def stop_agent(live: LiveAgent) -> int:
    """SIGTERM the agent (it sweeps its processes) and return its exit status."""
    if live.proc.poll() is None:
        live.proc.send_signal(signal.SIGTERM)
    try:
        code = live.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        live.proc.kill()
        code = live.proc.wait()
    return code


class Capture:
    """A CaptureSink that keeps everything (tests only: outputs are small)."""

    def __init__(self) -> None:
        self.streams: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        self.chunks = 0

    def feed(self, stream: str, data: bytes) -> None:
        """Append ``data`` to ``stream``."""
        self.streams.setdefault(stream, bytearray()).extend(data)
        self.chunks += 1

    @property
    def out(self) -> bytes:
        """Captured stdout."""
        return bytes(self.streams["stdout"])

    @property
    def err(self) -> bytes:
        """Captured stderr."""
        return bytes(self.streams["stderr"])


def pid_alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return False
    return data.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def children_of(pid: int) -> list[tuple[int, str]]:
    """(pid, state) of the processes whose parent is ``pid``."""
    found: list[tuple[int, str]] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text(encoding="utf-8", errors="replace").rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append((int(entry.name), fields[0]))
    return found


_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_SYSCALLS = {
    "x86_64": {"setresuid": 117, "setresgid": 119, "setfsuid": 122, "setfsgid": 123, "capget": 125, "capset": 126},
    "aarch64": {"capget": 90, "capset": 91, "setresuid": 147, "setresgid": 149, "setfsuid": 151, "setfsgid": 152},
}


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def seccomp_deny(*names: str) -> Callable[[], None]:
    """A ``preexec_fn`` that installs a seccomp filter failing the named syscalls with EPERM (as a hostile or
    broken runtime could), so that the agent's handling of their failure is tested for real.

    Raises:
        LookupError: this machine or a syscall name is not in the table (x86_64 and aarch64 are).
    """
    machine = os.uname().machine
    arch, table = _AUDIT_ARCH[machine], _SYSCALLS[machine]
    numbers = [table[name] for name in names]
    load, jeq, ret = 0x20, 0x15, 0x06
    count = len(numbers)
    program = [_SockFilter(load, 0, 0, 4), _SockFilter(jeq, 0, count + 2, arch), _SockFilter(load, 0, 0, 0)]
    for index, number in enumerate(numbers):
        last = index == count - 1
        program.append(_SockFilter(jeq, count - 1 - index, 1 if last else 0, number))
    program.append(_SockFilter(ret, 0, 0, 0x00050000 | 1))  # SECCOMP_RET_ERRNO | EPERM
    program.append(_SockFilter(ret, 0, 0, 0x7FFF0000))  # SECCOMP_RET_ALLOW

    def install() -> None:
        filters = (_SockFilter * len(program))(*program)
        fprog = _SockFprog(len(program), filters)
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
            raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
        if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
            raise OSError(ctypes.get_errno(), "PR_SET_SECCOMP")

    return install


_AGENT_SRC = Path(_agent_pkg.__file__).parent
_FILEOPS_CFLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-DFILEOPS_STANDALONE"]
FILEOPS_BUILDS: dict[str, list[str]] = {
    "static": [*_FILEOPS_CFLAGS, "-O2", "-static"],
    "sanitized": [*_FILEOPS_CFLAGS, "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"],
}
"""Compiler flags of the standalone fileops builds: as shipped (static), and with ASan and UBSan."""


def build_fileops_standalone(out_dir: Path, *, sanitize: bool = False, cc: str = "cc") -> Path:
    """Compile fileops.c with its standalone main into ``out_dir`` and return the binary's path."""
    flags = FILEOPS_BUILDS["sanitized" if sanitize else "static"]
    binary = out_dir / ("fileops-san" if sanitize else "fileops")
    subprocess.run(
        [cc, *flags, "-o", str(binary), str(_AGENT_SRC / "fileops.c")],
        check=True,
        capture_output=True,
        timeout=120,
    )
    binary.chmod(0o755)
    return binary
