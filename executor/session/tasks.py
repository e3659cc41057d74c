"""Background tasks: commands started without a deadline, their records, and the mirror of their streams.

The session's agent runs a task and keeps a ring buffer of its output. :class:`BackgroundTasks` records who started
it (the opaque owner token) and which artifact mirrors its streams, as rows of the artifact index that every process
of the home shares (the CLI and a server never lose each other's records); it copies the streams into that artifact
while the session object lives, and gives a task whose mirror ended with another process (a CLI call) one complete
artifact once it has ended.
"""

from __future__ import annotations

from contextlib import suppress
from pathlib import Path
from typing import Final, Literal

import trio

from executor.artifacts import Capture, SessionArtifacts, TaskRecord
from executor.artifacts.paging import byte_page
from executor.errors import (
    AgentError,
    CommandRejected,
    OutputRangeError,
    SandboxLost,
    SessionUnhealthy,
    TaskNotFound,
)
from executor.focus.sanitize import escaped
from executor.journal import JournalWriter
from executor.journal.events import ExecutionFinished, ExecutionStarted
from executor.models import RunResult, RunSpec
from executor.nesting import DEFAULT_MAX_DEPTH, loads_json
from executor.sandbox.agent.client import AgentClient
from executor.session.api import TaskBytes, TaskInfo, ToolResult
from executor.session.gating import owner_matches
from executor.session.presentation import Views
from executor.tools.bash import cwd_rejection

__all__ = ["BackgroundTasks"]

_TASK_POLL_S: Final = 0.05


