"""Fixtures for the agent tests: the ASan/UBSan agent run as a real process on the host.

The agent runs as root here (the test runner is root) and drops every command to uid 1000, exactly as in a
container; it sets PR_SET_CHILD_SUBREAPER so orphans reparent to it as they would to PID 1.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from executor.config import AgentSettings
from executor.models import RunSpec
from executor.sandbox.agent.build import ensure_agent
from executor.sandbox.agent.client import AgentClient, open_agent_unix

UID = 1000
GID = 1000


@pytest.fixture(scope="session")
def agent_build_root() -> Iterator[Path]:
    """A world-traversable build folder, so that uid 1000 can run the binary too."""
    root = Path(tempfile.mkdtemp(prefix="agent-build-", dir="/tmp"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def asan_agent(agent_build_root: Path) -> Path:
    """The agent built with AddressSanitizer and UndefinedBehaviorSanitizer."""
    return ensure_agent(AgentSettings(), agent_build_root, sanitize=True)


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


def start_agent(binary: Path, *, extra_args: list[str] | None = None, env: dict[str, str] | None = None) -> LiveAgent:
    """Start ``agent init`` in a fresh folder tree and wait for its socket."""
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
        proc = subprocess.Popen(args, env=full_env, stdout=log_file, stderr=log_file, stdin=subprocess.DEVNULL)
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


@pytest.fixture
def live_agent(asan_agent: Path) -> Iterator[LiveAgent]:
    """A running sanitizer-built agent; the test fails if it crashed or a sanitizer fired."""
    live = start_agent(asan_agent, env={"MY_API_KEY": "sk-host-secret", "GH_TOKEN": "ghp-host-secret"})
    try:
        yield live
    finally:
        code = stop_agent(live)
        log = live.stderr()
        shutil.rmtree(live.root, ignore_errors=True)
        assert "Sanitizer" not in log and "runtime error" not in log, log
        assert code == 0, f"agent exited {code}: {log}"


@pytest.fixture
async def client(live_agent: LiveAgent) -> AsyncIterator[AgentClient]:
    """A protocol client connected to ``live_agent``."""
    async with open_agent_unix(live_agent.socket, timeout_s=10) as agent_client:
        yield agent_client


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
