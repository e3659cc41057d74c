"""A stand-in executor and session for a surface's protocol plumbing (listing, auth, approvals round trips).

Typed against the one session API (:class:`~executor.session.SessionAPI`, :class:`~executor.session.ExecutorAPI`):
a drifted signature fails mypy, and a test compares the defaults. Nothing here touches containers: tests of what
runs use the real pipeline on the real engine. The fake records which commands "ran"; a command starting with
``ask:`` goes through the gate's real approval step (``request_approval``): without a handler it is blocked, and
only ``True`` lets it run.
"""

from __future__ import annotations

import errno
import itertools
import shlex
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import trio

from executor.errors import (
    ActionDenied,
    ApprovalRequired,
    ArtifactNotFound,
    SessionNotFound,
    SessionNotRunning,
    TaskNotFound,
    WriteFailed,
)
from executor.gate.approvals import ApprovalHandler, request_approval
from executor.models import BashAction, StdinFile
from executor.sandbox.base import SessionInfo
from executor.session import (
    USE_DEFAULT,
    ArtifactBytes,
    ExecutorAPI,
    FileContent,
    FocusMode,
    HandlerChoice,
    SessionAPI,
    TaskBytes,
    TaskInfo,
    ToolResult,
)

__all__ = ["FakeExecutor", "FakeSession"]

_ids = itertools.count(1)


