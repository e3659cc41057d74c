"""The store: ids stamped with their session, isolation, retention with tombstones, journal modes."""

from __future__ import annotations

import fcntl
import json
import multiprocessing
import os
import sqlite3
import threading
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from executor.artifacts import ArtifactStore
from executor.config import load_settings
from executor.errors import (
    ArtifactError,
    ArtifactEvicted,
    ArtifactNotFound,
    ConfigError,
    SessionNotFound,
    StreamNotFound,
)
from executor.ids import new_session_id
from executor.testing.artifacts import artifact_settings, store_bytes


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _message(exc: pytest.ExceptionInfo[BaseException], artifact_id: str) -> str:
    return str(exc.value).replace(repr(artifact_id), "<id>")


def test_two_sessions_on_one_home_cannot_see_each_other(home: Path) -> None:
    """A foreign, malformed or unknown id all raise ArtifactNotFound with the same message, before any path."""
    with ArtifactStore.open(home, artifact_settings()) as store:
        alice, bob = store.session(new_session_id()), store.session(new_session_id())
        secret = store_bytes(alice, b"alice's secret\n")
        unknown = alice.session_id + ".a999"
        messages = []
        for bad in (secret, unknown, "../../etc/passwd", alice.session_id + ".a1/../x", "s-XYZ.a1"):
            with pytest.raises(ArtifactNotFound) as exc:
                bob.read_output(bad)
            messages.append(_message(exc, bad))
        assert len(set(messages)) == 1
        with pytest.raises(ArtifactNotFound):
            bob.record(secret)
        assert alice.read_output(secret).text == "alice's secret\n"


def test_ids_are_stamped_with_their_session(home: Path) -> None:
    """Artifact ids carry the owning session id and a per-session sequence number."""
    with ArtifactStore.open(home, artifact_settings()) as store:
        session = store.session("s-0123456789ab")
        assert store_bytes(session, b"x") == "s-0123456789ab.a1"
        assert store_bytes(session, b"y") == "s-0123456789ab.a2"
        with pytest.raises(SessionNotFound, match=r"^no session "):
            store.session("../s-0123456789ab")


def test_unknown_stream_is_its_own_outcome(home: Path) -> None:
    """Asking for a stream the artifact does not have raises StreamNotFound naming the streams it has."""
    with ArtifactStore.open(home, artifact_settings()) as store:
        session = store.session(new_session_id())
        capture = session.begin(kind="bash", streams=("stdout", "stderr"))
        artifact_id = capture.finish(status="ok").id
        with pytest.raises(StreamNotFound, match="its streams: stdout, stderr"):
            session.read_output(artifact_id, stream="../stdout")


def test_the_count_budget_evicts_the_oldest_and_leaves_a_tombstone(home: Path) -> None:
    """Past session_max_artifacts the oldest artifact is evicted, reported as evicted, its files gone."""
    with ArtifactStore.open(home, artifact_settings(session_max_artifacts=2)) as store:
        session = store.session(new_session_id())
        first, second, third = (store_bytes(session, b"%d\n" % i) for i in range(3))
        with pytest.raises(ArtifactEvicted, match=f"artifact {first} was evicted"):
            session.read_output(first)
        assert [r.id for r in session.artifacts()] == [second, third]
        assert not (home / "sessions" / session.session_id / "artifacts" / first).exists()


def test_the_byte_budget_evicts_only_the_own_session(home: Path) -> None:
    """Past session_max_bytes a session evicts its own oldest artifacts, never another session's."""
    settings = artifact_settings(session_max_bytes="1m", capture_max_bytes="600k")
    with ArtifactStore.open(home, settings) as store:
        mine, other = store.session(new_session_id()), store.session(new_session_id())
        theirs = store_bytes(other, b"o" * 500_000, chunk=65536)
        old = store_bytes(mine, b"a" * 500_000, chunk=65536)
        store_bytes(mine, b"b" * 500_000, chunk=65536)
        assert other.read_output(theirs, line_count=1, budget_chars=300).data == b"o" * 300
        store_bytes(mine, b"c" * 500_000, chunk=65536)
        with pytest.raises(ArtifactEvicted):
            mine.record(old)
        assert other.record(theirs).streams["output"].bytes_total == 500_000


