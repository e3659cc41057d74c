"""Append events to a session's ndjson journal.

Appends are synchronous on purpose: the journal is a small local file, one event is one ``write(2)`` of one short
line, and a synchronous append cannot be interleaved with another task's append under trio (there is no checkpoint
inside it). What may wait for the disk is separate:

* :meth:`JournalWriter.emit` appends and settles at once: it fsyncs as ``fsync`` says and seals the head before it
  returns, on the calling thread.
* :meth:`JournalWriter.append` only writes the line and leaves the fsync and the head seal owed; ``await``
  :meth:`JournalWriter.commit` pays them on the writer's commit thread, group-committed (concurrent actions of one
  session share one fsync). The pipeline appends and commits before an action runs and before its result is returned.

What each ``fsync`` mode guarantees, for an event appended and then committed (or emitted):

* every mode: the line is written to the file (the kernel holds it) before ``append``/``emit`` returns, so it
  survives the process being killed at any later point, and once the commit returns the sealed head reaches it;
* ``action`` (default): once the commit that follows an action boundary (execution started or finished, an approval
  resolved, the session closed) returns, that line and every earlier line are on disk (fsynced), then the head is
  sealed over them: the record of a decision is on disk before its action runs and the record of its
  end before its result is returned, at two disk waits per action;
* ``always``: every line is fsynced before ``append``/``emit`` returns;
* ``close``: lines are fsynced only when the writer closes; a power cut (not a killed process) can lose the lines
  since the session opened;
* ``never``: never fsynced; a power cut can lose any of them.

A commit seals the head after its fsync and does not fsync the head itself. After a power cut (never after a killed
process) the head can therefore be an older seal, which the reader accepts (it reaches fewer lines), or name lines
that were written but not yet fsynced (events between boundaries under ``action``, any under ``close``/``never``),
which the reader reports as ``head_mismatch``.

Several writers (processes, or writers in one process) may append to one journal. Every append happens under an
exclusive ``flock`` of the journal, and everything a writer learns about the file is learnt under that lock: it
reads whatever other writers appended since its own last append (the whole file on its first append), takes the
highest ``seq`` and the last signed line's mac from it, appends one line (an :meth:`~JournalWriter.emit` also seals
the head), then unlocks. Nothing is read or written outside the lock (opening only opens; a commit's seal is the one
exception, below), so ``seq`` is strictly increasing and the chain unbroken across all writers.

With a key (:class:`~executor.journal.chain.JournalKey`) every line is signed and chained to its predecessor, and
``<journal>.head`` is rewritten at each emit and commit (see :mod:`executor.journal.chain`); a head sealed by a commit
outside the lock can lag behind another writer's lines, never run ahead of the file. Lines the key does not
verify (forged or altered) are never chained to or counted for ``seq``.

The file is opened with ``O_APPEND`` and never rewritten: earlier lines are never touched. If a previous writer was
cut mid-line, a newline is appended first (under the lock) so that the cut line stays one refused line and the new
events stay whole; a write this writer sees fail (a full disk) has its part line cut off again at once.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar, get_args

from pydantic_core import PydanticSerializationError

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
    escaped,
)
from executor.journal.files import exchange_paths
from executor.journal.reader import check_dumped_line, decode_line

if TYPE_CHECKING:
    import trio

__all__ = ["JournalWriter", "interruption_journaler"]

_E = TypeVar("_E", bound=EventBase)
_BOUNDARIES = (ExecutionStarted, ExecutionFinished, ApprovalResolved, SessionClosed)
"""Events that end a step worth keeping across a power cut (``fsync = "action"``)."""
_SKIP_CHUNK = 64 * 1024
_HEAD_SLOT_BYTES = 512
"""A sealed head is padded with spaces to this size (JSON ignores them), so a head file is always overwritten whole."""
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
        fsync: the function called to flush a file descriptor to disk (default: ``fdatasync`` for the journal and
            its head, ``fsync`` for the folder); a seam so tests can count calls.
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
        fsync: Callable[[int], None] | None = None,
    ) -> None:
        if not session_id:
            raise JournalError("a journal needs a session id")
        self._path = path
        self._session_id = session_id
        self._settings = settings
        self._key = key
        # fdatasync is enough for an append-only file (it flushes the size with the data); a folder takes fsync.
        self._fsync = fsync or os.fdatasync
        self._fsync_dir = fsync or os.fsync
        self._fd: int | None = None
        self._seq = 0
        self._mac = GENESIS
        self._size = 0
        self._closed = False
        self._appended = 0
        """Lines this writer appended."""
        self._settled = 0
        """Of them, how many are fsynced as promised and under the sealed head."""
        self._sync_owed = False
        """A boundary was appended that no fsync covers yet (and no commit was asked for it)."""
        self._committer: _Committer | None = None
        self._staged: list[EventBase] = []
        """Events :meth:`stage` holds for the next write (validated, not yet stamped)."""
        self._temporaries: set[Path] = set()
        """The head's temporary files this writer's threads made (see :meth:`_write_head`); removed at close."""

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
        if self._key is not None:
            self._remove_stale_temporaries()
        if created and self._settings.fsync != "never":
            try:
                self._sync_dir()
            except BaseException:
                self._fd = None
                os.close(fd)
                raise

    def _remove_stale_temporaries(self) -> None:
        """Remove the head's temporary files that writers of processes now gone left (killed before they closed)."""
        head = head_path(self._path)
        prefix = head.name + "."
        try:
            with os.scandir(head.parent) as entries:
                names = [e.name for e in entries if e.name.startswith(prefix) and e.name.endswith(".tmp")]
        except OSError:
            return
        for name in names:
            pid = name[len(prefix) :].split(".", 1)[0]
            if pid.isdigit() and int(pid) != os.getpid() and not _process_alive(int(pid)):
                with contextlib.suppress(OSError):
                    (head.parent / name).unlink()

    def _sync_dir(self) -> None:
        # A new file's directory entry is only durable once the folder itself is synced.
        dir_fd = os.open(self._path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            self._fsync_dir(dir_fd)
        finally:
            os.close(dir_fd)

    def _write(self, data: bytes) -> None:
        """Append ``data``; under the flock, after :meth:`_catch_up` (so the file was ``_size`` bytes and nobody
        else writes meanwhile: the new size is counted, not asked for)."""
        assert self._fd is not None
        view = memoryview(data)
        start = self._size
        try:
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
                self._size += written
        except OSError as exc:
            # A short write (a full disk) left part of a line: cut it off, or the next append would follow a torn
            # line and the file would stop parsing there. The lock is held, so nobody appended after it.
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, start)
                self._size = start
            raise JournalError(f"cannot append to journal {self._path}: {exc.strerror or exc}") from exc

    def emit(self, event: _E) -> _E:
        """Stamp ``event`` with the next ``seq`` and this session, validate it, and append it as one line.

        Synchronous: the line is written, fsynced as ``fsync`` says and the head sealed before this returns (and so
        is everything :meth:`append` left owed).

        Returns:
            The event as written (with ``seq`` and ``session_id`` set).

        Raises:
            JournalError: the writer is not open, the event names another session, the line would be longer than
                ``max_line_bytes`` or deeper than ``max_depth`` (a reader would refuse it), or the write failed.
        """
        return self._append(event, settle=True)

    def stage(self, event: EventBase) -> None:
        """Hold ``event`` for the next :meth:`append`, :meth:`emit`, :meth:`commit` or :meth:`close`, which writes
        it, stamped in the order staged, in the same locked ``write(2)`` as its own line.

        For records that need not be in the file before the next one is (the steps of a gating decision, which the
        execution's start or the refusal's judgment follows at once): one lock, one catch-up and one write serve
        them all. A staged event is in the file only once one of those calls returns; if the process is killed
        first it is lost with the step it belongs to, which has then not run.

        Raises:
            JournalError: the writer is not open, or the event is not a journal event of this session.
        """
        self._admit(event)
        self._staged.append(event)

    def append(self, event: _E) -> _E:
        """Like :meth:`emit`, but the fsync and the head seal it owes are left to the next :meth:`commit`.

        The line itself is written (``write(2)``) before this returns, so it survives the process being killed; it
        is durable against a power cut, and the head reaches it, once a later :meth:`commit` (or :meth:`emit`, or
        :meth:`close`) returns. Under ``fsync = "always"`` this is :meth:`emit`.
        """
        return self._append(event, settle=self._settings.fsync == "always")

    async def commit(self, *, seal: bool = True) -> None:
        """Make everything appended so far as durable as ``fsync`` promises, and seal the head over it.

        The fsync and the seal run on this writer's commit thread (the event loop keeps running). Group commit: a
        commit asked for while the thread is on the disk is merged with every other one asked for meanwhile, so
        concurrent actions of a session share fsyncs. A boundary appended after the first commit starts its fsync
        at once, so the disk wait overlaps whatever the caller does before it commits. Returns at once when
        nothing is owed.

        Args:
            seal: seal the head too; False only waits for what is owed to be fsynced and leaves the seal to the next
                commit (the pipeline's commit before an action runs: the one before its result is returned seals).

        Raises:
            JournalError: the writer is not open, or the fsync or the seal failed.
        """
        import trio  # here, not at the top: importing the journal package must not load trio (test_init)

        if self._fd is None:
            raise JournalError(f"journal {self._path} is not open; use the writer as a context manager")
        self.flush()
        target = self._appended
        committer = self._committer
        in_flight = committer is not None and committer.synced < target and committer.busy
        if not self._sync_owed and (not seal or self._settled >= target) and not in_flight:
            return
        token = trio.lowlevel.current_trio_token()
        if self._committer is None or self._committer.token is not token:
            if self._committer is not None:
                self._committer.stop()
            self._committer = _Committer(self, token)
        committer = self._committer
        self._request(seal=seal)
        done = trio.Event()
        committer.wait_for(target, seal=seal, event=done)
        await done.wait()
        if committer.error is not None:
            raise committer.error
        if seal:
            self._settled = max(self._settled, committer.sealed)

    def _request(self, *, seal: bool) -> None:
        """Hand the commit thread everything appended so far (what it owes to the disk and, with ``seal``, the head)."""
        assert self._committer is not None
        self._committer.request((self._appended, self._seq, self._mac, self._size), sync=self._sync_owed, seal=seal)
        self._sync_owed = False

    def flush(self) -> None:
        """Write what :meth:`stage` holds (the fsync and seal it may owe are left to the next commit)."""
        if self._staged:
            self._write_events([], settle=self._settings.fsync == "always")

    def _admit(self, event: EventBase) -> None:
        if self._fd is None:
            raise JournalError(f"journal {self._path} is not open; use the writer as a context manager")
        if type(event) not in _EVENT_CLASSES:
            raise JournalError(f"only journal events can be emitted, not {type(event).__name__}")
        if event.session_id not in ("", self._session_id):
            raise JournalError(
                f"event for session {event.session_id!r} cannot go into the journal of {self._session_id!r}"
            )

    def _append(self, event: _E, *, settle: bool) -> _E:
        self._admit(event)
        stamped = self._write_events([event], settle=settle)
        return stamped  # type: ignore[return-value]  # the copy of ``event``: the same class

    def _write_events(self, events: list[EventBase], *, settle: bool) -> EventBase | None:
        """Write the staged events and then ``events``, one line each, in one ``write(2)``; the last one stamped."""
        assert self._fd is not None
        batch, self._staged = [*self._staged, *events], []
        # Several processes may append to one session's journal (CLI calls on a named session, an MCP server):
        # everything from "learn what the others wrote" to "seal the head" happens under one exclusive lock.
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            self._catch_up()
            seq, mac = self._seq, self._mac
            lines: list[bytes] = []
            sync = self._settings.fsync == "always"
            stamped: EventBase | None = None
            refused: JournalError | None = None
            for event in batch:
                # The event was validated when it was built (models are frozen); only the two stamps change, both
                # already of their type, so a copy stands (no dump/validate round trip). What a reader would refuse
                # is still checked on the exact line below.
                stamped = event.model_copy(update={"seq": seq + 1, "session_id": self._session_id})
                try:
                    line = stamped.model_dump_json().encode("utf-8")
                except PydanticSerializationError:
                    # Text holding lone surrogates (a file name's undecodable bytes, as Python reads them) has no
                    # JSON form: those characters are written as escapes, so the record is kept, not lost.
                    stamped = type(stamped).model_validate(escaped(stamped.model_dump()))
                    line = stamped.model_dump_json().encode("utf-8")
                refused = self._refusal(stamped, line)
                if refused is not None:
                    break  # the lines before it are still written; then it is reported
                if self._key is not None:
                    line, signed = self._key.sign(mac, line)
                    if len(line) > self._settings.max_line_bytes:
                        refused = self._too_long(stamped, line)
                        break
                    mac = signed
                lines.append(line)
                seq += 1
                sync = sync or (self._settings.fsync == "action" and isinstance(stamped, _BOUNDARIES))
            if lines:
                lines.append(b"")
                self._write(b"\n".join(lines))
                self._seq, self._mac = seq, mac
                self._appended += len(lines) - 1
            if settle:
                if sync or self._sync_owed:
                    self._sync()
                if self._key is not None:
                    self._write_head(self._seq, self._mac, self._size, sync=sync or self._sync_owed)
                self._sync_owed = False
                self._settled = self._appended
            elif sync:
                self._sync_owed = True
                if self._committer is not None:
                    # Start the disk wait now (the caller's commit finds it done or underway); the seal is left to
                    # that commit, which may not want one (the one before an action runs).
                    self._request(seal=False)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        if refused is not None:
            raise refused
        return stamped

    def _refusal(self, stamped: EventBase, line: bytes) -> JournalError | None:
        """Why ``line`` (``stamped``'s unsigned line) cannot be written, if it cannot."""
        try:
            check_dumped_line(line, max_depth=self._settings.max_depth)
        except JournalCorrupt as exc:
            return JournalError(f"{_type_of(stamped)} event would be refused by a reader: {exc}")
        if len(line) > self._settings.max_line_bytes:
            return self._too_long(stamped, line)
        return None

    def _too_long(self, stamped: EventBase, line: bytes) -> JournalError:
        return JournalError(
            f"{_type_of(stamped)} event is {len(line)} bytes, over journal.max_line_bytes "
            f"({self._settings.max_line_bytes}); shorten its material or raise the limit"
        )

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

    def _write_head(self, seq: int, mac: str, size: int, *, sync: bool) -> None:
        """Seal the head at (seq, mac, size); called under the flock, or by :meth:`commit`'s worker thread.

        The head is written whole into a temporary file of this writer's thread and swapped with the head's name in
        one step (``renameat2(RENAME_EXCHANGE)``): readers see the old head or the new one, never part of one. The
        swapped-out file (the previous head) stays as the next seal's temporary file and is overwritten in place
        (a fixed size, so nothing of it is left), which spares the file system a new file, a rename over the old
        one and the flush ext4 starts on such a rename: a tenth of the cost, paid at every action. After a power
        cut the head is the new seal or an older one (overwriting in place allocates nothing, so there is no empty
        file to find), which the reader accepts. Where the kernel or the file system cannot swap, the file is
        renamed over the head as before. The temporary files go when the writer closes.

        The temporary file is this thread's own, so seals racing from several writers or threads never swap
        another's half-written head; a seal outside the flock can only leave the head behind the journal (a lagging
        head reaches fewer lines; it never claims lines the file does not have).
        """
        assert self._key is not None
        head = head_path(self._path)
        # The temporary name is this process's and this thread's own: a commit's worker thread may seal while the
        # event loop's thread emits, and neither may swap the other's half-written file.
        tmp = head.with_name(f"{head.name}.{os.getpid()}.{threading.get_ident():x}.tmp")
        data = self._key.head_bytes(seq, mac, size).ljust(_HEAD_SLOT_BYTES)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            try:
                self._temporaries.add(tmp)
                if os.pwrite(fd, data, 0) != len(data):
                    raise OSError(errno.EIO, "short write")
                if sync:
                    self._fsync(fd)
            finally:
                os.close(fd)
            if not exchange_paths(tmp, head):
                tmp.replace(head)
                self._temporaries.discard(tmp)
        except OSError as exc:
            raise JournalError(f"cannot seal the journal head {head}: {exc.strerror or exc}") from exc

    @contextmanager
    def _locked(self) -> Iterator[None]:
        assert self._fd is not None
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

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
        if self._staged:
            with contextlib.suppress(JournalError):  # a refused staged line must not keep the file open
                self.flush()
        if self._committer is not None:
            self._committer.stop()  # finishes what it was asked for first
            self._committer = None
        try:
            if self._settings.fsync in ("close", "action"):
                self._sync()
            if self._key is not None and self._settled < self._appended:
                with self._locked():
                    self._write_head(self._seq, self._mac, self._size, sync=self._settings.fsync != "never")
            self._settled = self._appended
        finally:
            self._fd = None
            self._closed = True
            os.close(fd)
            for tmp in self._temporaries:
                with contextlib.suppress(OSError):
                    tmp.unlink()
            self._temporaries.clear()

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


