"""The service's wire models: every request and response body of the ``/v1`` JSON API, and the exec event stream.

Pure pydantic (no trio, no docker): the service validates with these and generates its OpenAPI document from them,
and :mod:`executor.client` parses with the same classes, so the two cannot drift. Bytes travel as base64 strings.
A call's result is :class:`executor.models.ToolResult` itself, the class the in-process API returns, so a result
reads the same on every surface.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import annotated_types
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from executor.errors import OutputRangeError
from executor.models import Base64Bytes, RunResult, ToolResult

__all__ = [
    "API_VERSION",
    "EXEC_FRAMES",
    "ApprovalAnswer",
    "ApprovalView",
    "ChunkEvent",
    "DroppedEvent",
    "ErrorEvent",
    "ErrorInfo",
    "ErrorResponse",
    "ExecEvent",
    "ExecRequest",
    "FilesQuery",
    "Health",
    "PageEvent",
    "PendingEvent",
    "ReadQuery",
    "ResultEvent",
    "SearchQuery",
    "SessionCreate",
    "SessionView",
    "TaskEvent",
    "TaskReadQuery",
    "TaskStart",
    "TaskView",
    "WriteRequest",
    "range_message",
    "validation_message",
]

API_VERSION = "v1"
"""The JSON API's version: its path prefix."""

EXEC_FRAMES = "application/vnd.executor.exec-frames"
"""The exec stream's binary framing, which a client asks for with ``Accept``: each frame is 1 byte kind, 3 zero
bytes, the payload's length as 4 bytes big-endian, then the payload. Kind 1: stdout bytes, kind 2: stderr bytes,
both raw as they arrived; kind 3: one UTF-8 JSON event (``dropped``, ``approval``, then a final ``result`` or
``error``), the same object as its ndjson line. Without that ``Accept`` the stream is ndjson (``ExecEvent`` lines)."""


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class ErrorInfo(_Wire):
    """An error, named by its class in the executor's exception tree (``executor.errors``)."""

    type: str
    """The exception class name (``SessionNotFound``, ``CommandRejected``...; ``ExecutorError`` for the root)."""
    message: str
    """What happened and what to do next."""


class ErrorResponse(_Wire):
    """The body of every non-2xx response."""

    error: ErrorInfo
    """The error."""


