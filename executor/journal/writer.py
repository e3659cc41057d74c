"""Append events to a session's ndjson journal.

Writes are synchronous on purpose: the journal is a small local file, one event is one ``write(2)`` of one short
line, and a synchronous :meth:`JournalWriter.emit` cannot be interleaved with another task's emit under trio (there is
no checkpoint inside it). With ``fsync = "always"`` each emit also waits for the disk. The default, ``action``, waits
only at action boundaries (execution started and finished, an approval resolved, the session closed): one fsync
there makes every earlier event durable too, so the record of a decision is on disk before its action runs, at two
disk waits per action instead of six or more. An operator who wants less picks ``close`` or ``never``.

Several writers (processes, or writers in one process) may append to one journal. Every append happens under an
exclusive ``flock`` of the journal, and everything a writer learns about the file is learnt under that lock: it
reads whatever other writers appended since its own last append (the whole file on its first append), takes the
highest ``seq`` and the last signed line's mac from it, appends one line and seals the head, then unlocks. Nothing
is read or written outside the lock (opening only opens), so ``seq`` is strictly increasing and the chain unbroken
across all writers.

With a key (:class:`~executor.journal.chain.JournalKey`) every line is signed and chained to its predecessor, and
``<journal>.head`` is rewritten after each append (see :mod:`executor.journal.chain`). Lines the key does not
verify (forged or altered) are never chained to or counted for ``seq``.

The file is opened with ``O_APPEND`` and never rewritten: earlier lines are never touched. If a previous writer was
cut mid-line, a newline is appended first (under the lock) so that the cut line stays one refused line and the new
events stay whole.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TypeVar, get_args

from pydantic import ValidationError

from executor.config import JournalSettings
from executor.errors import JournalCorrupt, JournalError
from executor.journal.chain import GENESIS, JournalKey, head_path, load_journal_key, split_chain
from executor.journal.events import (
    ApprovalResolved,
    ArtifactInterrupted,
    EventBase,
    ExecutionFinished,
    ExecutionStarted,
    JournalEvent,
    SessionClosed,
)
from executor.journal.reader import decode_line

__all__ = ["JournalWriter", "interruption_journaler"]

_E = TypeVar("_E", bound=EventBase)
_BOUNDARIES = (ExecutionStarted, ExecutionFinished, ApprovalResolved, SessionClosed)
"""Events that end a step worth keeping across a power cut (``fsync = "action"``)."""
_SKIP_CHUNK = 64 * 1024
_EVENT_CLASSES: frozenset[type] = frozenset(get_args(get_args(JournalEvent)[0]))


class JournalWriter:
    """Append-only writer of one session's journal; a context manager (``with JournalWriter(...) as journal``).

    Args:
        path: the journal file (the pipeline uses ``$EXECUTOR_HOME/sessions/<session-id>/journal.ndjson``);
            missing parent folders are created (mode 0700).
        session_id: stamped on every event.
        settings: the journal section (``fsync``, ``max_line_bytes``, ``max_depth``).
        key: the home's journal key: every line is signed and chained, and the head sealed. None writes unsigned
            lines (a replay can then only read them unverified); the pipeline always passes the home's key.
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
        key: JournalKey | None = None,
        fsync: Callable[[int], None] = os.fsync,
    ) -> None:
        if not session_id:
            raise JournalError("a journal needs a session id")
        self._path = path
        self._session_id = session_id
        self._settings = settings
        self._key = key
        self._fsync = fsync
        self._fd: int | None = None
        self._seq = 0
        self._mac = GENESIS
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
        if created and self._settings.fsync != "never":
            try:
                self._sync_dir()
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
        # everything from "learn what the others wrote" to "seal the head" happens under one exclusive lock.
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            self._catch_up()
            data["seq"] = self._seq + 1
            try:
                stamped = type(event).model_validate(data)
            except ValidationError as exc:
                raise JournalError(f"event does not validate: {exc.errors()[0]['msg']}") from exc
            line = stamped.model_dump_json().encode("utf-8")
            try:
                decode_line(line, max_depth=self._settings.max_depth)
            except JournalCorrupt as exc:
                raise JournalError(f"{_type_of(stamped)} event would be refused by a reader: {exc}") from exc
            mac = self._mac
            if self._key is not None:
                line, mac = self._key.sign(self._mac, line)
            if len(line) > self._settings.max_line_bytes:
                raise JournalError(
                    f"{_type_of(stamped)} event is {len(line)} bytes, over journal.max_line_bytes "
                    f"({self._settings.max_line_bytes}); shorten its material or raise the limit"
                )
            self._write(line + b"\n")
            self._seq += 1
            self._mac = mac
            sync = self._settings.fsync == "always" or (
                self._settings.fsync == "action" and isinstance(stamped, _BOUNDARIES)
            )
            if sync:
                self._sync()
            if self._key is not None:
                self._seal(sync=sync)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        return stamped

    def _catch_up(self) -> None:
        """Learn the seq and chain position of what other writers appended since our last append (under the lock)."""
        assert self._fd is not None
        size = os.fstat(self._fd).st_size
        if size == self._size:
            return
        if self._size == 0 and self._key is not None:
            self._start_from_head(size)
        limit = self._settings.max_line_bytes
        ends_with_newline = True
        try:
            with self._path.open("rb") as stream:
                stream.seek(self._size)
                remaining = size - self._size
                while remaining > 0:
                    raw = stream.readline(min(remaining, limit + 1))
                    if not raw:
                        break
                    remaining -= len(raw)
                    ends_with_newline = raw.endswith(b"\n")
                    if not ends_with_newline:
                        if len(raw) > limit:  # an over-long line: skip the rest of it, bounded
                            while remaining > 0 and not ends_with_newline:
                                chunk = stream.readline(min(remaining, _SKIP_CHUNK))
                                if not chunk:
                                    break
                                remaining -= len(chunk)
                                ends_with_newline = chunk.endswith(b"\n")
                        continue
                    self._learn(raw[:-1])
        except OSError as exc:
            raise JournalError(f"cannot read journal {self._path}: {exc.strerror or exc}") from exc
        self._size = size
        if not ends_with_newline:
            # A writer was cut mid-line (it held the lock, so it is gone): end its line so ours stays whole.
            self._write(b"\n")

    def _start_from_head(self, size: int) -> None:
        """On a first append, start after the sealed head (when this key sealed it) instead of reading every line."""
        assert self._key is not None
        try:
            raw = head_path(self._path).read_bytes()
        except OSError:
            return
        sealed = self._key.read_head(raw)
        if sealed is None or sealed[2] > size:
            return  # none, foreign, forged, or the journal was cut below it: read everything
        self._seq, self._mac, self._size = sealed

    def _learn(self, raw: bytes) -> None:
        body, mark = split_chain(raw)
        # The line is parsed, not pattern-matched: events do not all serialise ``seq`` at the same place (a
        # judgment starts with its judgment_id), and a pattern that missed one handed out its seq a second time.
        try:
            seq = decode_line(body, max_depth=self._settings.max_depth).get("seq")
        except JournalCorrupt:
            return
        if not isinstance(seq, int) or isinstance(seq, bool):
            return
        # Every line moves seq (so seq stays increasing for any reader), but only a line this key signed can be a
        # predecessor: a forged line is never chained to.
        self._seq = max(self._seq, seq)
        if self._key is not None and mark is not None and self._key.verifies(body, mark):
            self._mac = mark.mac

    def _seal(self, *, sync: bool) -> None:
        assert self._key is not None
        head = head_path(self._path)
        tmp = head.with_name(head.name + ".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            try:
                os.write(fd, self._key.head_bytes(self._seq, self._mac, self._size))
                if sync:
                    self._fsync(fd)
            finally:
                os.close(fd)
            tmp.replace(head)
        except OSError as exc:
            raise JournalError(f"cannot seal the journal head {head}: {exc.strerror or exc}") from exc

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


def interruption_journaler(home: Path, settings: JournalSettings) -> Callable[[str, str, int, str], None]:
    """A callback for :meth:`ArtifactStore.open`: journal an interrupted artifact in its session's journal.

    The callback takes (session id, artifact id, bytes kept, reason) and appends an ``artifact_interrupted`` event,
    signed with the home's key, to ``<home>/sessions/<session id>/journal.ndjson``.
    """

    def record(session_id: str, artifact_id: str, bytes_kept: int, reason: str) -> None:
        path = home / "sessions" / session_id / "journal.ndjson"
        key = load_journal_key(home, create=True)
        with JournalWriter(path, session_id=session_id, settings=settings, key=key) as journal:
            journal.emit(ArtifactInterrupted(artifact_id=artifact_id, bytes_kept=bytes_kept, reason=reason[:1000]))

    return record