class _Committer:
    """A writer's commit thread: fsyncs and seals what the event loop appended, then wakes the tasks waiting.

    Requests are merged: the thread always takes the latest snapshot (appended count, seq, mac, size) with the
    union of what was asked (an fsync owed, a seal), so concurrent commits share one disk wait. Tasks wait on trio
    events set from the thread through the run's token; nothing here blocks the event loop.
    """

    def __init__(self, writer: JournalWriter, token: trio.lowlevel.TrioToken) -> None:
        self.token = token
        self.synced = 0
        """Appended lines (counted) that are as durable as the mode promises (read on the trio thread)."""
        self.sealed = 0
        """Appended lines (counted) the head reaches."""
        self.error: JournalError | None = None
        self._writer = writer
        self._cond = threading.Condition()
        self._wanted: tuple[tuple[int, int, str, int], bool, bool] | None = None
        self._working = False
        self._stopping = False
        self._waiters: list[tuple[int, bool, trio.Event]] = []
        self._thread = threading.Thread(target=self._run, name=f"journal commit {writer.path}", daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        """Whether a request is pending or on the disk."""
        with self._cond:
            return self._working or self._wanted is not None

    def request(self, snapshot: tuple[int, int, str, int], *, sync: bool, seal: bool) -> None:
        """Ask for ``snapshot`` (appended, seq, mac, size) to be fsynced (if ``sync``) and sealed (if ``seal``)."""
        with self._cond:
            if self._wanted is not None:
                _, was_sync, was_seal = self._wanted
                sync, seal = sync or was_sync, seal or was_seal
            self._wanted = (snapshot, sync, seal)
            self._cond.notify()

    def wait_for(self, target: int, *, seal: bool, event: trio.Event) -> None:
        """Set ``event`` (on the trio thread) once ``target`` lines are synced (and sealed, with ``seal``)."""
        self._waiters.append((target, seal, event))
        self._wake()

    def stop(self) -> None:
        """Finish what was asked, then end the thread (blocks for at most one fsync and one seal)."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join()

    def _run(self) -> None:
        writer = self._writer
        while True:
            with self._cond:
                while self._wanted is None and not self._stopping:
                    self._cond.wait()
                if self._wanted is None:
                    return
                (appended, seq, mac, size), sync, seal = self._wanted
                self._wanted = None
                self._working = True
            try:
                if sync:
                    writer._sync()
                self.synced = max(self.synced, appended)
                if seal:
                    if writer._key is not None:
                        # Not fsynced: the lines it names are on disk already, so a power cut can only leave an
                        # older head (reaching fewer lines), which the reader accepts; a disk wait saved.
                        writer._write_head(seq, mac, size, sync=False)
                    self.sealed = max(self.sealed, appended)
            except JournalError as exc:
                self.error = exc
            finally:
                with self._cond:
                    self._working = False
            with contextlib.suppress(RuntimeError):  # trio.RunFinishedError: nobody is left to wake
                self.token.run_sync_soon(self._wake)

    def _wake(self) -> None:
        """On the trio thread: set the events of the waits that are now satisfied (all of them after an error)."""
        keep: list[tuple[int, bool, trio.Event]] = []
        for target, seal, event in self._waiters:
            if self.error is not None or (self.sealed if seal else self.synced) >= target:
                event.set()
            else:
                keep.append((target, seal, event))
        self._waiters = keep


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's: alive
    return True


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