def test_tombstones_past_the_horizon_report_unknown(home: Path) -> None:
    """Once the tombstone horizon passes, an evicted id reports unknown rather than evicted."""
    clock = _Clock()
    settings = artifact_settings(session_max_artifacts=1, tombstone_horizon_s=60)
    with ArtifactStore.open(home, settings, clock=clock) as store:
        session = store.session(new_session_id())
        first = store_bytes(session, b"1")
        store_bytes(session, b"2")
        clock.now += 59
        with pytest.raises(ArtifactEvicted):
            session.record(first)
        clock.now += 2
        with pytest.raises(ArtifactNotFound, match="no artifact"):
            session.record(first)


@pytest.mark.parametrize("mode", ["wal", "delete", "truncate"])
def test_the_store_works_in_each_journal_mode(home: Path, mode: str) -> None:
    """The index runs in the configured journal mode, and a second store on the same home reads what the first wrote."""
    settings = artifact_settings(journal_mode=mode)
    with ArtifactStore.open(home, settings) as writer, ArtifactStore.open(home, settings) as reader:
        assert writer.journal_mode == mode
        session_id = new_session_id()
        artifact_id = store_bytes(writer.session(session_id), b"shared\n")
        assert reader.session(session_id).read_output(artifact_id).text == "shared\n"
    if mode == "wal":
        assert (home / "artifacts.sqlite3").exists()


@pytest.mark.parametrize("level", ["normal", "full"])
def test_the_index_uses_the_configured_synchronous_level(home: Path, level: str) -> None:
    """artifacts.sqlite_synchronous sets SQLite's synchronous level (default normal); others fail at load."""
    with ArtifactStore.open(home, artifact_settings(sqlite_synchronous=level)) as store:
        assert store.synchronous == level
    assert load_settings().artifacts.sqlite_synchronous == "normal"
    with pytest.raises(ConfigError, match=r"artifacts\.sqlite_synchronous"):
        load_settings(overrides={"artifacts": {"sqlite_synchronous": "off"}})


def test_an_artifact_another_process_evicted_reads_as_evicted_after_it_was_read(home: Path) -> None:
    """A finished artifact read once (its index rows remembered) and then evicted through another store on the same
    home (another process) reads as evicted, never as stale or damaged."""
    with (
        ArtifactStore.open(home, artifact_settings(session_max_artifacts=1)) as reader_store,
        ArtifactStore.open(home, artifact_settings(session_max_artifacts=1)) as writer_store,
    ):
        session_id = new_session_id()
        reader, writer = reader_store.session(session_id), writer_store.session(session_id)
        first = store_bytes(writer, b"first output\n")
        assert reader.read_output(first).text == "first output\n"
        assert reader.record(first).status == "ok"
        store_bytes(writer, b"second output\n")  # evicts the first
        with pytest.raises(ArtifactEvicted, match=f"artifact {first} was evicted"):
            reader.record(first)
        with pytest.raises(ArtifactEvicted, match=f"artifact {first} was evicted"):
            reader.read_output(first)


def test_a_capture_another_process_is_writing_is_never_evicted(home: Path) -> None:
    """Another store on the home (a CLI call beside a service) going past the count budget evicts its own finished
    artifacts, never a capture still running in the first: that command's output and its end stay whole."""
    settings = artifact_settings(session_max_artifacts=2)
    with ArtifactStore.open(home, settings) as long_store, ArtifactStore.open(home, settings) as short_store:
        session_id = new_session_id()
        running = long_store.session(session_id).begin(kind="test", streams=("output",))
        running.feed("output", b"first half\n")
        short = short_store.session(session_id)
        for i in range(4):
            store_bytes(short, b"short %d\n" % i)
        running.feed("output", b"second half\n")
        record = running.finish(status="ok")
        assert long_store.session(session_id).read_output(record.id).text == "first half\nsecond half\n"