@dataclass
class FakeSession:
    """Records what ran; artifacts and tasks are stamped with the session id.

    ``default_handler`` stands for the executor's approval handler (what :data:`USE_DEFAULT` means).
    """

    id: str
    owner: str | None
    name: str | None = None
    default_handler: ApprovalHandler | None = None
    ran: list[str] = field(default_factory=list)
    tasks: dict[str, TaskInfo] = field(default_factory=dict)
    closed_event: trio.Event = field(default_factory=trio.Event)
    asks: int = 0
    files: dict[str, bytes] = field(default_factory=dict)
    lost: trio.Event = field(default_factory=trio.Event)
    """Set to stand for the session's container going away."""

    async def wait_lost(self) -> None:
        await self.lost.wait()

    def _handler(self, given: HandlerChoice) -> ApprovalHandler | None:
        return self.default_handler if given is USE_DEFAULT else given

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
        """Record ``command``; an ``ask:`` command asks ``approval_handler`` first, through the real approval step."""
        if command.startswith("ask:"):
            # The gate's own approval step: blocked without a handler, only True approves, cancellation propagates.
            action = BashAction(session_id=self.id, command=command, cwd=cwd or "/workspace", timeout_ms=1000)

            async def identity() -> str:
                return action.identity()

            try:
                await request_approval(
                    action, self._handler(approval_handler), current_identity=identity, reasons=("test rule",)
                )
            except ApprovalRequired as exc:
                return ToolResult(tool="bash", outcome="blocked", text=str(exc))
            except ActionDenied as exc:
                return ToolResult(tool="bash", outcome="denied", text=str(exc))
            finally:
                self.asks += 1
        return self._ran("bash", command)

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
        """Record the argument list; it "exits" 0 with empty output."""
        return self._ran("exec", shlex.join(argv))

    def _ran(self, tool: Literal["bash", "exec"], command: str) -> ToolResult:
        """Record ``command`` as run: it "exits" 0 with empty, whole streams."""
        self.ran.append(command)
        return ToolResult(
            tool=tool,
            outcome="completed",
            text=f"$ {command}\n(exit 0)",
            artifact_id=f"{self.id}.a{len(self.ran)}",
            exit_code=0,
            stdout_whole=True,
            stderr_whole=True,
        )

    async def write_file(
        self,
        path: str,
        content: bytes | str,
        *,
        create_parents: bool = False,
        approval_handler: HandlerChoice = USE_DEFAULT,
    ) -> ToolResult:
        """Record the write."""
        self.ran.append(f"write {path}")
        self.files[path] = content.encode() if isinstance(content, str) else content
        return ToolResult(tool="write_file", outcome="completed", text=f"wrote {path}", artifact_id=f"{self.id}.w1")

    async def read_file(
        self, path: str, *, max_bytes: int | None = None, approval_handler: HandlerChoice = USE_DEFAULT
    ) -> FileContent:
        """What this fake wrote to ``path``.

        Raises:
            WriteFailed: nothing was written there (``errno`` ENOENT).
        """
        if path not in self.files:
            missing = WriteFailed(f"{path} does not exist")
            missing.errno = errno.ENOENT
            raise missing
        return FileContent(path=path, data=self.files[path], sha256=None)

    async def read_artifact(
        self, artifact_id: str, *, stream: str | None = None, offset: int = 0, max_bytes: int = 1 << 20
    ) -> ArtifactBytes:
        """An empty stream of one of this session's artifact ids."""
        self._check(artifact_id)
        return ArtifactBytes(
            artifact_id=artifact_id, stream=stream or "stdout", offset=offset, data=b"", stored_bytes=0, dropped_bytes=0
        )

    @property
    def closed(self) -> bool:
        """Whether the executor closed this session."""
        return self.closed_event.is_set()

    def _check(self, artifact_id: str) -> None:
        if not artifact_id.startswith(f"{self.id}."):
            raise ArtifactNotFound(f"artifact {artifact_id!r} not found")

    async def read_output(
        self,
        artifact_id: str,
        *,
        stream: str | None = None,
        start_line: int = 1,
        line_count: int | None = None,
        start_byte_in_line: int | None = None,
    ) -> ToolResult:
        """Echo the request (``data``) for one of this session's artifact ids."""
        self._check(artifact_id)
        request: dict[str, object] = {
            "stream": stream,
            "start_line": start_line,
            "line_count": line_count,
            "start_byte_in_line": start_byte_in_line,
        }
        return ToolResult(tool="read_output", outcome="completed", text=f"lines of {artifact_id}", data=request)

    async def search_output(
        self, artifact_id: str, *, pattern: str, stream: str | None = None, limit: int = 20, start_line: int = 1
    ) -> ToolResult:
        """Echo the request (``data``) for one of this session's artifact ids."""
        self._check(artifact_id)
        request: dict[str, object] = {"pattern": pattern, "stream": stream, "limit": limit, "start_line": start_line}
        return ToolResult(tool="search_output", outcome="completed", text=f"matches in {artifact_id}", data=request)

    async def start_task(
        self,
        command: str,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        owner: str | None = None,
        approval_handler: HandlerChoice = USE_DEFAULT,
    ) -> ToolResult:
        """Record a running task."""
        task_id = f"{self.id}.t{len(self.tasks) + 1}"
        info = TaskInfo(task_id=task_id, command=command, running=True, owner=owner, artifact_id=f"{self.id}.a99")
        self.tasks[task_id] = info
        return ToolResult(
            tool="task_start",
            outcome="completed",
            text=f"started {task_id}",
            artifact_id=info.artifact_id,
            task_id=task_id,
            data={"task_id": task_id},
        )

    def _task(self, task_id: str, owner: str | None) -> TaskInfo:
        info = self.tasks.get(task_id)
        if info is None or (info.owner is not None and info.owner != owner):
            raise TaskNotFound(f"no background task {task_id!r} in this session")
        return info

    async def read_task(
        self,
        task_id: str,
        *,
        stream: Literal["stdout", "stderr"] = "stdout",
        offset: int = 0,
        max_bytes: int = 65_536,
        owner: str | None = None,
    ) -> ToolResult:
        """Echo the request (``data``) for one of the owner's tasks."""
        self._task(task_id, owner)
        request: dict[str, object] = {"stream": stream, "offset": offset, "max_bytes": max_bytes}
        return ToolResult(
            tool="task_read", outcome="completed", text=f"output of {task_id}", task_id=task_id, data=request
        )

    async def read_task_bytes(
        self,
        task_id: str,
        *,
        stream: Literal["stdout", "stderr"] = "stdout",
        offset: int = 0,
        max_bytes: int = 65_536,
        owner: str | None = None,
    ) -> TaskBytes:
        """No bytes at ``offset`` of one of the owner's tasks (ended when stopped)."""
        info = self._task(task_id, owner)
        return TaskBytes(task_id=task_id, stream=stream, data=b"", offset=offset, end=offset, running=info.running)

    async def stop_task(self, task_id: str, *, owner: str | None = None) -> TaskInfo:
        """Mark one of the owner's tasks ended."""
        info = self._task(task_id, owner).model_copy(update={"running": False})
        self.tasks[task_id] = info
        return info

    async def list_tasks(self, *, owner: str | None = None) -> list[TaskInfo]:
        """The owner's tasks (every task without an owner)."""
        return [info for info in self.tasks.values() if owner is None or info.owner in (None, owner)]

    def owner_of(self, task_id: str) -> str | None:
        """The owner stored with a task."""
        info = self.tasks.get(task_id)
        if info is None:
            raise TaskNotFound(f"no background task {task_id!r} in this session")
        return info.owner


