"""The artifact store: one SQLite index per home, stream files per session.

Layout::

    $EXECUTOR_HOME/artifacts.sqlite3                       index: sessions, artifacts, streams, tombstones, tasks
    $EXECUTOR_HOME/sessions/<session-id>/artifacts/<artifact-id>/<stream>        the kept bytes
    $EXECUTOR_HOME/sessions/<session-id>/artifacts/<artifact-id>/<stream>.idx    sparse line index
    $EXECUTOR_HOME/owners/<token>                          held (flock) by each process while it has captures
    $EXECUTOR_HOME/artifacts.setup.lock                    held (flock) while a process sets its connection up

Files are made on a stream's first byte (see :mod:`executor.artifacts.capture`): an artifact whose streams stayed
empty has no folder, and every reader takes a stream of 0 stored bytes from its index row alone.

Ids are made here: a session id is ``s-`` plus 12 lowercase hex digits, an artifact id is
``<session-id>.a<N>``. Every read checks the id's shape and that it belongs to the calling session *before*
any path is derived from it; a malformed, foreign or unknown id raises the same :class:`ArtifactNotFound`
message, so the error is no oracle for ids of other sessions. Retention (byte and count budgets) only ever
counts and evicts the calling session's own artifacts.

Everything here is synchronous file and SQLite IO on the caller's thread, except the regex work of
:meth:`SessionArtifacts.search_output`, which runs in a worker thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import re
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

import trio
from pydantic import ValidationError

from executor.artifacts import search as _search
from executor.artifacts.capture import (
    OWNER_FILE,
    OWNER_TOKEN_RE,
    Capture,
    StreamState,
    claim_owner,
    layout_of,
    owner_gone,
    read_checkpoints,
    recover_stream,
    release_owner,
    stream_info,
    tees_for,
)
from executor.artifacts.models import ArtifactRecord, ReadPage, SearchPage, TaskRecord
from executor.artifacts.paging import CHECKPOINT_INTERVAL, Layout, read_page
from executor.config import ArtifactSettings
from executor.errors import (
    ArtifactError,
    ArtifactEvicted,
    ArtifactNotFound,
    OutputRangeError,
    SessionNotFound,
    StreamNotFound,
)
from executor.ids import artifact_id as make_artifact_id
from executor.ids import parse_artifact_id, validate_session_id

__all__ = ["ArtifactStore", "SessionArtifacts"]

_STREAM_RE = re.compile(r"[a-z][a-z0-9_-]{0,31}")
_KIND_RE = re.compile(r"[a-z][a-z0-9_-]{0,31}")
_MAX_READ_LINES = 100_000
_MAX_SEARCH_LIMIT = 10_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    next_seq INTEGER NOT NULL DEFAULT 1,
    artifact_count INTEGER NOT NULL DEFAULT 0,
    bytes_total INTEGER NOT NULL DEFAULT 0,
    owner TEXT
);
CREATE TABLE IF NOT EXISTS artifacts (
    id TEXT PRIMARY KEY,
    session TEXT NOT NULL REFERENCES sessions(id),
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    meta TEXT NOT NULL,
    created_at REAL NOT NULL,
    bytes_stored INTEGER NOT NULL DEFAULT 0,
    owner TEXT
);
CREATE INDEX IF NOT EXISTS artifacts_by_session ON artifacts(session, seq);
CREATE TABLE IF NOT EXISTS streams (
    artifact TEXT NOT NULL REFERENCES artifacts(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    name TEXT NOT NULL,
    state TEXT NOT NULL,
    PRIMARY KEY (artifact, name)
);
CREATE TABLE IF NOT EXISTS tombstones (
    id TEXT PRIMARY KEY,
    session TEXT NOT NULL,
    evicted_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS tombstones_by_time ON tombstones(evicted_at);
CREATE TABLE IF NOT EXISTS tasks (
    session TEXT NOT NULL REFERENCES sessions(id),
    task_id TEXT NOT NULL,
    command TEXT NOT NULL,
    owner TEXT,
    artifact_id TEXT,
    action_id TEXT,
    finished INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (session, task_id)
);
"""

_TOTALS = """
CREATE TRIGGER IF NOT EXISTS artifacts_totals_insert AFTER INSERT ON artifacts BEGIN
    UPDATE sessions SET artifact_count = artifact_count + 1, bytes_total = bytes_total + NEW.bytes_stored
    WHERE id = NEW.session;
END;
CREATE TRIGGER IF NOT EXISTS artifacts_totals_delete AFTER DELETE ON artifacts BEGIN
    UPDATE sessions SET artifact_count = artifact_count - 1, bytes_total = bytes_total - OLD.bytes_stored
    WHERE id = OLD.session;
END;
CREATE TRIGGER IF NOT EXISTS artifacts_totals_update AFTER UPDATE OF bytes_stored ON artifacts
WHEN NEW.bytes_stored != OLD.bytes_stored BEGIN
    UPDATE sessions SET bytes_total = bytes_total + NEW.bytes_stored - OLD.bytes_stored WHERE id = NEW.session;
END;
"""
"""A session's artifact count and stored bytes, kept by the index itself (for every writer, in the same
transaction as the change), so checking the retention budgets is one row read instead of a scan."""
_TRIGGERS = ("artifacts_totals_insert", "artifacts_totals_delete", "artifacts_totals_update")


