"""A stand-in executor for the MCP surface's protocol plumbing (listing, auth, approvals round trips).

Nothing here touches containers: the end-to-end tests in ``test_e2e.py`` run the real pipeline. This fake only
records which commands "ran"; a command starting with ``ask:`` goes through the gate's real approval step
(``request_approval``): without a handler it is blocked, and only ``True`` lets it run.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import trio

from executor.errors import ActionDenied, ApprovalRequired, ArtifactNotFound, SessionNotFound, TaskNotFound
from executor.gate.approvals import request_approval
from executor.models import BashAction
from executor.session import TaskInfo, ToolResult

_ids = itertools.count(1)


@dataclass
class FakeSession:
    """Records what ran; artifacts and tasks are stamped with the session id."""

    id: str
    owner: str | None
    name: str | None = None
    ran: list[str] = field(default_factory=list)
    tasks: dict[str, TaskInfo] = field(default_factory=dict)
    closed_event: trio.Event = field(default_factory=trio.Event)
    asks: int = 0

    async def bash(self, command: str, *, approval_handler: Any = None, **_: Any) -> ToolResult:
        if command.startswith("ask:"):
            # The gate's own approval step: blocked without a handler, only True approves, cancellation propagates.
            action = BashAction(session_id=self.id, command=command, cwd="/workspace", timeout_ms=1000)

            async def identity() -> str:
                return action.identity()

            try:
                await request_approval(action, approval_handler, current_identity=identity, reasons=("test rule",))
            except ApprovalRequired as exc:
                return ToolResult(tool="bash", outcome="blocked", text=str(exc))
            except ActionDenied as exc:
                return ToolResult(tool="bash", outcome="denied", text=str(exc))
            finally:
                self.asks += 1
        self.ran.append(command)
        return ToolResult(
            tool="bash",
            outcome="completed",
            text=f"$ {command}\n(exit 0)",
            artifact_id=f"{self.id}.a{len(self.ran)}",
            exit_code=0,
        )

    async def write_file(self, path: str, content: bytes | str, *, approval_handler: Any = None) -> ToolResult:
        self.ran.append(f"write {path}")
        return ToolResult(tool="write_file", outcome="completed", text=f"wrote {path}", artifact_id=f"{self.id}.w1")

    @property
    def closed(self) -> bool:
        """Whether the executor closed this session."""
        return self.closed_event.is_set()

    def _check(self, artifact_id: str) -> None:
        if not artifact_id.startswith(f"{self.id}."):
            raise ArtifactNotFound(f"artifact {artifact_id!r} not found")

    async def read_output(self, artifact_id: str, **kwargs: Any) -> ToolResult:
        self._check(artifact_id)
        return ToolResult(tool="read_output", outcome="completed", text=f"lines of {artifact_id}", data=kwargs)

    async def search_output(self, artifact_id: str, **kwargs: Any) -> ToolResult:
        self._check(artifact_id)
        return ToolResult(tool="search_output", outcome="completed", text=f"matches in {artifact_id}", data=kwargs)

    async def start_task(
        self,
        command: str,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        owner: str | None = None,
        approval_handler: Any = None,
    ) -> ToolResult:
        task_id = f"{self.id}.t{len(self.tasks) + 1}"
        info = TaskInfo(task_id=task_id, command=command, running=True, owner=owner, artifact_id=f"{self.id}.a99")
        self.tasks[task_id] = info
        return ToolResult(
            tool="task",
            outcome="completed",
            text=f"started {task_id}",
            artifact_id=info.artifact_id,
            data={"task_id": task_id},
        )

    def _task(self, task_id: str, owner: str | None) -> TaskInfo:
        info = self.tasks.get(task_id)
        if info is None or (info.owner is not None and info.owner != owner):
            raise TaskNotFound(f"no background task {task_id!r} in this session")
        return info

    async def read_task(self, task_id: str, *, owner: str | None = None, **kwargs: Any) -> ToolResult:
        self._task(task_id, owner)
        return ToolResult(tool="task", outcome="completed", text=f"output of {task_id}", data=kwargs)

    async def stop_task(self, task_id: str, *, owner: str | None = None) -> TaskInfo:
        info = self._task(task_id, owner).model_copy(update={"running": False})
        self.tasks[task_id] = info
        return info

    async def list_tasks(self, *, owner: str | None = None) -> list[TaskInfo]:
        return [info for info in self.tasks.values() if owner is None or info.owner in (None, owner)]


@dataclass
class FakeExecutor:
    """Opens FakeSessions; remembers every one, and the kept named ones."""

    sessions: list[FakeSession] = field(default_factory=list)
    kept: dict[str, FakeSession] = field(default_factory=dict)

    @asynccontextmanager
    async def open_session(
        self,
        *,
        profile: str | None = None,
        image: str | None = None,
        name: str | None = None,
        owner: str | None = None,
        keep: bool = False,
    ) -> AsyncIterator[FakeSession]:
        session = FakeSession(id=f"s{next(_ids)}", owner=owner, name=name)
        self.sessions.append(session)
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
    ) -> AsyncIterator[FakeSession]:
        session = self.kept.get(id_or_name)
        if session is None and create:
            session = FakeSession(id=f"s{next(_ids)}", owner=owner, name=id_or_name)
            self.sessions.append(session)
            self.kept[id_or_name] = session
        if session is None or session.owner != owner:
            raise SessionNotFound(f"no session {id_or_name!r}")
        yield session  # attached sessions are left running