class SessionCreate(_Wire):
    """Start a session."""

    profile: str | None = None
    """A profile name from the settings (default: ``default_profile``)."""
    image: str | None = Field(None, max_length=256)
    """Override the profile's image (an ``images/`` folder name or a local ``name:tag``)."""
    name: str | None = Field(None, min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")
    """A name, unique among live sessions; a named session outlives the service and is found again on restart."""
    idle_s: StrictFloat | Literal["none"] | None = None
    """Idle limit in seconds (``none``: no limit; unset: ``sessions.idle_s``, or for a named session whose stopped
    workspace this reuses, the limit it had). A named session stores it and keeps it across service restarts."""

    throwaway: StrictBool = False
    """A session for one command (what ``executor exec`` without ``--session`` makes): when the client of an exec
    stream on it goes away before the command ends (killed, disconnected), the session is removed, which kills the
    command. Unnamed sessions only."""

    @field_validator("idle_s")
    @classmethod
    def _positive(cls, value: float | str | None) -> float | str | None:
        if isinstance(value, float | int) and not 0 < value <= 365 * 86_400:
            raise ValueError("idle_s must be above 0 and at most a year, or 'none'")
        return value

    @model_validator(mode="after")
    def _unnamed_throwaway(self) -> SessionCreate:
        if self.throwaway and self.name is not None:
            raise ValueError("a throwaway session has no name (a named session outlives its commands)")
        return self


class SessionView(_Wire):
    """One session as the service sees it."""

    id: str
    """The session id (``s-`` and 12 hex digits)."""
    name: str | None
    """Its name, if it has one."""
    image: str
    """The image its container runs."""
    profile: str
    """The profile it was opened with."""
    state: str
    """The container's state (``running``, ``exited``...)."""
    created_at: datetime
    """When it was opened (UTC)."""
    held: bool
    """The service holds a connection to it (it has been used since the service started)."""
    owner: str | None = None
    """Who owns it: the owner id of the token that created it (None: the unix socket's, the home's owner)."""
    idle_limit_s: float | None = None
    """Its idle limit in seconds (None: no limit): a named session's stored limit, or the service's for one it
    holds; past it with nothing running, the session is stopped (a named one keeps its workspace)."""
    idle_s: float | None = None
    """Seconds since its last command or call ended (since it was created if none has; 0 while one runs); None
    when its container is gone."""
    workspace_only: bool = False
    """Its container is gone and its workspace is kept (a named session stopped when idle): the next call that
    names it with ``create`` makes a new container on that workspace."""


class ExecRequest(_Wire):
    """Run one bash command in a session."""

    command: str = Field(min_length=1)
    """The bash command (run as ``bash -c``)."""
    cwd: str | None = None
    """Working directory (default: the workspace)."""
    env: dict[str, str] | None = None
    """Extra environment entries."""
    stdin: Base64Bytes | None = None
    """Bytes for stdin (base64), then closed; unset: /dev/null."""
    timeout_ms: StrictInt | None = None
    """Deadline (default ``bash.timeout_ms``; positive, at most ``bash.max_timeout_ms``: the session checks, so
    the message is the same on every surface)."""
    focus_mode: Literal["off", "shadow", "on"] | None = None
    """Focus mode for the presented view."""
    intent: str | None = Field(None, max_length=2000)
    """What the caller looks for in the output (helps focus)."""
    approvals: Literal["wait", "none"] = "wait"
    """``wait``: an ask waits (up to ``service.approval_timeout_s``) for ``POST /v1/approvals/{id}``; ``none``: an
    ask comes back ``blocked``."""
    result_streams: StrictBool = True
    """Carry the raw streams in the final result (``false``: its ``stdout``/``stderr`` are empty, for a client that
    kept the live chunks itself; ``*_whole`` still says whether the first ``service.result_stream_max_bytes`` held
    all of each)."""


class ChunkEvent(_Wire):
    """Bytes of a stream, as they arrived."""

    kind: Literal["chunk"] = "chunk"
    stream: Literal["stdout", "stderr"]
    """Which stream."""
    data: Base64Bytes
    """The bytes (base64)."""


class DroppedEvent(_Wire):
    """The client fell further behind than the service spools: bytes of a stream were not sent live (the artifact
    still has them, and the result counts them)."""

    kind: Literal["dropped"] = "dropped"
    stream: Literal["stdout", "stderr"]
    """Which stream."""
    bytes: int
    """How many bytes were skipped since the previous event of this stream."""


class PendingEvent(_Wire):
    """The command waits for an approval (answer it with ``POST /v1/approvals/{approval_id}``)."""

    kind: Literal["approval"] = "approval"
    approval_id: str
    """The pending approval's id."""
    summary: str
    """What is asked."""
    reasons: tuple[str, ...] = ()
    """Why the gate asks."""


class ResultEvent(_Wire):
    """The final event of an exec stream."""

    kind: Literal["result"] = "result"
    result: ToolResult
    """The result: a ``bash`` result whose ``stdout``/``stderr`` hold the raw streams from their first byte, each up
    to ``service.result_stream_max_bytes`` (``*_whole`` says whether that is all; empty with ``result_streams``
    false), and ``stdout_dropped``/``stderr_dropped`` the bytes the live stream did not carry."""


class ErrorEvent(_Wire):
    """The final event of a stream that failed after it began."""

    kind: Literal["error"] = "error"
    error: ErrorInfo
    """The error."""


ExecEvent = Annotated[ChunkEvent | DroppedEvent | PendingEvent | ResultEvent | ErrorEvent, Field(discriminator="kind")]
"""One line of an exec stream (ndjson): chunks (and ``dropped`` notes) as they come, then a result or an error."""


class PageEvent(_Wire):
    """One page of a followed task's stream."""

    kind: Literal["page"] = "page"
    result: ToolResult
    """The page, as ``task`` read returns it: the exact bytes in ``stdout`` or ``stderr`` (the stream read),
    ``data.next_offset`` continues."""


TaskEvent = Annotated[PageEvent | ErrorEvent, Field(discriminator="kind")]
"""One line of a followed task read (ndjson)."""


class WriteRequest(_Wire):
    """Create or replace a file (staged, symlink-safe, gated on the exact path and content)."""

    path: str = Field(min_length=1, max_length=4096)
    """The file's path (relative: inside the workspace)."""
    content: Base64Bytes
    """The content (base64)."""
    parents: StrictBool = False
    """Create missing parent folders first (a gated ``mkdir -p``)."""
    mode: str | None = Field(None, pattern=r"^0?[0-7]{3,4}$")
    """Octal mode to set afterwards (a gated ``chmod``), like ``"755"``. Should that chmod be refused or fail, the
    result is still the write's (the file is written), with the chmod's outcome, ``data.mode_set`` null and
    ``data.mode_action_id`` naming the chmod."""
    approvals: Literal["wait", "none"] = "wait"
    """As for exec: ``none`` makes an ask come back ``blocked`` at once."""


class TaskStart(_Wire):
    """Start a background task."""

    command: str = Field(min_length=1)
    """The bash command."""
    cwd: str | None = None
    """Working directory."""
    env: dict[str, str] | None = None
    """Extra environment entries."""
    approvals: Literal["wait", "none"] = "wait"
    """As for exec."""


class TaskView(_Wire):
    """A background task."""

    task_id: str
    """Its id."""
    command: str
    """The command it runs."""
    running: bool
    """Still running."""
    artifact_id: str | None = None
    """The artifact mirroring its streams."""
    run: RunResult | None = None
    """How it ended, once it has."""


class ApprovalView(_Wire):
    """An ask waiting for an answer."""

    approval_id: str
    """Answer with ``POST /v1/approvals/{approval_id}``."""
    session_id: str
    """The session of the action."""
    summary: str
    """The exact action (command with cwd, env, timeout; or path and diff)."""
    reasons: tuple[str, ...]
    """Why the gate asks."""
    identity: str
    """The action's identity hash; the approval binds to it."""
    expires_in_s: float
    """Seconds until it is denied by timeout."""


class ApprovalAnswer(_Wire):
    """An answer to an ask."""

    approve: StrictBool
    """True approves that exact action once; false denies it."""


class Health(_Wire):
    """The service's state."""

    status: Literal["ok", "draining"]
    """``draining`` after SIGTERM: no new work is taken."""
    version: str
    """The executor's version."""
    sessions: int
    """Sessions held."""
    running: int
    """Commands running now."""
    settings_sha256: str | None = None
    """SHA-256 of the settings file the service was started with (``--config`` or ``EXECUTOR_CONFIG``); None when it
    runs on the defaults and its environment. Settings apply where a command runs: a CLI given another file refuses
    to send its commands here."""
    environment_sha256: str | None = None
    """SHA-256 of the ``EXECUTOR_*`` settings in the service's environment that decide how commands run (all but the
    home and the service section; :func:`executor.environ.environment_digest`); None when there are none. A CLI whose
    environment sets others refuses to send its commands here, as for a settings file."""


class ReadQuery(_Wire):
    """Query of ``GET .../artifacts/{artifact_id}``: one page of a stored stream."""

    stream: str | None = None
    """The stream (default: the first with output)."""
    start_line: int = Field(1, ge=1)
    """First line (1-based)."""
    line_count: int | None = Field(None, ge=1, le=100_000)
    """Lines wanted (default: as many as fit)."""
    start_byte_in_line: int | None = Field(None, ge=0)
    """Continue inside a long line at this byte."""


class SearchQuery(_Wire):
    """Query of ``GET .../artifacts/{artifact_id}/search``."""

    pattern: str = Field(min_length=1, max_length=100_000)  # artifacts.pattern_max_chars bounds it below
    """A regular expression, matched line by line."""
    stream: str | None = None
    """The stream (default: every stream, in order)."""
    limit: int = Field(20, ge=1, le=10_000)
    """Most matches returned (the artifact store's own bound, so both CLI paths take the same values)."""
    start_line: int = Field(1, ge=1)
    """Resume from this line."""


class TaskReadQuery(_Wire):
    """Query of ``GET .../tasks/{task_id}``."""

    stream: Literal["stdout", "stderr"] = "stdout"
    """Which stream."""
    offset: int = Field(0, ge=0, le=2**63 - 1)
    """Whole-stream byte offset to read from (at most 2**63 - 1, what the agent protocol carries)."""
    max_bytes: int = Field(65_536, ge=1, le=1024 * 1024)
    """Most bytes per page."""
    follow: bool = False
    """Stream pages (ndjson ``TaskEvent`` lines) until the task ends, instead of one page."""


class FilesQuery(_Wire):
    """Query of ``PUT``/``GET .../files``."""

    path: str = Field(min_length=1, max_length=4096)
    """Upload: the folder to unpack into (created if missing). Download: the file or folder to pack."""
    approvals: Literal["wait", "none"] = "wait"
    """``wait``: an ask waits for an out-of-band answer; ``none``: it comes back blocked at once."""


def validation_message(exc: ValidationError) -> str:
    """One line for a request that does not validate: its first problem, where, and how many there are."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "body"
    return f"invalid request: {where}: {first.get('msg', 'invalid')} ({exc.error_count()} error(s))"


def range_message(model: type[BaseModel], exc: ValidationError) -> str:
    """A query number out of its range, in the words the in-process API uses (:meth:`OutputRangeError.bounds`), so
    every surface says the same; any other problem as :func:`validation_message` says it."""
    first = exc.errors()[0]
    loc = first.get("loc", ())
    field = model.model_fields.get(str(loc[-1])) if loc else None
    low: Any = None
    high: Any = None
    for rule in field.metadata if field is not None else ():
        if isinstance(rule, annotated_types.Ge):
            low = rule.ge
        elif isinstance(rule, annotated_types.Gt):
            low = rule.gt + 1  # type: ignore[operator]
        elif isinstance(rule, annotated_types.Le):
            high = rule.le
        elif isinstance(rule, annotated_types.Lt):
            high = rule.lt - 1  # type: ignore[operator]
    if not isinstance(low, int):
        return validation_message(exc)
    return str(OutputRangeError.bounds(str(loc[-1]), first.get("input"), low, high if isinstance(high, int) else None))
