"""Append events to a session's ndjson journal.

Writes are synchronous on purpose: the journal is a small local file, one event is one ``write(2)`` of one short
line, and a synchronous :meth:`JournalWriter.emit` cannot be interleaved with another task's emit under trio (there is
no checkpoint inside it), so lines never mix and ``seq`` is assigned in file order. With ``fsync = "always"`` each
emit also waits for the disk. The default, ``action``, waits only at action boundaries (execution started and
finished, an approval resolved, the session closed): one fsync there makes every earlier event durable too, so the
record of a decision is on disk before its action runs, at two disk waits per action instead of six or more. An
operator who wants less picks ``close`` or ``never``.

The file is opened with ``O_APPEND`` and never rewritten: earlier lines are never touched. Reopening an existing
journal continues after its highest valid ``seq``; if the previous writer was cut mid-line, a newline is appended
first so that the cut line stays one refused line and the new events stay whole.
"""

from __future__ import annotations

import fcntl
import os
import re
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TypeVar, get_args

from pydantic import ValidationError

from executor.config import JournalSettings
from executor.errors import JournalCorrupt, JournalError
from executor.journal.events import (
    ApprovalResolved,
    EventBase,
    ExecutionFinished,
    ExecutionStarted,
    JournalEvent,
    SessionClosed,
)
from executor.journal.reader import decode_line, read_journal

__all__ = ["JournalWriter"]

_E = TypeVar("_E", bound=EventBase)
_BOUNDARIES = (ExecutionStarted, ExecutionFinished, ApprovalResolved, SessionClosed)
"""Events that end a step worth keeping across a power cut (``fsync = "action"``)."""
_SEQ_RE = re.compile(rb'\{"v":\s*\d+,\s*"seq":\s*(\d{1,18})')
"""The envelope's first two keys as the writer serialises them; anchored so text inside an event never matches."""
_EVENT_CLASSES: frozenset[type] = frozenset(get_args(get_args(JournalEvent)[0]))


