"""The session API, defined once: the result models every surface returns and the typed contracts every surface uses.

:class:`~executor.models.ToolResult` (re-exported here) is the one result of a call on every surface: it lives in
:mod:`executor.models` so the service's clients, which import no trio, return the very same class.

:class:`SessionAPI` and :class:`ExecutorAPI` are what the MCP server, the CLI and any fake
(:mod:`executor.testing`) are typed against; :class:`~executor.session.Session` and
:class:`~executor.session.Executor` implement them (mypy checks it), so a drifted signature is a type error, and a
test compares the defaults. Nothing here does IO.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Final, Literal, Protocol, TypeAlias

from pydantic import BaseModel, ConfigDict

from executor.gate.approvals import ApprovalHandler
from executor.models import Base64Bytes, Outcome, RunResult, StdinFile, Tool, ToolResult
from executor.sandbox.base import SessionInfo

__all__ = [
    "USE_DEFAULT",
    "ArtifactBytes",
    "ExecutorAPI",
    "FileContent",
    "FocusMode",
    "HandlerChoice",
    "Outcome",
    "SessionAPI",
    "TaskBytes",
    "TaskInfo",
    "Tool",
    "ToolResult",
]

FocusMode = Literal["off", "shadow", "on"]
"""Focus rollout mode (see ``FocusSettings.mode``)."""


class _Default(enum.Enum):
    USE_DEFAULT = "the executor's approval handler"


USE_DEFAULT: Final = _Default.USE_DEFAULT
"""Sentinel for "the executor's approval handler" (distinct from None: nobody answers)."""

HandlerChoice: TypeAlias = ApprovalHandler | Literal[_Default.USE_DEFAULT] | None
"""Who answers an approval for one call: a handler, :data:`USE_DEFAULT` (the executor's), or None (nobody)."""


class FileContent(BaseModel):
    """A file read from the session's container by ``read_file``."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    path: str
    """The resolved absolute path read."""
    data: Base64Bytes
    """The file's whole content."""
    sha256: str | None
    """Hex SHA-256 of the content, as the agent computed it while reading."""
    action_id: str | None = None
    """The gated action's id."""

    def text(self) -> str:
        """The content as UTF-8 (invalid bytes raise ``UnicodeDecodeError``)."""
        return self.data.decode("utf-8")


class ArtifactBytes(BaseModel):
    """Raw stored bytes of an artifact's stream (``read_artifact``): no rendering, sanitizing or journaling."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    artifact_id: str
    """The artifact."""
    stream: str
    """The stream read."""
    offset: int
    """Stored offset of ``data``."""
    data: Base64Bytes
    """The bytes from ``offset``."""
    stored_bytes: int
    """Bytes the store holds for this stream; read on from ``offset + len(data)`` until it is reached."""
    dropped_bytes: int
    """Bytes cut from the middle by the capture cap (``artifacts.capture_max_bytes``); 0 when the stream is whole."""


class TaskInfo(BaseModel):
    """A background task as the executor tracks it."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    task_id: str
    """Identifier given by the session's agent."""
    command: str
    """The command it runs."""
    running: bool
    """Still running."""
    owner: str | None = None
    """The opaque owner token given at start (never interpreted by the executor)."""
    artifact_id: str | None = None
    """Artifact whose streams mirror the task's output (grows while the task runs)."""
    result: RunResult | None = None
    """How it ended, once it has."""


class TaskBytes(BaseModel):
    """One page of a background task's stream as its exact bytes (for followers that print them: ``bg read
    --follow``, the service's ``follow=true``); not sanitized, as an exec's raw streams are not."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task_id: str
    """The task."""
    stream: Literal["stdout", "stderr"]
    """Which stream."""
    data: bytes
    """The bytes from ``offset``; empty at the current end."""
    offset: int
    """Whole-stream offset of ``data`` (moved up past what the agent's buffer dropped)."""
    end: int
    """Bytes the stream has produced so far."""
    running: bool
    """The task still runs."""
    run: RunResult | None = None
    """How the task ended, once it has."""

    @property
    def next_offset(self) -> int:
        """Where the next read starts."""
        return self.offset + len(self.data)


class SessionAPI(Protocol):
    """One session: its tools and its background tasks (see :class:`~executor.session.Session` for the contract)."""

    @property
    def id(self) -> str:
        """The session id."""
        ...

    @property
    def name(self) -> str | None:
        """The session's name, if it was given one."""
        ...

    @property
    def owner(self) -> str | None:
        """The owner token the session was opened with."""
        ...

    async def wait_lost(self) -> None:
        """Return once the session's sandbox is gone (its container stopped or died, or the session closed)."""
        ...

    async def bash(
        self,
        command: str,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bytes | StdinFile | None = None,
        timeout_ms: int | None = None,
        focus_mode: FocusMode | None = None,
        intent: str | None = None,
        approval_handler: HandlerChoice = USE_DEFAULT,
    ) -> ToolResult:
        """Run one gated, captured ``bash -c`` command."""
        ...

    async def exec(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout_ms: int | None = None,
        user: str | None = None,
        max_output_bytes: int | None = None,
        approval_handler: HandlerChoice = USE_DEFAULT,
    ) -> ToolResult:
        """Run an argument list (no shell), gated and journaled, and return its whole output bytes."""
        ...

    async def write_file(
        self,
        path: str,
        content: bytes | str,
        *,
        create_parents: bool = False,
        approval_handler: HandlerChoice = USE_DEFAULT,
    ) -> ToolResult:
        """Create or replace a file, gated on the exact path and content."""
        ...

    async def read_file(
        self, path: str, *, max_bytes: int | None = None, approval_handler: HandlerChoice = USE_DEFAULT
    ) -> FileContent:
        """Read a whole file, gated like a ``cat`` of it."""
        ...

    async def read_artifact(
        self, artifact_id: str, *, stream: str | None = None, offset: int = 0, max_bytes: int = 1 << 20
    ) -> ArtifactBytes:
        """Raw stored bytes of an artifact's stream, for programs (no model presentation)."""
        ...

    async def read_output(
        self,
        artifact_id: str,
        *,
        stream: str | None = None,
        start_line: int = 1,
        line_count: int | None = None,
        start_byte_in_line: int | None = None,
    ) -> ToolResult:
        """One page of a stored stream (``line_count`` None: the configured page)."""
        ...

    async def search_output(
        self, artifact_id: str, *, pattern: str, stream: str | None = None, limit: int = 20, start_line: int = 1
    ) -> ToolResult:
        """Search a stored stream line by line."""
        ...

    async def start_task(
        self,
        command: str,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        owner: str | None = None,
        approval_handler: HandlerChoice = USE_DEFAULT,
    ) -> ToolResult:
        """Start a gated background task and return at once."""
        ...

    async def read_task(
        self,
        task_id: str,
        *,
        stream: Literal["stdout", "stderr"] = "stdout",
        offset: int = 0,
        max_bytes: int = 65_536,
        owner: str | None = None,
    ) -> ToolResult:
        """Read a background task's stream from a byte offset."""
        ...

    async def read_task_bytes(
        self,
        task_id: str,
        *,
        stream: Literal["stdout", "stderr"] = "stdout",
        offset: int = 0,
        max_bytes: int = 65_536,
        owner: str | None = None,
    ) -> TaskBytes:
        """Read a background task's stream from a byte offset as its exact bytes."""
        ...

    async def stop_task(self, task_id: str, *, owner: str | None = None) -> TaskInfo:
        """Kill a background task's process group."""
        ...

    async def list_tasks(self, *, owner: str | None = None) -> list[TaskInfo]:
        """The session's background tasks."""
        ...

    def owner_of(self, task_id: str) -> str | None:
        """The opaque owner token stored with a task."""
        ...


class ExecutorAPI(Protocol):
    """The executor: sessions opened, attached, listed and stopped (see :class:`~executor.session.Executor`)."""

    def open_session(
        self,
        *,
        profile: str | None = None,
        image: str | None = None,
        name: str | None = None,
        owner: str | None = None,
        keep: bool = False,
        idle_s: float | Literal["none"] | None = None,
    ) -> AbstractAsyncContextManager[SessionAPI]:
        """Start a new session; leaving removes it (unless ``keep``)."""
        ...

    def attach_session(
        self,
        id_or_name: str,
        *,
        owner: str | None = None,
        create: bool = False,
        profile: str | None = None,
        image: str | None = None,
        idle_s: float | Literal["none"] | None = None,
    ) -> AbstractAsyncContextManager[SessionAPI]:
        """Connect to an existing session (left running); with ``create``, start a named one if missing."""
        ...

    async def list_sessions(self, *, owner: str | None = None, all_homes: bool = False) -> list[SessionInfo]:
        """This home's sessions (every home's with ``all_homes``; only ``owner``'s when given)."""
        ...

    async def stop_session(self, id_or_name: str, *, owner: str | None = None, all_homes: bool = False) -> None:
        """Kill everything a session started and remove it."""
        ...
