"""Data models shared across layers: runs, files, judgments.

Every model is frozen and forbids unknown fields; variants carry a ``kind`` discriminator.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import shlex
from typing import Annotated, Any, Literal, Protocol

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)

__all__ = [
    "Action",
    "Answer",
    "Base64Bytes",
    "BashAction",
    "CaptureSink",
    "Cause",
    "Decision",
    "FileKind",
    "FileState",
    "JudgmentRecord",
    "JudgmentRequest",
    "Outcome",
    "ProcInfo",
    "Question",
    "QuestionTable",
    "Reflex",
    "RunResult",
    "RunSpec",
    "StreamName",
    "Tool",
    "ToolResult",
    "WriteAction",
    "canonical_json",
]


def _standard_base64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


_URL_SAFE = bytes.maketrans(b"-_", b"+/")


def _from_json_base64(value: Any, info: ValidationInfo) -> Any:
    """Read base64 text from JSON (either alphabet, padding optional); Python input is left to the bytes check."""
    if info.mode != "json" or not isinstance(value, str):
        return value
    try:
        text = value.encode("ascii").translate(_URL_SAFE)
        return base64.b64decode(text + b"=" * (-len(text) % 4), validate=True)
    except (UnicodeEncodeError, binascii.Error):
        raise ValueError("not base64 (RFC 4648: A-Z a-z 0-9 + / or - _, padded with =)") from None


Base64Bytes = Annotated[
    bytes,
    BeforeValidator(_from_json_base64),
    PlainSerializer(_standard_base64, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "byte", "contentEncoding": "base64"}),
]
"""Bytes that JSON carries as standard base64 (RFC 4648 section 4: ``+`` and ``/``, padded), what ``base64 -d``
and ``base64.b64decode`` read; read back from JSON in either alphabet (any model, no config needed). Python keeps
them as bytes."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


Cause = Literal["exited", "signaled", "timeout", "cancelled", "oom", "sandbox_lost", "unresponsive"]
"""Why a run ended. ``exited``: the shell exited by itself (any code, even 137); ``signaled``: killed by a signal
we did not send; ``timeout``/``cancelled``: we killed the group; ``oom``: the kernel's OOM killer;
``sandbox_lost``: the container or the agent went away; ``unresponsive``: the agent did not answer within the
host's own bound (deadline + grace + drain + ``agent.host_margin_s``); the session is then unhealthy."""

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


class StdinFile(_Model):
    """A host file streamed to a command's stdin in chunks, never held whole (an upload's archive).

    The file is the caller's private one (the service's spool of a request body) and must not change until the run
    ends: the gate binds the run to the hash of its bytes, read when the run is gated.
    """

    path: str
    """Absolute host path of the file."""
    size: int = Field(ge=0)
    """Its size in bytes (what ``bash.max_stdin_bytes`` bounds)."""


class RunSpec(_Model):
    """Exactly what the agent runs for one bash call."""

    command: str
    """The command string, run as ``bash -c COMMAND``."""
    cwd: str
    """Absolute working directory inside the container."""
    env: dict[str, str] = Field(default_factory=dict)
    """Explicit environment entries; merged last, after the scrub and the model-friendly defaults."""
    stdin: bytes | StdinFile | None = None
    """Bytes (or a host file's bytes, streamed) written to stdin then closed; None means /dev/null."""
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
    """Processes the command left running when it ended (the first 64 found, as many as fit the result frame)."""
    orphans_killed: tuple[ProcInfo, ...] = ()
    """Of those, the ones the agent killed (``orphans = "kill"``), listed the same way."""
    orphans_left_total: int = 0
    """How many processes the command left running, also past the ones listed in ``orphans_left``."""
    orphans_killed_total: int = 0
    """How many of them the agent killed, also past the ones listed in ``orphans_killed``."""
    drain_cut: bool = False
    """True when the post-exit drain bound cut off a descendant still holding a pipe."""
    pids_limit_hits: int = 0
    """Forks the container's pids limit refused during the run (the cgroup's ``pids.events`` ``max`` counter; it is
    per container, so a concurrent command's refusals count too)."""
    tmpfs_bytes: int | None = None
    """For an ``oom`` run: bytes of tmpfs files (``/tmp``, the home, ``/dev/shm``) charged to the memory limit when
    the run ended; they survive the kill and keep the memory taken until they are deleted."""

    @property
    def display_code(self) -> int:
        """A shell-style status: the exit code, or 128+signal."""
        if self.exit_code is not None:
            return self.exit_code
        if self.signal is not None:
            return 128 + self.signal
        return 125