class BackgroundTasks:
    """One session's background tasks (records under the session's state directory, mirrors in its nursery)."""

    def __init__(
        self,
        *,
        client: AgentClient,
        artifacts: SessionArtifacts,
        journal: JournalWriter,
        views: Views,
        nursery: trio.Nursery,
        legacy_records: Path,
        max_running: int,
        display_max_chars: int,
    ) -> None:
        self._client = client
        self._artifacts = artifacts
        self._journal = journal
        self._views = views
        self._nursery = nursery
        self._max_running = max_running
        self._display_max_chars = display_max_chars
        self._mirrors: set[str] = set()
        self._mirrored: dict[str, trio.Event] = {}
        """Set when the mirror of a task this session started has ended (its artifact finished)."""
        self._import_legacy(legacy_records)

    # -- records -----------------------------------------------------------------------------------------------

    def _import_legacy(self, path: Path) -> None:
        """Move records an earlier version kept in ``tasks.json`` into the index (once; the file is removed)."""
        try:
            raw = loads_json(path.read_text(encoding="utf-8"), max_depth=DEFAULT_MAX_DEPTH)
        except FileNotFoundError:
            return
        except (OSError, ValueError):
            return  # unreadable: nothing to import
        known = self._artifacts.tasks()
        for key, value in raw.items() if isinstance(raw, dict) else ():
            if key not in known:
                with suppress(ValueError):
                    self._artifacts.put_task(TaskRecord.model_validate(value))
        path.unlink(missing_ok=True)

    def _load_tasks(self) -> dict[str, TaskRecord]:
        return self._artifacts.tasks()

    def _task(self, task_id: str, owner: str | None) -> TaskRecord:
        record = self._artifacts.task(task_id)
        # The owner token is opaque: it is compared only when the caller (a surface's access policy) passes one.
        if record is None or not owner_matches(record.owner, owner):
            raise TaskNotFound(f"no background task {task_id!r} in this session (the session's task list shows yours)")
        return record

    # -- lifecycle ---------------------------------------------------------------------------------------------

    async def check_capacity(self) -> None:
        """Refuse a new task when ``bash.max_background_tasks`` already run.

        Raises:
            CommandRejected: too many tasks already run.
        """
        running = [t for t in await self._client.list_tasks() if t.running]
        if len(running) >= self._max_running:
            raise CommandRejected(
                f"{len(running)} background tasks already run (bash.max_background_tasks); stop one with "
                f"{self._views.hints.task_stop(session_id=self._views.session_id)}"
            )

    async def start(self, spec: RunSpec, *, command: str, owner: str | None, action_id: str) -> ToolResult:
        """Start the (already gated) run ``spec`` as a task, record it and mirror its streams."""
        try:
            task_id = await self._client.start_task(spec)
        except AgentError as exc:
            rejected = cwd_rejection(exc, spec.cwd)
            if rejected is None:
                raise
            raise rejected from None
        self._journal.emit(ExecutionStarted(action_id=action_id))
        capture = self._task_capture(task_id)
        self._artifacts.put_task(
            TaskRecord(
                task_id=task_id, command=command, owner=owner, artifact_id=capture.artifact_id, action_id=action_id
            )
        )
        self._mirrors.add(task_id)
        self._mirrored[task_id] = trio.Event()
        self._nursery.start_soon(self._mirror, task_id, action_id, capture)
        return ToolResult(
            tool="task_start",
            outcome="completed",
            text=(
                f"[started background task {task_id}; read its output with "
                f"{self._views.hints.task_read(task_id, session_id=self._views.session_id)}; its streams are kept as "
                f"artifact {capture.artifact_id}]"
            ),
            action_id=action_id,
            artifact_id=capture.artifact_id,
            task_id=task_id,
            data={"task_id": task_id},
        )

    async def _mirror(self, task_id: str, action_id: str | None, capture: Capture) -> None:
        """Copy a task's streams from the agent into its artifact until the task ends (or the session closes)."""
        offsets = {"stdout": 0, "stderr": 0}
        lost = {"stdout": 0, "stderr": 0}
        result: RunResult | None = None
        try:
            while True:
                # Whether the task had ended is taken before this round's reads: an ended task has written
                # everything, so reading both streams to their end then completes the mirror without a race.
                ended_before_round: bool | None = None
                for stream in ("stdout", "stderr"):
                    while True:
                        chunk = await self._client.read_task(task_id, stream, offsets[stream])
                        if ended_before_round is None:
                            ended_before_round = not chunk.running
                        # The agent's buffer dropped bytes before they were read (it filled while no one read:
                        # a fast writer, or a task whose starting process ended): the artifact says how many.
                        lost[stream] += max(0, chunk.offset - offsets[stream])
                        if chunk.data:
                            capture.feed(stream, chunk.data)
                        offsets[stream] = chunk.offset + len(chunk.data)
                        result = chunk.result
                        if offsets[stream] >= chunk.end:
                            break
                capture.flush()
                if ended_before_round:
                    break
                await trio.sleep(_TASK_POLL_S)
        except (SandboxLost, SessionUnhealthy):
            pass  # the agent is gone or frozen: the mirror ends here and its artifact says "detached"
        finally:
            # Synchronous on purpose (no checkpoint): the mirror is closed even when the session is cancelled.
            # A mirror cut short by the end of this process says so ("detached"); a later attach that finds the
            # task ended gives it a complete artifact (see _settle_tasks).
            for stream, count in lost.items():
                if count:
                    capture.note(f"lost_{stream}_bytes", str(count))
            capture.finish(status="ok" if result is not None else "detached")
            if result is not None:
                if action_id:
                    self._journal.emit(
                        ExecutionFinished(
                            action_id=action_id,
                            cause=result.cause,
                            exit_code=result.exit_code,
                            duration_ms=result.duration_ms,
                            artifact_ids=(capture.artifact_id,),
                        )
                    )
                self._artifacts.finish_task(task_id, artifact_id=capture.artifact_id)
            self._mirrors.discard(task_id)
            if task_id in self._mirrored:
                self._mirrored.pop(task_id).set()

    def _task_capture(self, task_id: str) -> Capture:
        return self._artifacts.begin(kind="task", streams=("stdout", "stderr"), meta={"task_id": task_id})

    async def _settle_tasks(self) -> None:
        """Give each ended task whose mirror ended with another process (a CLI call) one complete artifact."""
        records = self._load_tasks()
        pending = [r for r in records.values() if not r.finished and r.task_id not in self._mirrors]
        if not pending:
            return
        ended = {t.task_id for t in await self._client.list_tasks() if not t.running}
        for record in pending:
            if record.task_id in ended:
                capture = self._task_capture(record.task_id)
                self._mirrors.add(record.task_id)
                await self._mirror(record.task_id, record.action_id, capture)

    async def settle_for(self, artifact_id: str) -> None:
        """Before ``artifact_id`` is read: when it is a task's first artifact, cut short because the process that
        started the task ended (``detached``, as after a CLI's ``bg start``), give the ended task its complete
        artifact now, so the id ``bg start`` printed leads to the whole output
        (:meth:`executor.artifacts.SessionArtifacts.current`). Anything else (or an unknown id) is left to the read.
        """
        if self._artifacts.current(artifact_id) == artifact_id and self._artifacts.detached_task(artifact_id):
            await self._settle_tasks()

    # -- the task tools ----------------------------------------------------------------------------------------

    async def read_task(
        self,
        task_id: str,
        *,
        stream: Literal["stdout", "stderr"],
        offset: int,
        max_bytes: int,
        owner: str | None,
    ) -> ToolResult:
        """See :meth:`executor.session.Session.read_task`."""
        view, _ = await self.read_page(task_id, stream=stream, offset=offset, max_bytes=max_bytes, owner=owner)
        return view

    async def read_page(
        self,
        task_id: str,
        *,
        stream: Literal["stdout", "stderr"],
        offset: int,
        max_bytes: int,
        owner: str | None,
    ) -> tuple[ToolResult, TaskBytes]:
        """See :meth:`executor.session.Session.read_task_page`."""
        _check_range(offset, max_bytes, stream)
        await self._settle_tasks()
        record = self._task(task_id, owner)
        chunk = await self._client.read_task(task_id, stream, offset, max_bytes)
        # The page is what the display budget holds of the bytes read, cut after a line (or, for a line longer than
        # the budget, between characters), and next_offset is where it ends: a page the sanitizer had to cut in
        # its middle hid bytes that next_offset then skipped.
        final = not chunk.running and chunk.offset + len(chunk.data) >= chunk.end
        page = byte_page(chunk.data, budget_chars=self._display_max_chars, more=not final, measure=_shown_chars)
        if page < len(chunk.data):
            chunk = chunk.model_copy(update={"data": chunk.data[:page]})
        next_offset = chunk.offset + len(chunk.data)

        async def read(start: int, count: int) -> bytes:
            # Bytes start..start+count, or the part of them the ring still holds (it may have dropped the first
            # since), over as many frames as they take.
            parts: list[bytes] = []
            position, stop = start, start + count
            while position < stop:
                back = await self._client.read_task(task_id, stream, position, stop - position)
                if not back.data or back.offset >= stop:
                    break
                if back.offset > position:
                    parts.clear()
                parts.append(back.data[: stop - back.offset])
                position = back.offset + len(parts[-1])
            return b"".join(parts)

        raw = await self._views.byte_window(
            chunk.data, offset=chunk.offset, first_kept=chunk.start, end=chunk.end, read=read
        )
        state = "running" if chunk.running else f"finished ({chunk.result.cause if chunk.result else 'unknown'})"
        header = f"[task {task_id} {stream} bytes {chunk.offset}-{next_offset} of {chunk.end}; {state}"
        if chunk.start > offset:
            header += f"; bytes before {chunk.start} were dropped (agent buffer full)"
        if next_offset < chunk.end:
            call = self._views.hints.task_read(
                task_id, session_id=self._views.session_id, stream=stream, offset=next_offset
            )
            header += f"; next: {call}"
        header += "]"
        text = await self._views.sanitize(f"{header}\n{raw}" if raw else header, artifact_id=record.artifact_id)
        # The page's exact bytes (they fit the display budget); "whole" only when they are the whole, ended stream.
        shown = chunk.data
        whole = chunk.start == 0 and chunk.offset == 0 and not chunk.running and next_offset >= chunk.end
        view = ToolResult(
            tool="task_read",
            outcome="completed",
            text=text,
            artifact_id=record.artifact_id,
            task_id=task_id,
            run=chunk.result,
            stdout=shown if stream == "stdout" else b"",
            stdout_whole=whole if stream == "stdout" else None,
            stderr=shown if stream == "stderr" else b"",
            stderr_whole=whole if stream == "stderr" else None,
            data={
                "task_id": task_id,
                "stream": stream,
                "offset": chunk.offset,
                "next_offset": next_offset,
                "end": chunk.end,
                "dropped": chunk.start,
                "running": chunk.running,
            },
        )
        page_bytes = TaskBytes(
            task_id=task_id,
            stream=stream,
            data=chunk.data,
            offset=chunk.offset,
            end=chunk.end,
            running=chunk.running,
            run=chunk.result,
        )
        return view, page_bytes

    async def read_task_bytes(
        self,
        task_id: str,
        *,
        stream: Literal["stdout", "stderr"],
        offset: int,
        max_bytes: int,
        owner: str | None,
    ) -> TaskBytes:
        """See :meth:`executor.session.Session.read_task_bytes`."""
        _check_range(offset, max_bytes, stream)
        self._task(task_id, owner)
        chunk = await self._client.read_task(task_id, stream, offset, max_bytes)
        return TaskBytes(
            task_id=task_id,
            stream=stream,
            data=chunk.data,
            offset=chunk.offset,
            end=chunk.end,
            running=chunk.running,
            run=chunk.result,
        )

    async def stop_task(self, task_id: str, *, owner: str | None) -> TaskInfo:
        """See :meth:`executor.session.Session.stop_task`."""
        self._task(task_id, owner)
        result = await self._client.stop_task(task_id)
        await self._settle_tasks()
        record = self._task(task_id, owner)
        return TaskInfo(
            task_id=task_id,
            command=record.command,
            running=False,
            owner=record.owner,
            artifact_id=record.artifact_id,
            result=result,
        )

    async def stop_all(self) -> None:
        """Stop every task still running (whoever started it) and give each unfinished one its complete artifact:
        before the session is stopped, as what a task wrote lives in the agent, which goes with the container."""
        for task in await self._client.list_tasks():
            if task.running:
                await self._client.stop_task(task.task_id)
                # A task this session mirrors: its mirror reads the rest and finishes the artifact itself.
                mirrored = self._mirrored.get(task.task_id)
                if mirrored is not None:
                    await mirrored.wait()
        await self._settle_tasks()

    async def list_tasks(self, *, owner: str | None) -> list[TaskInfo]:
        """See :meth:`executor.session.Session.list_tasks`."""
        await self._settle_tasks()
        records = self._load_tasks()
        out: list[TaskInfo] = []
        for task in await self._client.list_tasks():
            record = records.get(task.task_id)
            if record is None or not owner_matches(record.owner, owner):
                continue
            # How an ended task ended: an empty read carries its result (no bytes move).
            result = None if task.running else (await self._client.read_task(task.task_id, "stdout", 0, 0)).result
            out.append(
                TaskInfo(
                    task_id=task.task_id,
                    command=record.command,
                    running=task.running,
                    owner=record.owner,
                    artifact_id=record.artifact_id,
                    result=result,
                )
            )
        return out

    def owner_of(self, task_id: str) -> str | None:
        """See :meth:`executor.session.Session.owner_of`."""
        record = self._artifacts.task(task_id)
        if record is None:
            raise TaskNotFound(f"no background task {task_id!r} in this session")
        return record.owner


_MAX_OFFSET: Final = 2**63 - 1
"""Largest byte offset of a task's stream (what the agent's protocol carries)."""


def _check_range(offset: int, max_bytes: int, stream: str) -> None:
    """Refuse a read whose offset or size the agent's protocol cannot carry, or of a stream a task does not have.

    Raises:
        OutputRangeError: ``offset`` or ``max_bytes`` outside 0..2**63-1, or ``stream`` neither stdout nor stderr.
    """
    if stream not in ("stdout", "stderr"):
        raise OutputRangeError(f"stream must be 'stdout' or 'stderr'; got {stream!r}")
    if not 0 <= offset <= _MAX_OFFSET:
        raise OutputRangeError.bounds("offset", offset, 0, _MAX_OFFSET)
    if not 0 <= max_bytes <= _MAX_OFFSET:
        raise OutputRangeError.bounds("max_bytes", max_bytes, 0, _MAX_OFFSET)


def _shown_chars(data: bytes) -> int:
    """Characters a page's text spends on ``data``: its decoded length, or more when the sanitizer writes special
    characters escaped (a byte ``\\x01`` takes four)."""
    text = data.decode("utf-8", "surrogateescape")
    return max(len(text), len(escaped(text)))
