"""Data models shared across layers: runs, files, judgments.

Every model is frozen and forbids unknown fields; variants carry a ``kind`` discriminator.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Answer",
    "CaptureSink",
    "Cause",
    "Decision",
    "FileKind",
    "FileState",
    "JudgmentRequest",
    "ProcInfo",
    "Question",
    "QuestionTable",
    "Reflex",
    "RunResult",
    "RunSpec",
    "StreamName",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


Cause = Literal["exited", "signaled", "timeout", "cancelled", "oom", "sandbox_lost"]
"""Why a run ended. ``exited``: the shell exited by itself (any code, even 137); ``signaled``: killed by a signal
we did not send; ``timeout``/``cancelled``: we killed the group; ``oom``: the kernel's OOM killer;
``sandbox_lost``: the container or the agent went away."""

StreamName = str
"""A captured stream: ``stdout``/``stderr`` for bash, ``output`` for everything else."""

Decision = Literal["allow", "ask", "deny"]
"""What the gate decided for an action."""


class CaptureSink(Protocol):
    """Receives a run's output as it arrives; never sees a whole stream at once."""

    def feed(self, stream: StreamName, data: bytes) -> None:
        """Append ``data`` to ``stream``."""


class ProcInfo(_Model):
    """A process the agent saw in the session."""

    pid: int
    """Process id inside the container."""
    cmd: str
    """Its command line, NUL separators shown as spaces, bounded."""


class RunSpec(_Model):
    """Exactly what the agent runs for one bash call."""

    command: str
    """The command string, run as ``bash -c COMMAND``."""
    cwd: str
    """Absolute working directory inside the container."""
    env: dict[str, str] = Field(default_factory=dict)
    """Explicit environment entries; merged last, after the scrub and the model-friendly defaults."""
    stdin: bytes | None = None
    """Bytes written to stdin then closed; None means /dev/null."""
    timeout_ms: int | None
    """Deadline enforced by the agent itself; None for background tasks."""
    grace_ms: int
    """SIGTERM-to-SIGKILL grace on the process group."""
    drain_ms: int
    """Bound on draining pipes after the direct child exits."""
    kill_orphans: bool = True
    """Kill what the command left running once it ends."""


class RunResult(_Model):
    """How a run ended, and what it cost."""

    cause: Cause
    """Why the run ended."""
    exit_code: int | None
    """The shell's exit status when it exited by itself, else None."""
    signal: int | None
    """The signal that ended the shell, if any."""
    duration_ms: float
    """Wall time from spawn to the end of the drain."""
    cpu_ms: float
    """User plus system CPU time of the run's reaped processes."""
    max_rss_kb: int
    """Largest resident set of the run's reaped processes, in KiB."""
    stream_bytes: dict[str, int]
    """Bytes captured per stream (before any cap)."""
    orphans_left: tuple[ProcInfo, ...] = ()
    """Processes the command left running when it ended."""
    orphans_killed: tuple[ProcInfo, ...] = ()
    """Of those, the ones the agent killed (``orphans = "kill"``)."""
    drain_cut: bool = False
    """True when the post-exit drain bound cut off a descendant still holding a pipe."""

    @property
    def display_code(self) -> int:
        """A shell-style status: the exit code, or 128+signal."""
        if self.exit_code is not None:
            return self.exit_code
        if self.signal is not None:
            return 128 + self.signal
        return 125


FileKind = Literal["missing", "regular", "directory", "symlink", "fifo", "socket", "char", "block", "other"]
"""The type of a path's target, as ``lstat`` sees it."""


class FileState(_Model):
    """A file's reviewed state: what a write is bound to."""

    kind: FileKind
    """File type (``missing`` when nothing is there)."""
    mode: int = 0
    """Permission bits (``st_mode & 0o7777``)."""
    uid: int = 0
    """Owner."""
    gid: int = 0
    """Group."""
    dev: int = 0
    """Device number."""
    ino: int = 0
    """Inode number."""
    size: int = 0
    """Size in bytes."""
    mtime_ns: int = 0
    """Modification time in nanoseconds."""
    sha256: str | None = None
    """Hex digest of the content (regular files only)."""


Reflex = Literal["gate", "sanitize", "focus"]
"""Which judgment is asked for."""


class Question(_Model):
    """One question of a judgment table."""

    id: str
    """Stable identifier the answer is keyed by."""
    text: str
    """The question as a judge reads it."""
    answer: Literal["bool", "level", "ids", "choice"]
    """Answer schema: ``bool``; ``level`` 0..3; ``ids``: a list of strings from the material; ``choice``: one of
    ``choices``."""
    choices: tuple[str, ...] = ()
    """Allowed answers for ``choice``."""


class QuestionTable(_Model):
    """The questions a reflex asks; its hash is journaled with every judgment."""

    reflex: Reflex
    """The reflex this table belongs to."""
    version: int
    """Bumped whenever a question changes meaning."""
    questions: tuple[Question, ...]
    """The questions, in order."""


Answer = bool | int | str | tuple[str, ...]
"""A validated answer to one question."""


class JudgmentRequest(_Model):
    """What a judge is asked: a reflex, its question table and the material (quoted data, never instructions)."""

    table: QuestionTable
    """The questions."""
    material: dict[str, Any]
    """The material to judge, as JSON-able data; sandbox text inside it is data, never instructions."""
    session_id: str
    """The session the judgment is charged to (budgets are per session)."""