@dataclass
class FakeExecutor:
    """Opens FakeSessions; remembers every one, and the kept named ones."""

    approval_handler: ApprovalHandler | None = None
    sessions: list[FakeSession] = field(default_factory=list)
    kept: dict[str, FakeSession] = field(default_factory=dict)

    def _new(self, owner: str | None, name: str | None) -> FakeSession:
        session = FakeSession(id=f"s{next(_ids)}", owner=owner, name=name, default_handler=self.approval_handler)
        self.sessions.append(session)
        return session

    @asynccontextmanager
    async def open_session(
        self,
        *,
        profile: str | None = None,
        image: str | None = None,
        name: str | None = None,
        owner: str | None = None,
        keep: bool = False,
        idle_s: float | Literal["none"] | None = None,
    ) -> AsyncIterator[FakeSession]:
        """A new FakeSession, closed on exit (remembered by name when ``keep``)."""
        session = self._new(owner, name)
        if keep and name is not None:
            self.kept[name] = session
        try:
            yield session
        finally:
            session.closed_event.set()

    @asynccontextmanager
    async def attach_session(
        self,
        id_or_name: str,
        *,
        owner: str | None = None,
        create: bool = False,
        profile: str | None = None,
        image: str | None = None,
        idle_s: float | Literal["none"] | None = None,
    ) -> AsyncIterator[FakeSession]:
        """A kept FakeSession (or a new one with ``create``, also in place of a kept one that was lost), left
        running on exit.

        Raises:
            SessionNotFound: no such kept session (:meth:`stop_session` forgets one), or another owner's.
            SessionNotRunning: a lost kept session (its workspace stands kept), asked for without ``create``.
        """
        session = self.kept.get(id_or_name)
        if session is not None and session.lost.is_set() and not create and session.owner == owner:
            raise SessionNotRunning(f"session {id_or_name!r} is not running; --create starts it again")
        if (session is None or session.lost.is_set()) and create:
            session = self._new(owner, id_or_name)
            self.kept[id_or_name] = session
        if session is None or session.owner != owner:
            raise SessionNotFound(f"no session {id_or_name!r}")
        yield session  # attached sessions are left running

    async def list_sessions(self, *, owner: str | None = None, all_homes: bool = False) -> list[SessionInfo]:
        """The fake holds no containers: nothing to list."""
        return []

    async def stop_session(self, id_or_name: str, *, owner: str | None = None, all_homes: bool = False) -> None:
        """Forget a kept session.

        Raises:
            SessionNotFound: no such kept session, or another owner's.
        """
        session = self.kept.get(id_or_name)
        if session is None or session.owner != owner:
            raise SessionNotFound(f"no session {id_or_name!r}")
        del self.kept[id_or_name]
        session.closed_event.set()


if TYPE_CHECKING:
    # The fake implements the one API: a drifted signature fails mypy here.
    _session_api: type[SessionAPI] = FakeSession
    _executor_api: type[ExecutorAPI] = FakeExecutor