def _migrate(conn: sqlite3.Connection) -> None:
    """Bring an index made by an earlier version up to the current schema (in one transaction, once)."""
    if _schema_current(conn):
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        columns = {row[1] for row in conn.execute("PRAGMA table_info(sessions)")}
        for column in ("artifact_count", "bytes_total"):
            if column not in columns:
                conn.execute(f"ALTER TABLE sessions ADD COLUMN {column} INTEGER NOT NULL DEFAULT 0")
        if "owner" not in columns:
            conn.execute("ALTER TABLE sessions ADD COLUMN owner TEXT")
        if "owner" not in {row[1] for row in conn.execute("PRAGMA table_info(artifacts)")}:
            conn.execute("ALTER TABLE artifacts ADD COLUMN owner TEXT")
        present = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
        if not present.issuperset(_TRIGGERS):
            # Counted under the same write lock that installs the triggers: no change can fall between the two.
            conn.execute(
                "UPDATE sessions SET artifact_count = (SELECT count(*) FROM artifacts WHERE session = sessions.id), "
                "bytes_total = (SELECT coalesce(sum(bytes_stored), 0) FROM artifacts WHERE session = sessions.id)"
            )
            for statement in _TOTALS.split("END;")[:-1]:
                conn.execute(statement + "END;")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _schema_current(conn: sqlite3.Connection) -> bool:
    present = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    columns = {row[1] for row in conn.execute("PRAGMA table_info(sessions)")}
    return present.issuperset(_TRIGGERS) and "owner" in columns


_SETUP_LOCK = "artifacts.setup.lock"
"""Held (``flock``) while a process sets its connection up: the first opens of a new index by several processes
at once would otherwise race to switch it to WAL and make its tables, and SQLite answers the loser of that race
"database is locked" at once, without waiting (two readers both upgrading to writers)."""
_SETUP_POLL_S = 0.005
"""How often an open waiting for another process's set-up tries the lock again."""


@contextmanager
def _setup_lock(home: Path, timeout_s: float) -> Iterator[None]:
    """Hold ``home``'s index set-up lock for the block, waiting at most ``timeout_s`` for it.

    Raises:
        ArtifactError: another process held it for ``timeout_s`` (stopped or stuck while opening the index).
    """
    path = home / _SETUP_LOCK
    try:
        fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise ArtifactError(f"{path}: cannot open the index's set-up lock ({exc.strerror or exc})") from exc
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise ArtifactError(
                        f"{path}: another process has been opening the artifact index for {timeout_s:g} s; "
                        "find it (fuser) and end it, or raise artifacts.busy_timeout_s"
                    ) from None
                time.sleep(_SETUP_POLL_S)
        yield
    finally:
        os.close(fd)


def _set_up(conn: sqlite3.Connection, path: Path, settings: ArtifactSettings) -> None:
    """Put a new connection in the configured modes and the index at the current schema."""
    conn.execute(f"PRAGMA busy_timeout = {round(settings.busy_timeout_s * 1000)}")
    mode = conn.execute(f"PRAGMA journal_mode = {settings.journal_mode.upper()}").fetchone()[0]
    if str(mode).lower() != settings.journal_mode:
        raise ArtifactError(
            f"{path}: SQLite refused journal mode {settings.journal_mode!r} (got {mode!r}); "
            "set artifacts.journal_mode to 'delete' or 'truncate' on this filesystem"
        )
    conn.execute(f"PRAGMA synchronous = {settings.sqlite_synchronous.upper()}")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.executescript(_SCHEMA)
    _migrate(conn)