def test_an_empty_artifact_another_process_evicted_reads_as_evicted(home: Path) -> None:
    """An artifact without files (every stream empty), remembered after a read, reads as evicted once another store
    on the home evicted it."""
    with (
        ArtifactStore.open(home, artifact_settings(session_max_artifacts=1)) as reader_store,
        ArtifactStore.open(home, artifact_settings(session_max_artifacts=1)) as writer_store,
    ):
        session_id = new_session_id()
        reader, writer = reader_store.session(session_id), writer_store.session(session_id)
        first = store_bytes(writer, b"")
        assert reader.read_output(first).empty_source
        store_bytes(writer, b"")  # evicts the first
        with pytest.raises(ArtifactEvicted, match=f"artifact {first} was evicted"):
            reader.read_output(first)


def _totals(home: Path, session_id: str) -> tuple[tuple[int, int], tuple[int, int]]:
    with closing(sqlite3.connect(home / "artifacts.sqlite3")) as conn:
        kept = conn.execute("SELECT artifact_count, bytes_total FROM sessions WHERE id = ?", (session_id,)).fetchone()
        counted = conn.execute(
            "SELECT count(*), coalesce(sum(bytes_stored), 0) FROM artifacts WHERE session = ?", (session_id,)
        ).fetchone()
    return kept, counted


def test_the_index_keeps_each_sessions_totals_through_captures_and_evictions(home: Path) -> None:
    """The count and byte totals the budgets are checked against always equal the session's artifact rows."""
    with ArtifactStore.open(home, artifact_settings(session_max_artifacts=3)) as store:
        session = store.session(new_session_id())
        for size in (0, 10, 100_000, 5, 0, 7):
            store_bytes(session, b"x" * size)
            kept, counted = _totals(home, session.session_id)
            assert kept == counted
        assert kept == (3, 12)
        live = session.begin(kind="bash", streams=("stdout",))
        live.feed("stdout", b"abc")
        live.flush()
        assert _totals(home, session.session_id)[0] == (3, 10)  # the oldest (5 bytes) was evicted to make room
        live.finish(status="ok")


def test_an_index_from_before_the_totals_is_brought_up_to_date(home: Path) -> None:
    """Opening an index made without the totals adds them, counted from the rows, and enforces the budgets."""
    session_id = new_session_id()
    with closing(sqlite3.connect(home / "artifacts.sqlite3")) as conn:
        conn.executescript(
            """
            CREATE TABLE sessions (id TEXT PRIMARY KEY, created_at REAL NOT NULL, next_seq INTEGER NOT NULL DEFAULT 1);
            CREATE TABLE artifacts (id TEXT PRIMARY KEY, session TEXT NOT NULL REFERENCES sessions(id),
                seq INTEGER NOT NULL, kind TEXT NOT NULL, status TEXT NOT NULL, meta TEXT NOT NULL,
                created_at REAL NOT NULL, bytes_stored INTEGER NOT NULL DEFAULT 0);
            """
        )
        conn.execute("INSERT INTO sessions (id, created_at, next_seq) VALUES (?, 0, 3)", (session_id,))
        for seq in (1, 2):
            conn.execute(
                "INSERT INTO artifacts VALUES (?, ?, ?, 'bash', 'ok', '{}', 0, 40)",
                (f"{session_id}.a{seq}", session_id, seq),
            )
        conn.commit()
    with ArtifactStore.open(home, artifact_settings(session_max_artifacts=2)) as store:
        assert _totals(home, session_id) == ((2, 80), (2, 80))
        session = store.session(session_id)
        third = store_bytes(session, b"new\n")
        assert third == f"{session_id}.a3"
        assert [r.id for r in session.artifacts()] == [f"{session_id}.a2", third]
        assert _totals(home, session_id) == ((2, 44), (2, 44))


def test_a_store_holds_one_owner_file_while_it_captures(home: Path) -> None:
    """A store locks one owner file for all of its captures (made with its first capture) and removes it on close."""
    owners = home / "owners"
    with ArtifactStore.open(home, artifact_settings()) as store:
        session = store.session(new_session_id())
        assert not owners.exists() or list(owners.iterdir()) == []
        first = session.begin(kind="bash", streams=("stdout",))
        second = session.begin(kind="bash", streams=("stdout",))
        [owner] = owners.iterdir()
        assert json.loads(owner.read_text()) == {"pid": os.getpid(), "cap": artifact_settings().capture_max_bytes}
        with owner.open("rb") as held, pytest.raises(BlockingIOError):
            fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        first.finish(status="ok")
        second.finish(status="ok")
        assert list(owners.iterdir()) == [owner]
    assert list(owners.iterdir()) == []