Outcome = Literal["completed", "failed", "timeout", "cancelled", "blocked", "denied", "error", "unresponsive"]
"""How a tool call ended, from the caller's point of view.

``completed``: it ran and exited 0 (or the write/read succeeded); ``failed``: it ran and exited nonzero, was killed
by a signal we did not send, or by the OOM killer; ``timeout``/``cancelled``: we killed its process group;
``blocked``: it needs an approval nobody can give; ``denied``: policy, judge or a person said no, or the approval
was invalidated; ``error``: the executor or the sandbox failed (``sandbox_lost``, a refused write);
``unresponsive``: the agent did not answer within the host's own bound (the session is now unhealthy)."""

Tool = Literal["bash", "exec", "write_file", "read_output", "search_output", "task_start", "task_read"]
"""The call a result answers: an MCP tool's name, or ``exec`` (an argument list run without a shell)."""


class ToolResult(_Model):
    """What one call returns, on every surface (the in-process API, the service and its clients): the model's
    bounded ``text`` view, the structured facts, and the command's raw streams as exact bytes.

    The raw streams are bounded by the surface that returns them: a session's ``bash`` and ``task_read`` by the
    display budget (``artifacts.display_max_chars``), ``exec`` by its ``max_output_bytes``, the service by
    ``service.result_stream_max_bytes``. ``stdout_whole`` says whether ``stdout`` is all of it; the artifact
    (``artifact_id``) always keeps the whole capture. Over JSON the bytes travel as base64.
    """

    tool: Tool
    """Which call produced it."""
    outcome: Outcome
    """How the call ended."""
    text: str
    """The exact, bounded, sanitized view presented to a model (for ``exec``: the run header, or why the gate
    refused it)."""
    action_id: str | None = None
    """The gated action's id (bash, exec, write_file and task starts)."""
    artifact_id: str | None = None
    """The artifact holding every captured stream whole (recover with read_output / search_output)."""
    run: RunResult | None = None
    """Exit code, cause, duration, CPU, max RSS and orphans of a run."""
    exit_code: int | None = None
    """The command's shell-style status (128+N for signal N), when it ran."""
    task_id: str | None = None
    """The background task started or read (task_start, task_read)."""
    stdout: Base64Bytes = b""
    """The command's raw stdout from its first byte (bash, exec), or the page's bytes (task_read of stdout): not
    sanitized, any bytes, cut at the surface's bound; empty when the call ran no command."""
    stdout_whole: bool | None = None
    """``stdout`` is the whole stream (for task_read: the page is the whole, ended stream); False: it was cut here
    or by the capture cap (read the artifact for more); None when the call ran no command (or read the other
    stream)."""
    stderr: Base64Bytes = b""
    """The command's raw stderr, like ``stdout``."""
    stderr_whole: bool | None = None
    """``stderr`` is the whole stream."""
    stdout_dropped: int = 0
    """Bytes of stdout a live exec stream from the service did not carry because its reader fell further behind
    than the service spools (``service.stream_spool_bytes``); 0 otherwise (in-process results never drop). The
    artifact has every byte."""
    stderr_dropped: int = 0
    """As ``stdout_dropped``, for stderr."""
    data: dict[str, object] | None = None
    """Tool-specific structured data (write result, page receipts, task chunk)."""


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