_FINISHED_MEMO_ENTRIES = 16
"""Finished artifacts whose index rows a session's view remembers."""
_FOLDER_MEMO_ENTRIES = 1024
"""Artifact folder paths a store remembers (cleared when full)."""
_PURGE_INTERVAL_S = 1.0
"""Expired tombstones are deleted at most this often (seconds)."""

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _index_errors(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """Map a failure of the SQLite index itself (damaged, unreadable, full disk) to :class:`ArtifactError`."""

    @functools.wraps(method)
    def mapped(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(*args, **kwargs)
        except sqlite3.Error as exc:
            owner = args[0]
            store = owner if isinstance(owner, ArtifactStore) else getattr(owner, "_store", None)
            where = store.home / "artifacts.sqlite3" if isinstance(store, ArtifactStore) else "the artifact index"
            if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
                # The index is whole; moving it aside would orphan every artifact.
                raise ArtifactError(
                    f"{where}: no space left for the artifact index ({exc}); free space under the executor's home "
                    "and retry"
                ) from exc
            raise ArtifactError(
                f"{where}: the artifact index failed ({exc}); check free space, or move a damaged index aside "
                "(a fresh one is created; stored output files stay on disk) and retry"
            ) from exc

    return mapped


@functools.lru_cache(maxsize=1024)
def _parse_state(raw: str) -> StreamState:
    """A stream's index row, parsed once per distinct row (the model is frozen, so sharing it is safe)."""
    return StreamState.model_validate_json(raw)


@functools.lru_cache(maxsize=64)
def _initial_state(name: str) -> str:
    """The index row of a stream as a capture begins it (nothing stored, no file yet)."""
    return StreamState(file=f"{name}.part").model_dump_json()


@functools.lru_cache(maxsize=16)
def _update_streams(count: int) -> str:
    """One statement setting the state of ``count`` streams of an artifact: parameters are (name, state) pairs, then
    the artifact id, then the names again."""
    cases = " ".join(["WHEN ? THEN ?"] * count)
    names = ",".join(["?"] * count)
    return f"UPDATE streams SET state = CASE name {cases} END WHERE artifact = ? AND name IN ({names})"


@functools.lru_cache(maxsize=16)
def _insert_streams(count: int) -> str:
    """One statement inserting ``count`` stream rows."""
    return "INSERT INTO streams (artifact, position, name, state) VALUES " + ",".join(["(?,?,?,?)"] * count)


class _Known:
    """A remembered finished artifact: its index row, stream states and (once built) record."""

    __slots__ = ("files", "record", "row", "states")

    def __init__(self, row: Any, states: dict[str, StreamState]) -> None:
        self.row = row
        self.states = states
        self.files = any(state.head_len + state.ring_len for state in states.values())
        self.record: ArtifactRecord | None = None


def _damaged(artifact_id: str, stream: str, what: str) -> ArtifactError:
    return ArtifactError(
        f"artifact {artifact_id} stream {stream}: {what}; the store was changed outside the executor, so this "
        "output cannot be read (other artifacts are unaffected)"
    )


def _not_found(artifact_id: object) -> ArtifactNotFound:
    shown = repr(artifact_id)[:80] if isinstance(artifact_id, str) else "(not a string)"
    return ArtifactNotFound(
        f"no artifact {shown} in this session; use an id from a recovery notice of this session, "
        "like 's-0123456789ab.a3'"
    )


def _task_record(row: tuple[Any, ...]) -> TaskRecord:
    task_id, command, owner, artifact_id, action_id, finished = row
    return TaskRecord(
        task_id=task_id,
        command=command,
        owner=owner,
        artifact_id=artifact_id,
        action_id=action_id,
        finished=bool(finished),
    )


class _FileSource:
    """The virtual stored space of a stream file, mapping a wrapped, still-running ring to its logical order."""

    def __init__(self, fd: int, state: StreamState, *, label: tuple[str, str] = ("", "")) -> None:
        self._fd = fd
        self._h = state.head_len
        self._ring = state.ring_cap if state.wrapped and not state.rotated else 0
        self._w = state.ring_w
        self._stored = state.head_len + state.ring_len
        self._label = label

    def read(self, offset: int, size: int) -> bytes:
        data = self._read(offset, size)
        if len(data) < min(size, self._stored - offset):
            # A file shorter than its index: a bounded page must not turn that into a loop or a wrong answer.
            raise _damaged(*self._label, f"its file holds fewer bytes than the index records ({self._stored})")
        return data

    def _read(self, offset: int, size: int) -> bytes:
        if not self._ring or offset + size <= self._h:
            return os.pread(self._fd, size, offset)
        parts: list[bytes] = []
        if offset < self._h:
            parts.append(os.pread(self._fd, self._h - offset, offset))
            size -= self._h - offset
            offset = self._h
        logical = offset - self._h
        while size > 0 and logical < self._ring:
            physical = (self._w + logical) % self._ring
            take = min(size, self._ring - physical, self._ring - logical)
            parts.append(os.pread(self._fd, take, self._h + physical))
            size -= take
            logical += take
        return b"".join(parts)


class ArtifactStore:
    """One home's artifact index and stream files.

    Open with :meth:`open`; close with :meth:`close` (or ``with``/``async with``). One store object is meant for
    one thread (the trio thread); several processes may open the same home.
    """

    def __init__(
        self, home: Path, settings: ArtifactSettings, conn: sqlite3.Connection, clock: Callable[[], float]
    ) -> None:
        self.home = home
        """The state folder."""
        self.settings = settings
        """The artifact section of the settings."""
        self._conn = conn
        self._clock = clock
        self._live: dict[str, Capture] = {}
        self._purged_at: float | None = None
        self._folders: dict[tuple[str, str], str] = {}
        self._sessions = os.path.join(home, "sessions")
        self._owners = os.path.join(home, "owners")
        self._owner: tuple[str, int] | None = None

    @classmethod
    def open(
        cls,
        home: Path,
        settings: ArtifactSettings,
        *,
        clock: Callable[[], float] = time.time,
        on_interrupted: Callable[[str, str, int, str], None] | None = None,
    ) -> ArtifactStore:
        """Open (creating if needed) the index under ``home`` in the configured journal mode.

        Artifacts left ``running`` by a process that has ended (killed mid-capture) are finalised here as
        ``interrupted``, their bytes readable; ``on_interrupted(session_id, artifact_id, bytes_kept, reason)`` is
        called for each (the pipeline journals it in that session's journal). An artifact a live process is still
        writing is never touched.

        Raises:
            ArtifactError: the index cannot be opened or refuses the journal mode.
        """
        home = Path(home)
        home.mkdir(parents=True, exist_ok=True, mode=0o700)
        (home / "sessions").mkdir(exist_ok=True, mode=0o700)
        path = home / "artifacts.sqlite3"
        try:
            conn = sqlite3.connect(path, isolation_level=None, timeout=settings.busy_timeout_s)
        except sqlite3.Error as exc:
            raise ArtifactError(f"{path}: cannot open the artifact index: {exc}") from exc
        try:
            with _setup_lock(home, settings.busy_timeout_s):
                _set_up(conn, path, settings)
        except sqlite3.Error as exc:
            conn.close()
            raise ArtifactError(f"{path}: cannot open the artifact index: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        store = cls(home, settings, conn, clock)
        try:
            store._purge_tombstones()
            store._recover_interrupted(on_interrupted)
        except BaseException:
            conn.close()
            raise
        return store

    def _owner_token(self) -> str:
        """This store's owner token, its owner file made and locked on the first capture."""
        if self._owner is None:
            try:
                os.makedirs(self._owners, mode=0o700, exist_ok=True)
                self._owner = claim_owner(self._owners, self.settings.capture_max_bytes)
            except OSError as exc:
                raise ArtifactError(
                    f"{self._owners}: cannot make this process's owner file ({exc.strerror or exc}); free space "
                    "under the executor's home (or fix its permissions) and retry"
                ) from exc
        return self._owner[0]

    @_index_errors
    def _recover_interrupted(self, on_interrupted: Callable[[str, str, int, str], None] | None) -> None:
        rows = self._conn.execute("SELECT id, session, owner FROM artifacts WHERE status = 'running'").fetchall()
        tokens: set[str] = set()
        for artifact_id, session_id, token in rows:
            if token is not None:
                tokens.add(token)
                continue
            # Begun before owner tokens: the owner file is in the artifact's folder.
            if artifact_id in self._live or parse_artifact_id(artifact_id) is None:
                continue
            folder = self._folder(session_id, artifact_id)
            path = os.path.join(folder, OWNER_FILE)
            try:
                gone = owner_gone(path)
            except OSError:
                continue
            if gone is None:
                continue  # a live process still captures into it
            fd, owner = gone
            try:
                self._recover_one(artifact_id, session_id, owner, on_interrupted)
            finally:
                release_owner(path, fd)
        with contextlib.suppress(FileNotFoundError):  # owners of processes that ended between captures too
            tokens.update(name for name in os.listdir(self._owners) if not name.startswith("."))
        mine = None if self._owner is None else self._owner[0]
        for token in sorted(tokens):
            if token != mine and OWNER_TOKEN_RE.fullmatch(token) is not None:
                self._recover_owner(token, on_interrupted)

    def _recover_owner(self, token: str, on_interrupted: Callable[[str, str, int, str], None] | None) -> None:
        """Finalise every capture of the owner ``token`` if its process is gone, then remove its owner file."""
        path = os.path.join(self._owners, token)
        try:
            gone = owner_gone(path)
        except OSError:
            return
        if gone is None:
            return  # a live process: its captures are its own
        fd, owner = gone
        try:
            # Asked again under its lock: it may have begun captures after the scan, before it ended.
            rows = self._conn.execute(
                "SELECT id, session FROM artifacts WHERE owner = ? AND status = 'running'", (token,)
            ).fetchall()
            for artifact_id, session_id in rows:
                if parse_artifact_id(artifact_id) is not None:
                    self._recover_one(artifact_id, session_id, owner, on_interrupted)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            raise
        release_owner(path, fd)  # only once all of its captures are finalised

    def _recover_one(
        self,
        artifact_id: str,
        session_id: str,
        owner: dict[str, int],
        on_interrupted: Callable[[str, str, int, str], None] | None,
    ) -> None:
        try:
            self._finalise_interrupted(
                artifact_id, session_id, self._folder(session_id, artifact_id), owner, on_interrupted
            )
        except OSError as exc:
            raise ArtifactError(
                f"artifact {artifact_id}: cannot recover its interrupted capture: {exc.strerror or exc}"
            ) from exc

    def _finalise_interrupted(
        self,
        artifact_id: str,
        session_id: str,
        folder: str,
        owner: dict[str, int],
        on_interrupted: Callable[[str, str, int, str], None] | None,
    ) -> None:
        # Re-read under the owner lock: the owner may have finished it between the scan and the lock.
        row = self._conn.execute("SELECT status FROM artifacts WHERE id = ?", (artifact_id,)).fetchone()
        if row is None or row[0] != "running":
            return
        cap = owner.get("cap", self.settings.capture_max_bytes)
        rows = self._conn.execute("SELECT name, state FROM streams WHERE artifact = ?", (artifact_id,)).fetchall()
        states = {
            name: recover_stream(folder, name, StreamState.model_validate_json(state), cap) for name, state in rows
        }
        kept = sum(s.head_len + s.ring_len for s in states.values())
        pid = owner.get("pid")
        who = f"process {pid}" if pid else "the process"
        reason = (
            f"{who} capturing artifact {artifact_id} ended before finishing it (killed?); the {kept} byte(s) it "
            "wrote were kept and the artifact finished as interrupted"
        )
        with self._tx() as conn:
            current = conn.execute("SELECT status, meta FROM artifacts WHERE id = ?", (artifact_id,)).fetchone()
            if current is None or current[0] != "running":
                return
            meta = json.loads(current[1])
            meta["interrupted"] = reason
            for name, state in states.items():
                conn.execute(
                    "UPDATE streams SET state = ? WHERE artifact = ? AND name = ?",
                    (state.model_dump_json(), artifact_id, name),
                )
            conn.execute(
                "UPDATE artifacts SET status = 'interrupted', bytes_stored = ?, meta = ? WHERE id = ?",
                (kept, json.dumps(meta), artifact_id),
            )
        if on_interrupted is not None:
            on_interrupted(session_id, artifact_id, kept, reason)

    @property
    def synchronous(self) -> str:
        """The SQLite synchronous level in force (``normal`` or ``full``)."""
        level = int(self._conn.execute("PRAGMA synchronous").fetchone()[0])
        return {1: "normal", 2: "full"}.get(level, str(level))

    @property
    def journal_mode(self) -> str:
        """The journal mode SQLite reports for the index."""
        return str(self._conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()

    def close(self) -> None:
        """Close the index; live captures should be finished first (their files stay as they are, and their owner
        file stays locked until this process ends, so no other process takes them for interrupted before)."""
        self._conn.close()
        if self._owner is not None and not self._live:
            release_owner(os.path.join(self._owners, self._owner[0]), self._owner[1])
            self._owner = None

    def __enter__(self) -> ArtifactStore:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    async def __aenter__(self) -> ArtifactStore:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @_index_errors
    def session(self, session_id: str, *, owner: str | None = None) -> SessionArtifacts:
        """The artifacts of one session (registered on first use).

        ``owner`` is the session's owner (a service token's owner id; None: the home's owner), kept in the index so
        that who may read its artifacts is still known once its container is gone (:meth:`session_owner`). The
        first owner given is kept: a session's owner never changes.

        Raises:
            SessionNotFound: ``session_id`` does not have the session id shape.
        """
        validate_session_id(session_id)
        self._conn.execute(
            "INSERT INTO sessions (id, created_at, owner) VALUES (?, ?, ?) ON CONFLICT (id) DO UPDATE "
            "SET owner = excluded.owner WHERE sessions.owner IS NULL AND excluded.owner IS NOT NULL",
            (session_id, self._clock(), owner),
        )
        return SessionArtifacts(self, session_id)

    @_index_errors
    def session_owner(self, session_id: str) -> str | None:
        """The owner recorded for ``session_id`` when it was registered (None: the home's owner, or a session
        registered before owners were kept).

        Raises:
            SessionNotFound: the index holds no such session (or ``session_id`` is not a session id).
        """
        validate_session_id(session_id)
        row = self._conn.execute("SELECT owner FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            raise SessionNotFound(f"no session {session_id!r} has artifacts in this home")
        owner = row[0]
        return owner if isinstance(owner, str) else None

    # -- internals shared with SessionArtifacts ------------------------------------------------------------

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
        except BaseException:
            if self._conn.in_transaction:  # some errors (SQLITE_FULL, an I/O error) have rolled it back already
                self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    @_index_errors
    def _purge_tombstones(self) -> None:
        # At most once a second: a tombstone past its horizon is already ignored by the reader (it compares
        # times), so purging is housekeeping and need not cost a statement per capture.
        now = self._clock()
        if self._purged_at is not None and 0 <= now - self._purged_at < _PURGE_INTERVAL_S:
            return
        self._purged_at = now
        horizon = self.settings.tombstone_horizon_s
        self._conn.execute("DELETE FROM tombstones WHERE evicted_at <= ?", (now - horizon,))

    def _folder(self, session_id: str, artifact_id: str) -> str:
        # Both ids were validated against their regexes before this is called. Remembered: a call reaches the same
        # few folders a dozen times, and joining paths is a measurable part of it.
        key = (session_id, artifact_id)
        folder = self._folders.get(key)
        if folder is None:
            if len(self._folders) >= _FOLDER_MEMO_ENTRIES:
                self._folders.clear()
            folder = self._folders[key] = os.path.join(self._sessions, session_id, "artifacts", artifact_id)
        return folder


class SessionArtifacts:
    """One session's view of the store: it can read, search and evict only its own artifacts."""

    def __init__(self, store: ArtifactStore, session_id: str) -> None:
        self._store = store
        self.session_id = session_id
        """The owning session."""
        self._finished: dict[str, _Known] = {}
        """Index rows of recently finished artifacts: final until evicted, so read once (see :meth:`_indexed`)."""
        self._begun: dict[str, tuple[str, str, float]] = {}
        """Kind, meta and creation time of this view's live captures (their rows, but for status and streams)."""

    @property
    def settings(self) -> ArtifactSettings:
        """The store's artifact settings."""
        return self._store.settings

    # -- background-task records ---------------------------------------------------------------------------
    # Each change is one SQL statement, so the CLI and a server writing the same session's tasks never lose
    # each other's records (the index is shared by every process of the home; SQLite serializes the writes).

    def put_task(self, record: TaskRecord) -> None:
        """Record a background task (replacing an earlier record of the same id)."""
        self._store._conn.execute(
            "INSERT OR REPLACE INTO tasks (session, task_id, command, owner, artifact_id, action_id, finished) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                self.session_id,
                record.task_id,
                record.command,
                record.owner,
                record.artifact_id,
                record.action_id,
                int(record.finished),
            ),
        )

    def finish_task(self, task_id: str, *, artifact_id: str) -> None:
        """Mark a task's mirror complete in ``artifact_id`` (nothing happens for an unknown task)."""
        self._store._conn.execute(
            "UPDATE tasks SET finished = 1, artifact_id = ? WHERE session = ? AND task_id = ?",
            (artifact_id, self.session_id, task_id),
        )

    def tasks(self) -> dict[str, TaskRecord]:
        """This session's task records by id, oldest first."""
        rows = self._store._conn.execute(
            "SELECT task_id, command, owner, artifact_id, action_id, finished FROM tasks WHERE session = ? "
            "ORDER BY rowid",
            (self.session_id,),
        ).fetchall()
        return {row[0]: _task_record(row) for row in rows}

    def task(self, task_id: str) -> TaskRecord | None:
        """One task record of this session, or None (also for an id that is not text SQLite can hold)."""
        try:
            task_id.encode("utf-8")
        except UnicodeEncodeError:
            return None
        row = self._store._conn.execute(
            "SELECT task_id, command, owner, artifact_id, action_id, finished FROM tasks "
            "WHERE session = ? AND task_id = ?",
            (self.session_id, task_id),
        ).fetchone()
        return None if row is None else _task_record(row)

    @_index_errors
    def detached_task(self, artifact_id: str) -> str | None:
        """The task id when ``artifact_id`` is a task's artifact whose mirror was cut short (``detached``: the
        process that started the task ended first), else None (also for an unknown or malformed id)."""
        if parse_artifact_id(artifact_id) is None:
            return None
        row = self._store._conn.execute(
            "SELECT kind, status, meta FROM artifacts WHERE session = ? AND id = ?", (self.session_id, artifact_id)
        ).fetchone()
        if row is None or row[0] != "task" or row[1] != "detached":
            return None
        task_id = json.loads(row[2]).get("task_id")
        return task_id if isinstance(task_id, str) else None

    @_index_errors
    def current(self, artifact_id: str) -> str:
        """The artifact to read for ``artifact_id``: itself, except a detached task artifact (see
        :meth:`detached_task`) of a task that has since ended and been given its complete artifact, which is then
        the one returned. So the id ``bg start`` printed leads to the task's whole output."""
        task_id = self.detached_task(artifact_id)
        task = None if task_id is None else self.task(task_id)
        if task is None or not task.finished or task.artifact_id is None:
            return artifact_id
        return task.artifact_id

    # -- writing -------------------------------------------------------------------------------------------

    @_index_errors
    def begin(self, *, kind: str, streams: tuple[str, ...], meta: dict[str, str] | None = None) -> Capture:
        """Start a capture: the artifact exists (``running``, ``growing``) from now on.

        Args:
            kind: what produces it (``bash``, ``write``, ``task``...): lowercase letters, digits, ``-``/``_``.
            streams: the stream names, in presentation order (``("stdout", "stderr")`` or ``("output",)``).
            meta: free-form string metadata kept with the record.

        Raises:
            ArtifactError: a bad kind or stream name, or duplicate stream names.
        """
        if _KIND_RE.fullmatch(kind) is None:
            raise ArtifactError(f"artifact kind {kind!r} must be lowercase letters, digits, '-' or '_'")
        if not streams or len(set(streams)) != len(streams):
            raise ArtifactError("a capture needs one or more distinct stream names")
        for name in streams:
            if _STREAM_RE.fullmatch(name) is None:
                raise ArtifactError(f"stream name {name!r} must be lowercase letters, digits, '-' or '_'")
        store = self._store
        # The owner lock is held before the row is committed, so no other process ever sees this artifact
        # ``running`` without a live lock on it (and mistakes it for an interrupted one).
        token = store._owner_token()
        store._purge_tombstones()
        now = store._clock()
        meta_json = json.dumps(meta or {})
        values: list[object] = []
        with store._tx() as conn:
            # The session's totals come with its next seq (before this artifact's row counts): the budgets are
            # checked without a statement of their own.
            [(seq, kept, stored_total)] = conn.execute(
                "UPDATE sessions SET next_seq = next_seq + 1 WHERE id = ? "
                "RETURNING next_seq - 1, artifact_count, bytes_total",
                (self.session_id,),
            ).fetchall()
            artifact_id = make_artifact_id(self.session_id, seq)
            conn.execute(
                "INSERT INTO artifacts (id, session, seq, kind, status, meta, created_at, owner) "
                "VALUES (?,?,?,?,?,?,?,?)",
                (artifact_id, self.session_id, seq, kind, "running", meta_json, now, token),
            )
            for position, name in enumerate(streams):
                values += (artifact_id, position, name, _initial_state(name))
            conn.execute(_insert_streams(len(streams)), values)
        settings = store.settings
        if int(kept) + 1 > settings.session_max_artifacts or int(stored_total) > settings.session_max_bytes:
            self._evict(keep=frozenset({artifact_id}))  # the oldest go to make room; never this one
        # No folder yet: the capture makes it with the first byte it stores.
        capture = Capture(
            artifact_id=artifact_id,
            folder=store._folder(self.session_id, artifact_id),
            streams=streams,
            cap=store.settings.capture_max_bytes,
            publish=self._publish,
            tees=tees_for(kind, artifact_id),
            sync=store.settings.sqlite_synchronous == "full",
        )
        store._live[artifact_id] = capture
        self._begun[artifact_id] = (kind, meta_json, now)
        return capture

    @_index_errors
    def _publish(
        self, artifact_id: str, states: dict[str, StreamState], status: str | None, noted: dict[str, str]
    ) -> ArtifactRecord | None:
        store = self._store
        stored = sum(s.head_len + s.ring_len for s in states.values())
        values: list[object] = []
        for name, state in states.items():
            values += (name, state.model_dump_json())
        with store._tx() as conn:
            conn.execute(_update_streams(len(states)), [*values, artifact_id, *states])
            if status is None:
                conn.execute("UPDATE artifacts SET bytes_stored = ? WHERE id = ?", (stored, artifact_id))
            elif noted:
                updated = conn.execute(
                    "UPDATE artifacts SET bytes_stored = ?, status = ?, meta = json_patch(meta, ?) WHERE id = ?",
                    (stored, status, json.dumps(noted), artifact_id),
                ).rowcount
            else:
                updated = conn.execute(
                    "UPDATE artifacts SET bytes_stored = ?, status = ? WHERE id = ?", (stored, status, artifact_id)
                ).rowcount
        if status is None:
            return None
        store._live.pop(artifact_id, None)
        begun = self._begun.pop(artifact_id, None)
        if stored:  # its row was counted when it began: only stored bytes can have put the session over a budget
            self._evict(keep=frozenset({artifact_id}))
        if begun is None or updated != 1:
            return self.record(artifact_id)  # evicted meanwhile by another process: the index says how
        # The row as it now is in the index (only this capture changes a live artifact's row), remembered so that
        # the record and the reads that follow need no query.
        kind, meta_json, created_at = begun
        if noted:
            meta_json = json.dumps({**json.loads(meta_json), **noted})
        known = self._remember(artifact_id, (artifact_id, kind, status, meta_json, created_at), states)
        known.record = self._record_of(artifact_id, known.row, states)
        return known.record

    @_index_errors
    def _evict(self, *, keep: frozenset[str]) -> None:
        """Evict this session's oldest artifacts until its budgets hold (never a kept one, nor one still being captured
        by any process)."""
        store = self._store
        settings = store.settings
        store._purge_tombstones()
        totals = store._conn.execute(
            "SELECT artifact_count, bytes_total FROM sessions WHERE id = ?", (self.session_id,)
        ).fetchone()
        kept, stored_total = totals if totals is not None else (0, 0)
        count = int(kept)
        total = int(stored_total)
        if count <= settings.session_max_artifacts and total <= settings.session_max_bytes:
            return  # within budget: the usual case, one row (the index keeps the totals) instead of every row
        rows = store._conn.execute(
            "SELECT id, bytes_stored, status FROM artifacts WHERE session = ? ORDER BY seq", (self.session_id,)
        ).fetchall()
        for artifact_id, stored, status in rows:
            if count <= settings.session_max_artifacts and total <= settings.session_max_bytes:
                break
            if artifact_id in keep or artifact_id in store._live or status == "running":
                # A running capture is another process's (a CLI call, a service next to this one) or one it left
                # when it died, which the next open finalises: its writer still appends to the folder.
                continue
            with store._tx() as conn:
                conn.execute("DELETE FROM streams WHERE artifact = ?", (artifact_id,))
                conn.execute("DELETE FROM artifacts WHERE id = ? AND session = ?", (artifact_id, self.session_id))
                conn.execute(
                    "INSERT OR REPLACE INTO tombstones (id, session, evicted_at) VALUES (?,?,?)",
                    (artifact_id, self.session_id, store._clock()),
                )
            self._finished.pop(artifact_id, None)
            shutil.rmtree(store._folder(self.session_id, artifact_id), ignore_errors=True)
            count -= 1
            total -= int(stored)

    # -- reading -------------------------------------------------------------------------------------------

    def _check_id(self, artifact_id: object) -> str:
        parsed = parse_artifact_id(artifact_id)
        if parsed is None or parsed[0] != self.session_id or not isinstance(artifact_id, str):
            raise _not_found(artifact_id)
        return artifact_id

    @_index_errors
    def _row(self, artifact_id: object) -> tuple[str, Any]:
        checked = self._check_id(artifact_id)
        store = self._store
        row = store._conn.execute(
            "SELECT id, kind, status, meta, created_at FROM artifacts WHERE id = ? AND session = ?",
            (checked, self.session_id),
        ).fetchone()
        if row is not None:
            live = store._live.get(checked)
            if live is not None:
                # Same thread as the writer: publishing first makes the read see every byte fed so far.
                live.flush()
            return checked, row
        tomb = store._conn.execute(
            "SELECT evicted_at FROM tombstones WHERE id = ? AND session = ?", (checked, self.session_id)
        ).fetchone()
        if tomb is not None and store._clock() - float(tomb[0]) < store.settings.tombstone_horizon_s:
            raise ArtifactEvicted(
                f"artifact {checked} was evicted by this session's retention budget (artifacts.session_max_bytes, "
                "artifacts.session_max_artifacts); its output is gone: rerun the command if you need it"
            )
        raise _not_found(artifact_id)

    @_index_errors
    def _states(self, artifact_id: str) -> dict[str, StreamState]:
        rows = self._store._conn.execute(
            "SELECT name, state FROM streams WHERE artifact = ? ORDER BY position", (artifact_id,)
        ).fetchall()
        states: dict[str, StreamState] = {}
        for name, state in rows:
            try:
                states[name] = _parse_state(state)
            except ValidationError:
                raise _damaged(artifact_id, name, "its index row does not parse") from None
        return states

    def _remember(self, artifact_id: str, row: Any, states: dict[str, StreamState]) -> _Known:
        if len(self._finished) >= _FINISHED_MEMO_ENTRIES:
            del self._finished[next(iter(self._finished))]
        known = self._finished[artifact_id] = _Known(row, states)
        return known

    @_index_errors
    def _still_kept(self, artifact_id: str, known: _Known) -> bool:
        """Whether a remembered finished artifact is still kept: an eviction, by any process, removes its folder
        and its row; one with files is checked by its folder, one without (every stream empty) by its row."""
        if known.files:
            return os.path.isdir(self._store._folder(self.session_id, artifact_id))
        row = self._store._conn.execute("SELECT 1 FROM artifacts WHERE id = ?", (artifact_id,)).fetchone()
        return row is not None

    def _known(self, artifact_id: object) -> tuple[str, _Known | None, Any, dict[str, StreamState]]:
        """The checked id, memo entry (None for a running artifact), index row and stream states of an artifact.

        A finished artifact's row and states never change again (only a running one is published to), so the last
        few are remembered, each trusted only while it is still kept (see :meth:`_still_kept`); an eviction by this
        store forgets one, and so does a file found missing.
        """
        checked = self._check_id(artifact_id)
        known = self._finished.get(checked)
        if known is not None:
            if self._still_kept(checked, known):
                return checked, known, known.row, known.states
            del self._finished[checked]  # evicted: the index says how
        checked, row = self._row(checked)
        states = self._states(checked)
        if row[2] == "running":
            return checked, None, row, states
        known = self._remember(checked, row, states)
        return checked, known, row, states

    def _indexed(self, artifact_id: object) -> tuple[str, Any, dict[str, StreamState]]:
        """The checked id, index row and stream states of an artifact (see :meth:`_known`)."""
        checked, _, row, states = self._known(artifact_id)
        return checked, row, dict(states)

    def record(self, artifact_id: str) -> ArtifactRecord:
        """The record of one of this session's artifacts.

        Raises:
            ArtifactNotFound: malformed, foreign or unknown id (one message for all three).
            ArtifactEvicted: evicted by retention, tombstone still within the horizon.
        """
        checked, known, row, states = self._known(artifact_id)
        if known is not None and known.record is not None:
            return known.record  # frozen, and final: the same record every time
        record = self._record_of(checked, row, states)
        if known is not None:
            known.record = record
        return record

    def _record_of(self, artifact_id: str, row: Any, states: dict[str, StreamState]) -> ArtifactRecord:
        return ArtifactRecord(
            id=artifact_id,
            session=self.session_id,
            kind=row[1],
            status=row[2],
            streams={name: stream_info(name, state) for name, state in states.items()},
            meta=json.loads(row[3]),
            created_at=float(row[4]),
        )

    @_index_errors
    def artifacts(self) -> list[ArtifactRecord]:
        """Every kept artifact of this session, oldest first."""
        rows = self._store._conn.execute(
            "SELECT id FROM artifacts WHERE session = ? ORDER BY seq", (self.session_id,)
        ).fetchall()
        return [self.record(r[0]) for r in rows]

    def _resolve(self, artifact_id: str, stream: str | None) -> tuple[str, str, StreamState, str]:
        """Validate, flush a live capture, and return (id, stream, state, folder)."""
        checked, _, _, states = self._known(artifact_id)
        if not states:
            raise _damaged(checked, "(any)", "the index has no stream rows for it")
        if stream is None:
            name = next(iter(states))
        elif stream in states:
            name = stream
        else:
            shown = repr(stream)[:40] if isinstance(stream, str) else "(not a string)"
            raise StreamNotFound(f"artifact {checked} has no stream {shown}; its streams: {', '.join(states)}")
        return checked, name, states[name], self._store._folder(self.session_id, checked)

    @contextmanager
    def _opened(self, artifact_id: str, stream: str | None) -> Iterator[tuple[str, str, Layout, _FileSource]]:
        # A finish or an eviction may replace or remove the file between the row read and the open; re-resolve.
        for attempt in range(3):
            checked, name, state, folder = self._resolve(artifact_id, stream)
            if state.head_len + state.ring_len == 0:
                yield checked, name, layout_of(state, ()), _FileSource(-1, state)
                return
            try:
                fd = os.open(os.path.join(folder, state.file), os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                self._finished.pop(checked, None)  # evicted meanwhile (perhaps by another process): read the index
                if attempt == 2:
                    raise _damaged(checked, name, f"its file {state.file} is missing") from None
                continue
            try:
                # A checkpoint sits at a stored offset of at least one interval: a shorter stream has none to read.
                stored = state.head_len + state.ring_len
                big = stored > CHECKPOINT_INTERVAL
                checkpoints = read_checkpoints(os.path.join(folder, f"{name}.idx")) if big else ()
                yield checked, name, layout_of(state, checkpoints), _FileSource(fd, state, label=(checked, name))
            finally:
                os.close(fd)
            return

    def read_bytes(
        self, artifact_id: str, *, stream: str | None = None, offset: int = 0, max_bytes: int = 1 << 20
    ) -> tuple[bytes, int, int]:
        """Raw stored bytes of a stream, from stored ``offset``: ``(data, stored_len, dropped_bytes)``.

        The stored space is the head and, when the capture cap was reached, the tail (``dropped_bytes`` were cut
        from the middle at ``head_len``). No rendering, sanitizing or journaling: this is for programs.

        Raises:
            ArtifactNotFound, ArtifactEvicted, StreamNotFound: see :meth:`record`.
            OutputRangeError: a negative ``offset`` or a ``max_bytes`` below 1.
        """
        if offset < 0:
            raise OutputRangeError.bounds("offset", offset, 0)
        if max_bytes < 1:
            raise OutputRangeError.bounds("max_bytes", max_bytes, 1)
        with self._opened(artifact_id, stream) as (checked, name, _layout, source):
            _, _, state, _ = self._resolve(checked, name)
            stored = state.head_len + state.ring_len
            if offset >= stored:
                return b"", stored, state.dropped_bytes
            return source.read(offset, min(max_bytes, stored - offset)), stored, state.dropped_bytes

    def read_output(
        self,
        artifact_id: str,
        *,
        stream: str | None = None,
        start_line: int = 1,
        line_count: int | None = None,
        start_byte_in_line: int | None = None,
        budget_chars: int | None = None,
    ) -> ReadPage:
        """One page of a stream, from true line ``start_line`` (and byte ``start_byte_in_line`` within it).

        Args:
            artifact_id: an id from this session.
            stream: a stream name; None means the artifact's first stream.
            start_line: true line number (1-based) to start at.
            line_count: most lines on the page; None means ``artifacts.read_page_lines``.
            start_byte_in_line: continue inside a line (from a previous page's ``next_start_byte_in_line``).
            budget_chars: display budget of the page; None means ``artifacts.display_max_chars``.

        Raises:
            ArtifactNotFound, ArtifactEvicted, StreamNotFound: see :meth:`record`.
            OutputRangeError: ``start_line``/``line_count`` below 1 or above the limit, or
                ``start_byte_in_line`` past the end of its line.
        """
        settings = self._store.settings
        count = settings.read_page_lines if line_count is None else line_count
        if not 1 <= count <= _MAX_READ_LINES:
            raise OutputRangeError.bounds("line_count", count, 1, _MAX_READ_LINES)
        budget = settings.display_max_chars if budget_chars is None else budget_chars
        with self._opened(artifact_id, stream) as (checked, name, layout, source):
            return read_page(
                source,
                layout,
                artifact_id=checked,
                stream=name,
                start_line=start_line,
                start_byte_in_line=start_byte_in_line,
                line_count=count,
                budget_chars=max(16, budget),
            )

    async def search_output(
        self,
        artifact_id: str,
        *,
        stream: str | None = None,
        pattern: str,
        limit: int,
        start_line: int = 1,
        redactor: Callable[[str, int], Callable[[str], str]] | None = None,
    ) -> SearchPage:
        """Search a stream line by line with a ``regex`` pattern, in a worker thread, under a time bound.

        ``redactor(stream, start_line)`` makes the function that turns the scanned text into what a reader may
        see before the pattern runs on it (see :func:`executor.artifacts.search.run_search`).

        Resume with the returned ``next_start_line`` (the page's receipt): no match is skipped or repeated.
        A still-running capture is flushed first; if it has already wrapped its tail ring and keeps writing while
        the worker thread scans, the tail part of the scan may see newer bytes than the published layout (the page
        says ``growing``; search again after the task ends for an exact result).

        Raises:
            ArtifactNotFound, ArtifactEvicted, StreamNotFound: see :meth:`record`.
            PatternError: the pattern does not compile, is longer than ``artifacts.pattern_max_chars`` or unrolls past
                ``artifacts.pattern_max_expansion``.
            PatternTimeout: the pattern ran past ``artifacts.search_timeout_s``.
            OutputRangeError: ``limit`` or ``start_line`` out of range.
        """
        settings = self._store.settings
        if not 1 <= limit <= _MAX_SEARCH_LIMIT:
            raise OutputRangeError.bounds("limit", limit, 1, _MAX_SEARCH_LIMIT)
        if start_line < 1:
            raise OutputRangeError.bounds("start_line", start_line, 1)
        # Compiled off the event loop too: the expansion bound keeps it short, and should a pattern still compile
        # slowly, it holds a worker thread, not every session of the process.
        compiled = await trio.to_thread.run_sync(
            functools.partial(
                _search.compile_pattern,
                pattern,
                max_chars=settings.pattern_max_chars,
                max_expansion=settings.pattern_max_expansion,
            )
        )
        with self._opened(artifact_id, stream) as (checked, name, layout, source):
            job = functools.partial(
                _search.run_search,
                source,
                layout,
                artifact_id=checked,
                stream=name,
                pattern=compiled,
                pattern_text=pattern,
                limit=limit,
                start_line=start_line,
                budget_chars=settings.display_max_chars,
                scan_max_chars=settings.scan_max_chars,
                line_ceiling_chars=settings.line_ceiling_chars,
                timeout_s=settings.search_timeout_s,
                redact=None if redactor is None else redactor(name, start_line),
            )
            # The regex work never runs on the event loop thread; the regex timeout bounds the thread.
            return await trio.to_thread.run_sync(job)