class JournalWriter:
    """Append-only writer of one session's journal; a context manager (``with JournalWriter(...) as journal``).

    Args:
        path: the journal file (the pipeline uses ``$EXECUTOR_HOME/sessions/<session-id>/journal.ndjson``);
            missing parent folders are created (mode 0700).
        session_id: stamped on every event.
        settings: the journal section (``fsync``, ``max_line_bytes``, ``max_depth``).
        fsync: the function called to flush a file descriptor to disk; a seam so tests can count calls.
            Called after each event (``always``), once when the writer closes (``close``), or never (``never``);
            under ``always`` and ``close`` the parent folder is also synced once when the file is created.
    """

    def __init__(
        self,
        path: Path,
        *,
        session_id: str,
        settings: JournalSettings,
        fsync: Callable[[int], None] = os.fsync,
    ) -> None:
        if not session_id:
            raise JournalError("a journal needs a session id")
        self._path = path
        self._session_id = session_id
        self._settings = settings
        self._fsync = fsync
        self._fd: int | None = None
        self._seq = 0
        self._size = 0
        self._closed = False

    @property
    def path(self) -> Path:
        """The journal file."""
        return self._path

    @property
    def last_seq(self) -> int:
        """The ``seq`` of the last event written (0 before any)."""
        return self._seq

    def open(self) -> None:
        """Open (creating if needed) the journal for appending.

        Raises:
            JournalError: the file cannot be created or opened, or the writer was already used.
        """
        if self._fd is not None or self._closed:
            raise JournalError(f"journal writer for {self._path} was already opened; make a new one")
        try:
            self._path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            created = not self._path.exists()
            fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise JournalError(f"cannot open journal {self._path}: {exc.strerror or exc}") from exc
        self._fd = fd
        try:
            if created:
                if self._settings.fsync != "never":
                    self._sync_dir()
            else:
                self._resume()
        except BaseException:
            self._fd = None
            os.close(fd)
            raise

    def _sync_dir(self) -> None:
        # A new file's directory entry is only durable once the folder itself is synced.
        dir_fd = os.open(self._path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            self._fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def _resume(self) -> None:
        with self._path.open("rb") as stream:
            previous = read_journal(stream, settings=self._settings, mode="lenient")
            stream.seek(0, os.SEEK_END)
            size = stream.tell()
            last = b"\n"
            if size:
                stream.seek(size - 1)
                last = stream.read(1)
        self._seq = max((event.seq for event in previous.events), default=0)
        self._size = size
        if last != b"\n":
            self._write(b"\n")

    def _write(self, data: bytes) -> None:
        assert self._fd is not None
        view = memoryview(data)
        try:
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
                self._size = os.fstat(self._fd).st_size
        except OSError as exc:
            raise JournalError(f"cannot append to journal {self._path}: {exc.strerror or exc}") from exc

    def emit(self, event: _E) -> _E:
        """Stamp ``event`` with the next ``seq`` and this session, validate it, and append it as one line.

        Returns:
            The event as written (with ``seq`` and ``session_id`` set).

        Raises:
            JournalError: the writer is not open, the event names another session, the line would be longer than
                ``max_line_bytes`` or deeper than ``max_depth`` (a reader would refuse it), or the write failed.
        """
        if self._fd is None:
            raise JournalError(f"journal {self._path} is not open; use the writer as a context manager")
        if type(event) not in _EVENT_CLASSES:
            raise JournalError(f"only journal events can be emitted, not {type(event).__name__}")
        # mode="json" gives the shapes a reader will see, so what is validated here is what is read back.
        data = event.model_dump(mode="json")
        if data.get("session_id") not in ("", self._session_id):
            raise JournalError(
                f"event for session {data.get('session_id')!r} cannot go into the journal of {self._session_id!r}"
            )
        data["session_id"] = self._session_id
        # Several processes may append to one session's journal (CLI calls on a named session, an MCP server):
        # an exclusive lock around "find the last seq, append" keeps seq strictly increasing across all of them.
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            self._catch_up()
            data["seq"] = self._seq + 1
            try:
                stamped = type(event).model_validate(data)
            except ValidationError as exc:
                raise JournalError(f"event does not validate: {exc.errors()[0]['msg']}") from exc
            line = stamped.model_dump_json().encode("utf-8")
            if len(line) > self._settings.max_line_bytes:
                raise JournalError(
                    f"{_type_of(stamped)} event is {len(line)} bytes, over journal.max_line_bytes "
                    f"({self._settings.max_line_bytes}); shorten its material or raise the limit"
                )
            try:
                decode_line(line, max_depth=self._settings.max_depth)
            except JournalCorrupt as exc:
                raise JournalError(f"{_type_of(stamped)} event would be refused by a reader: {exc}") from exc
            self._write(line + b"\n")
            self._seq += 1
            if self._settings.fsync == "always" or (
                self._settings.fsync == "action" and isinstance(stamped, _BOUNDARIES)
            ):
                self._sync()
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        return stamped

    def _catch_up(self) -> None:
        """Take the seq of events another writer appended since our last write (called under the lock)."""
        assert self._fd is not None
        size = os.fstat(self._fd).st_size
        if size == self._size:
            return
        with self._path.open("rb") as stream:
            stream.seek(self._size)
            tail = stream.read(size - self._size)
        for raw in tail.split(b"\n"):
            match = _SEQ_RE.match(raw)
            if match is not None:
                self._seq = max(self._seq, int(match.group(1)))
        self._size = size
        if not tail.endswith(b"\n"):
            self._write(b"\n")

    def _sync(self) -> None:
        assert self._fd is not None
        try:
            self._fsync(self._fd)
        except OSError as exc:
            raise JournalError(f"cannot fsync journal {self._path}: {exc.strerror or exc}") from exc

    def close(self) -> None:
        """Sync (under ``fsync = "close"``) and close the file; idempotent."""
        if self._fd is None:
            self._closed = True
            return
        fd = self._fd
        try:
            if self._settings.fsync in ("close", "action"):
                self._sync()
        finally:
            self._fd = None
            self._closed = True
            os.close(fd)

    def __enter__(self) -> JournalWriter:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _type_of(event: EventBase) -> str:
    return str(getattr(event, "type", type(event).__name__))