def canonical_json(value: Any) -> bytes:
    """The one canonical JSON encoding hashed for identities: sorted keys, no spaces, ASCII, no NaN."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


_SHA256_RE = r"^[0-9a-f]{64}$"


class BashAction(_Model):
    """A prepared bash call: exactly what will run, hashed into the identity an approval is bound to."""

    kind: Literal["bash"] = "bash"
    """Discriminator."""
    session_id: str
    """The session the command runs in."""
    command: str
    """The command string, run as ``bash -c COMMAND``."""
    cwd: str
    """Absolute working directory inside the container."""
    env: dict[str, str] = Field(default_factory=dict)
    """Explicit environment entries the caller adds."""
    stdin_sha256: str | None = Field(None, pattern=_SHA256_RE)
    """Hex SHA-256 of the supplied stdin; None means /dev/null."""
    stdin_program: str | None = None
    """The supplied stdin as text when the command runs a shell or an interpreter that reads its program from it
    (``bash``, ``sh -s``, ``python3 -``), so policy, judges and the person approving read the program that runs;
    None otherwise, and when that stdin is not text or past ``gate.stdin_program_max_bytes`` (judged unseen)."""
    stdin_members: tuple[str, ...] | None = None
    """The paths the command unpacks from the supplied stdin: the entries of an entry stream written by the agent's
    ``fs-unpack`` (an upload, ``executor cp`` into a session; the host made it from the archive) or the members of a
    tar archive a command extracts (``tar -x -f -``), read on the host so that the files it writes are judged like
    any write (a last ``...`` says more were not listed); None when the command unpacks nothing or the stdin is not
    one."""
    timeout_ms: int | None = Field(ge=1)
    """Deadline of the call, in milliseconds; None for a background task (no deadline applies)."""
    exec_argv: tuple[str, ...] | None = None
    """For a raw exec (no shell) or a file read: the exact argument list that runs; ``command`` is then its shell
    rendering, which policy and judges read. None: ``bash -c command``."""

    def argv(self) -> tuple[str, ...] | None:
        """The command's words as a POSIX shell would split them (``shlex``), or None when it does not parse."""
        if self.exec_argv is not None:
            return self.exec_argv
        try:
            return tuple(shlex.split(self.command, comments=False, posix=True))
        except ValueError:
            return None

    def identity(self) -> str:
        """Hex SHA-256 over the canonical JSON of every field plus the parsed executable arguments.

        Changing any byte of the command, its arguments, cwd, env, stdin, timeout or session changes it.
        """
        argv = self.argv()
        # exec_argv, stdin_program and stdin_members join the payload only when set, so the identity of every plain
        # bash action is unchanged (the program and the members are the stdin's, already bound by its hash)
        unset = {name for name in ("exec_argv", "stdin_program", "stdin_members") if getattr(self, name) is None}
        fields = self.model_dump(mode="json", exclude=unset or None)
        payload = {"v": 1, **fields, "argv": None if argv is None else list(argv)}
        return hashlib.sha256(canonical_json(payload)).hexdigest()


class WriteAction(_Model):
    """A prepared file write: the resolved path, the exact content and the target state that was reviewed."""

    kind: Literal["write"] = "write"
    """Discriminator."""
    session_id: str
    """The session the write happens in."""
    path: str
    """Resolved absolute path inside the container (no ``.``/``..`` components)."""
    content_sha256: str = Field(pattern=_SHA256_RE)
    """Hex SHA-256 of the exact bytes to be written."""
    size: int = Field(ge=0)
    """Length of the content in bytes."""
    reviewed: FileState
    """The target's state when the write was prepared; execution refuses any other state."""
    diff: str = ""
    """Unified diff shown for review (presentation only: not part of the identity, which binds the content)."""
    git_dir: str | None = None
    """The git directory the path lies in when the host found one not named ``.git`` (``git init
    --separate-git-dir``, a bare repository); the gate then protects its hooks and config as it does ``.git``'s."""
    create_parents: bool = False
    """The write also creates missing parent folders (part of the identity when set)."""

    @field_validator("path")
    @classmethod
    def _resolved_absolute(cls, value: str) -> str:
        parts = value.split("/")
        if not value.startswith("/") or "\0" in value or ".." in parts or "." in parts:
            raise ValueError(f"{value!r} must be a resolved absolute path (no '.', '..' or NUL)")
        return value

    def identity(self) -> str:
        """Hex SHA-256 over the canonical JSON of the session, path, content hash, size and reviewed state (and the
        git directory, when one was found).

        The diff is derived from content and reviewed state, so it is left out: a re-rendered diff must not
        invalidate an approval, while any change to the bytes or to the target does.
        """
        # git_dir and create_parents join the payload only when set, so identities of earlier writes stay as before.
        unset = {"git_dir"} if self.git_dir is None else set()
        if not self.create_parents:
            unset.add("create_parents")
        payload = {"v": 1, **self.model_dump(mode="json", exclude={"diff"} | unset)}
        return hashlib.sha256(canonical_json(payload)).hexdigest()


Action = Annotated[BashAction | WriteAction, Field(discriminator="kind")]
"""A prepared action the gate judges: a bash call or a file write."""


class JudgmentRecord(_Model):
    """One judgment as the journal records it: who answered what, and where the answers came from."""

    judgment_id: str
    """Unique id of this judgment; replay resolves judgments by it, never by type or recency."""
    reflex: Reflex
    """The reflex that asked."""
    provider: str
    """The judge that answered (``rules``, ``openai:<model>``, ...)."""
    table: QuestionTable
    """The question table asked."""
    table_hash: str
    """Hex SHA-256 of the table's canonical JSON."""
    answers: dict[str, Answer]
    """Validated answers by question id; empty when the judgment failed."""
    latency_ms: float
    """Wall time of the judgment (near zero for a cache hit)."""
    cache_hit: bool
    """True when the answers came from the cache or a shared in-flight call rather than a provider call of its own."""
    cached_from_judgment_id: str | None
    """For a cache hit, the judgment whose answers were reused."""
    error: str | None
    """Why the judgment failed (the gate then failed closed); None on success."""