def test_a_home_where_no_owner_file_can_be_made_refuses_captures_with_an_artifact_error(home: Path) -> None:
    """When the owner file cannot be made, begin raises ArtifactError naming the folder, and no artifact exists."""
    with ArtifactStore.open(home, artifact_settings()) as store:
        session = store.session(new_session_id())
        (home / "owners").write_text("not a folder")
        with pytest.raises(ArtifactError, match=r"owners: cannot make this process's owner file"):
            session.begin(kind="bash", streams=("stdout",))
        assert session.artifacts() == []


def _open_at(home: Path, start: Any) -> None:
    start.wait()
    ArtifactStore.open(home, artifact_settings()).close()


def test_first_opens_of_a_new_index_at_once_all_succeed(tmp_path: Path) -> None:
    """Processes opening one new home at the same moment all get the index (SQLite refuses the losers of the
    switch to WAL at once, without waiting, unless the set-up is serialised)."""
    forks = multiprocessing.get_context("fork")
    exit_codes: list[int | None] = []
    for trial in range(16):
        start = forks.Barrier(3)
        openers = [forks.Process(target=_open_at, args=(tmp_path / f"home-{trial}", start)) for _ in range(3)]
        for opener in openers:
            opener.start()
        for opener in openers:
            opener.join(timeout=60)
            exit_codes.append(opener.exitcode)
    assert exit_codes == [0] * len(exit_codes)


def test_an_open_waits_for_another_set_up_at_most_busy_timeout_s(home: Path) -> None:
    """An open waits for another process's set-up of the index, and past artifacts.busy_timeout_s says so."""
    ArtifactStore.open(home, artifact_settings()).close()
    holder = os.open(home / "artifacts.setup.lock", os.O_RDWR)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        with pytest.raises(ArtifactError, match=r"artifacts\.busy_timeout_s"):
            ArtifactStore.open(home, artifact_settings(busy_timeout_s=0.2))
        release = threading.Timer(0.3, fcntl.flock, (holder, fcntl.LOCK_UN))
        release.start()
        ArtifactStore.open(home, artifact_settings(busy_timeout_s=5)).close()
        release.join()
    finally:
        os.close(holder)


def test_a_full_index_says_no_space_not_damaged(home: Path) -> None:
    """An index the disk has no room for (SQLite's SQLITE_FULL) says so: it is whole, and moving it aside (the advice
    for a damaged one) would orphan every artifact."""
    with ArtifactStore.open(home, artifact_settings()) as store:
        session = store.session(new_session_id())
        store_bytes(session, b"x")
        pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
        store._conn.execute(f"PRAGMA max_page_count = {pages}")  # the file may not grow: as a full disk
        with pytest.raises(ArtifactError, match="no space left for the artifact index") as exc:
            for _ in range(10_000):
                store_bytes(session, b"y" * 100)
        assert "damaged" not in str(exc.value)


def test_a_sessions_owner_is_kept_first_given_and_outlives_an_index_without_it(home: Path) -> None:
    """The owner a session is registered with is kept (a later registration never changes it) and read back; an
    index made before owners were kept gains the column on open, its sessions owned by nobody in particular."""
    session_id, old_id = new_session_id(), new_session_id()
    with ArtifactStore.open(home, artifact_settings()) as store:
        store.session(old_id)
    with closing(sqlite3.connect(home / "artifacts.sqlite3")) as conn:
        conn.execute("ALTER TABLE sessions DROP COLUMN owner")
        conn.commit()
    with ArtifactStore.open(home, artifact_settings()) as store:
        assert store.session_owner(old_id) is None
        store.session(session_id, owner="owner-a")
        store.session(session_id)
        store.session(session_id, owner="owner-b")
        assert store.session_owner(session_id) == "owner-a"
        store.session(old_id, owner="owner-c")  # the first owner given to a session registered without one
        assert store.session_owner(old_id) == "owner-c"
        unknown = new_session_id()
        with pytest.raises(SessionNotFound, match=f"^no session '{unknown}' has artifacts in this home$"):
            store.session_owner(unknown)
