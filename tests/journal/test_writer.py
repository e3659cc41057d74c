"""The journal writer: append-only ndjson, writer-assigned seq, fsync by policy, never a line a reader refuses."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import pytest
import trio

from executor.config import JournalSettings
from executor.errors import JournalError
from executor.journal.chain import JournalKey, head_path
from executor.journal.events import (
    ActionPrepared,
    DecisionEvent,
    ExecutionFinished,
    ExecutionStarted,
    JudgmentEvent,
    SessionClosed,
    SessionOpened,
    escaped,
    unescaped,
)
from executor.journal.files import exchange_paths
from executor.journal.reader import read_journal_file
from executor.journal.writer import JournalWriter
from executor.testing.journal import SESSION, decision, judgment, prepared


class FsyncCounter:
    """Counts real fsync calls by descriptor kind (file or folder) and performs them."""

    def __init__(self) -> None:
        self.files = 0
        self.folders = 0

    def __call__(self, fd: int) -> None:
        if Path(f"/proc/self/fd/{fd}").is_dir():
            self.folders += 1
        else:
            self.files += 1
        os.fsync(fd)


def _journal(tmp_path: Path) -> Path:
    return tmp_path / "sessions" / SESSION / "journal.ndjson"


def _write_three(path: Path, fsync: str, counter: FsyncCounter) -> None:
    settings = JournalSettings.model_validate({"fsync": fsync})
    with JournalWriter(path, session_id=SESSION, settings=settings, fsync=counter) as journal:
        journal.emit(SessionOpened())
        journal.emit(prepared("a1", "ls"))
        journal.emit(SessionClosed())
        during = (counter.files, counter.folders)
    assert during[0] == (3 if fsync == "always" else 0)


def test_emit_stamps_seq_and_session_and_appends_one_line_per_event(tmp_path: Path) -> None:
    """Each event becomes one line with writer-assigned seq 1..N and the writer's session id."""
    path = _journal(tmp_path)
    with JournalWriter(path, session_id=SESSION, settings=JournalSettings()) as journal:
        written = journal.emit(decision("a1", "ask", judgment_ids=("j1",)).model_copy(update={"seq": 99}))
        journal.emit(judgment("j1", "a1", {"risk": 2}))
    assert isinstance(written, DecisionEvent)
    assert (written.seq, written.session_id) == (1, SESSION)
    data = path.read_bytes()
    assert data.count(b"\n") == 2 and data.endswith(b"\n")
    result = read_journal_file(path, settings=JournalSettings(), mode="strict")
    assert [(e.seq, e.session_id, e.type) for e in result.events] == [
        (1, SESSION, "decision"),
        (2, SESSION, "judgment"),
    ]
    assert isinstance(result.events[1], JudgmentEvent)
    assert path.parent.stat().st_mode & 0o777 == 0o700
    assert path.stat().st_mode & 0o777 == 0o600


def test_fsync_always_syncs_after_every_event(tmp_path: Path) -> None:
    """fsync=always syncs the file once per event (and the new file's folder once)."""
    counter = FsyncCounter()
    _write_three(_journal(tmp_path), "always", counter)
    assert (counter.files, counter.folders) == (3, 1)


def test_fsync_close_syncs_once_when_closing(tmp_path: Path) -> None:
    """fsync=close syncs the file only when the writer closes."""
    counter = FsyncCounter()
    _write_three(_journal(tmp_path), "close", counter)
    assert (counter.files, counter.folders) == (1, 1)


def test_fsync_never_never_syncs(tmp_path: Path) -> None:
    """fsync=never makes no fsync call at all."""
    counter = FsyncCounter()
    _write_three(_journal(tmp_path), "never", counter)
    assert (counter.files, counter.folders) == (0, 0)


def test_reopening_continues_seq_and_never_rewrites_earlier_lines(tmp_path: Path) -> None:
    """A second writer on the same file appends after the highest seq and leaves earlier bytes untouched."""
    path = _journal(tmp_path)
    with JournalWriter(path, session_id=SESSION, settings=JournalSettings()) as journal:
        journal.emit(SessionOpened())
        journal.emit(SessionClosed())
    before = path.read_bytes()
    with JournalWriter(path, session_id=SESSION, settings=JournalSettings()) as journal:
        again = journal.emit(SessionOpened())
    assert again.seq == 3
    assert path.read_bytes().startswith(before)


def test_reopening_after_a_cut_line_keeps_new_events_whole(tmp_path: Path) -> None:
    """After a crash mid-line the next writer ends the cut line first, so only that line is refused."""
    path = _journal(tmp_path)
    with JournalWriter(path, session_id=SESSION, settings=JournalSettings()) as journal:
        journal.emit(SessionOpened())
    with path.open("ab") as raw:
        raw.write(b'{"v": 1, "seq": 2, "ty')
    with JournalWriter(path, session_id=SESSION, settings=JournalSettings()) as journal:
        journal.emit(SessionClosed())
    result = read_journal_file(path, settings=JournalSettings())
    assert [(i.line, i.code) for i in result.issues] == [(2, "invalid_json")]
    assert [(r.line, r.event.type, r.event.seq) for r in result.records] == [
        (1, "session_opened", 1),
        (3, "session_closed", 2),
    ]


def test_an_event_of_another_session_is_refused(tmp_path: Path) -> None:
    """An event already stamped with another session id cannot enter this journal."""
    with (
        JournalWriter(_journal(tmp_path), session_id=SESSION, settings=JournalSettings()) as journal,
        pytest.raises(JournalError, match=r"^event for session 'other' cannot go into the journal of 's1'"),
    ):
        journal.emit(SessionOpened(session_id="other"))


def test_a_line_over_max_line_bytes_is_refused_and_not_written(tmp_path: Path) -> None:
    """An event whose line would exceed max_line_bytes raises and leaves the file unchanged."""
    path = _journal(tmp_path)
    with JournalWriter(path, session_id=SESSION, settings=JournalSettings(max_line_bytes=1024)) as journal:
        journal.emit(SessionOpened())
        size = path.stat().st_size
        with pytest.raises(JournalError, match=r"^session_closed event is \d+ bytes, over journal\.max_line_bytes"):
            journal.emit(SessionClosed(reason="x" * 2000))
        assert journal.emit(SessionClosed()).seq == 2
    assert path.stat().st_size > size


def test_material_deeper_than_max_depth_is_refused(tmp_path: Path) -> None:
    """A judgment whose material nests past max_depth raises instead of writing an unreadable line."""
    deep: object = 1
    for _ in range(10):
        deep = [deep]
    with (
        JournalWriter(_journal(tmp_path), session_id=SESSION, settings=JournalSettings(max_depth=8)) as journal,
        pytest.raises(JournalError, match=r"^judgment event would be refused by a reader: nests deeper"),
    ):
        journal.emit(judgment("j1", "a1", {"risk": 1}, material={"x": deep}))


def test_integer_over_the_parsers_digit_limit_is_refused(tmp_path: Path) -> None:
    """Material holding an integer longer than the JSON parser accepts raises instead of writing a line no reader
    can parse; a long digit run inside a string (which the screen also looks at) is written."""
    with JournalWriter(_journal(tmp_path), session_id=SESSION, settings=JournalSettings()) as journal:
        written = journal.emit(judgment("j0", "a1", {"risk": 1}, material={"x": "7" * 5000}))
        with pytest.raises(JournalError, match=r"^judgment event would be refused by a reader: is not valid JSON"):
            journal.emit(judgment("j1", "a1", {"risk": 1}, material={"x": 7 * 10**5000}))
    result = read_journal_file(_journal(tmp_path), settings=JournalSettings(), mode="strict")
    assert (result.issues, [e.seq for e in result.events]) == ((), [written.seq])


def test_staged_events_go_out_with_the_next_write(tmp_path: Path) -> None:
    """Staged events reach the file, in the order staged and before the appended one, with the next append (one
    write); the ones still staged at close are written then; a refused event does not take the staged ones down."""
    path = _journal(tmp_path)
    key = JournalKey(b"k" * 32)
    with JournalWriter(path, session_id=SESSION, settings=JournalSettings(max_depth=8), key=key) as journal:
        journal.stage(prepared("a1", "ls"))
        journal.stage(decision("a1", "allow"))
        assert path.stat().st_size == 0  # held, not written
        started = journal.append(ExecutionStarted(action_id="a1"))
        assert started.seq == 3
        journal.stage(prepared("a2", "ls"))
        deep: object = 1
        for _ in range(10):
            deep = [deep]
        with pytest.raises(JournalError, match="would be refused by a reader"):
            journal.append(judgment("j1", "a2", {"risk": 1}, material={"x": deep}))
        journal.stage(prepared("a3", "ls"))
    result = read_journal_file(path, settings=JournalSettings(), mode="strict", key=key)
    assert result.issues == ()
    assert [(e.seq, e.type, getattr(e, "action_id", None)) for e in result.events] == [
        (1, "action_prepared", "a1"),
        (2, "decision", "a1"),
        (3, "execution_started", "a1"),
        (4, "action_prepared", "a2"),
        (5, "action_prepared", "a3"),
    ]


def test_emit_outside_the_context_is_refused(tmp_path: Path) -> None:
    """Emitting before open or after close raises JournalError; a writer opens once."""
    writer = JournalWriter(_journal(tmp_path), session_id=SESSION, settings=JournalSettings())
    with pytest.raises(JournalError, match=r"is not open"):
        writer.emit(SessionOpened())
    with writer:
        pass
    with pytest.raises(JournalError, match=r"is not open"):
        writer.emit(SessionOpened())
    with pytest.raises(JournalError, match=r"already opened"):
        writer.open()


def test_non_finite_numbers_cannot_be_built() -> None:
    """An event carrying NaN does not validate, so it can never reach the file."""
    with pytest.raises(ValueError, match="finite"):
        SessionOpened(ts=float("nan"))


def test_two_writers_on_one_journal_keep_seq_strictly_increasing(tmp_path: Path) -> None:
    """Two writers (two processes on one named session) interleave without duplicate or backward seq."""
    path = _journal(tmp_path)
    settings = JournalSettings.model_validate({"fsync": "never"})
    with (
        JournalWriter(path, session_id=SESSION, settings=settings) as one,
        JournalWriter(path, session_id=SESSION, settings=settings) as two,
    ):
        for index in range(3):
            one.emit(prepared(f"a{index}", "ls"))
            two.emit(prepared(f"b{index}", 'echo "{\\"v\\":1,\\"seq\\":999}"'))
    result = read_journal_file(path, settings=JournalSettings(), mode="strict")
    assert [event.seq for event in result.events] == [1, 2, 3, 4, 5, 6]


def test_fsync_action_syncs_at_action_boundaries_only(tmp_path: Path) -> None:
    """fsync=action (the default) syncs when an execution starts or ends and when the writer closes."""
    counter = FsyncCounter()
    settings = JournalSettings()
    assert settings.fsync == "action"
    with JournalWriter(_journal(tmp_path), session_id=SESSION, settings=settings, fsync=counter) as journal:
        journal.emit(SessionOpened())
        journal.emit(prepared("a1", "ls"))
        journal.emit(decision("a1", "allow"))
        assert counter.files == 0
        journal.emit(ExecutionStarted(action_id="a1"))
        assert counter.files == 1
        journal.emit(ExecutionFinished(action_id="a1", exit_code=0))
        assert counter.files == 2
    assert counter.files == 3


async def test_append_writes_at_once_and_commit_pays_the_owed_fsync_once(tmp_path: Path) -> None:
    """append() writes the line before it returns; the boundary's fsync and the head seal wait for commit()."""
    counter = FsyncCounter()
    path = _journal(tmp_path)
    key = JournalKey(b"k" * 32)
    with JournalWriter(path, session_id=SESSION, settings=JournalSettings(), key=key, fsync=counter) as journal:
        journal.append(prepared("a1", "ls"))
        journal.append(ExecutionStarted(action_id="a1"))
        assert path.read_bytes().count(b"\n") == 2  # written: a killed process loses nothing from here on
        assert counter.files == 0
        assert not head_path(path).exists()
        await journal.commit()
        assert counter.files == 1
        assert key.read_head(head_path(path).read_bytes()) is not None
        await journal.commit()  # nothing owed: no disk wait
        assert counter.files == 1
    result = read_journal_file(path, settings=JournalSettings(), mode="strict", key=key)
    assert (result.verification, result.issues) == ("verified", ())


async def test_commit_without_seal_syncs_and_leaves_the_head_to_the_next_commit(tmp_path: Path) -> None:
    """commit(seal=False) fsyncs an owed boundary but leaves the head where it was until a sealing commit."""
    counter = FsyncCounter()
    path = _journal(tmp_path)
    key = JournalKey(b"k" * 32)
    with JournalWriter(path, session_id=SESSION, settings=JournalSettings(), key=key, fsync=counter) as journal:
        journal.emit(SessionOpened())
        sealed = key.read_head(head_path(path).read_bytes())
        journal.append(ExecutionStarted(action_id="a1"))
        await journal.commit(seal=False)
        assert counter.files == 1
        assert key.read_head(head_path(path).read_bytes()) == sealed
        journal.append(ExecutionFinished(action_id="a1", exit_code=0, duration_ms=1.0))
        await journal.commit()
        assert counter.files == 2
        head = key.read_head(head_path(path).read_bytes())
        assert head is not None and head[0] == 3
    # A lagging head is never reported: only a head ahead of the file is.
    assert read_journal_file(path, settings=JournalSettings(), mode="strict", key=key).issues == ()


async def test_concurrent_commits_share_fsyncs(tmp_path: Path) -> None:
    """Group commit: 32 tasks that each append a boundary and commit at once share a few fsyncs, not 32.

    The first fsync is held on the disk until every task has appended (so the test does not depend on how fast the
    disk or the scheduler is): everything appended meanwhile must then go to the disk together.
    """
    counter = FsyncCounter()
    all_appended = threading.Event()

    def slow_fsync(fd: int) -> None:
        if not Path(f"/proc/self/fd/{fd}").is_dir():  # the folder's sync, when the journal is made, is not held
            all_appended.wait(timeout=30)
        counter(fd)

    path = _journal(tmp_path)
    with JournalWriter(path, session_id=SESSION, settings=JournalSettings(), fsync=slow_fsync) as journal:
        appended = 0

        async def one(index: int) -> None:
            nonlocal appended
            journal.append(ExecutionStarted(action_id=f"a{index}"))
            appended += 1
            if appended == 32:  # trio runs the tasks in any order
                all_appended.set()
            await journal.commit()

        async with trio.open_nursery() as nursery:
            for index in range(32):
                nursery.start_soon(one, index)
        # The first commit's fsync, then at most one more for everything appended while it was on the disk.
        assert counter.files <= 2
    result = read_journal_file(path, settings=JournalSettings(), mode="strict")
    assert [event.seq for event in result.events] == list(range(1, 33))


async def test_close_seals_what_no_commit_sealed(tmp_path: Path) -> None:
    """Appended lines that no commit covered are synced and sealed when the writer closes."""
    counter = FsyncCounter()
    path = _journal(tmp_path)
    key = JournalKey(b"k" * 32)
    with JournalWriter(path, session_id=SESSION, settings=JournalSettings(), key=key, fsync=counter) as journal:
        journal.append(prepared("a1", "ls"))
        journal.append(ExecutionStarted(action_id="a1"))
    assert counter.files == 2  # the journal, then the head sealed over it
    head = key.read_head(head_path(path).read_bytes())
    assert head is not None and head[0] == 2
    assert read_journal_file(path, settings=JournalSettings(), mode="strict", key=key).issues == ()


def test_append_under_fsync_always_is_emit(tmp_path: Path) -> None:
    """Under fsync=always an append is synced before it returns; nothing is left for a commit."""
    counter = FsyncCounter()
    settings = JournalSettings.model_validate({"fsync": "always"})
    with JournalWriter(_journal(tmp_path), session_id=SESSION, settings=settings, fsync=counter) as journal:
        journal.append(prepared("a1", "ls"))
        journal.append(SessionClosed())
        assert counter.files == 2


async def test_the_head_is_swapped_in_whole_and_no_temporary_file_outlives_the_writer(tmp_path: Path) -> None:
    """Each seal replaces the head whole (no tail of a longer file is left behind it), every head read
    between seals is one this key sealed, and the temporary files go when the writer closes."""
    path = _journal(tmp_path)
    key = JournalKey(b"k" * 32)
    head = head_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # A head file longer than a seal: swapped out by the first seal, it is the second one's temporary file, which
    # must be overwritten whole (no tail of it left to spoil the JSON).
    head.write_bytes(b"{" + b" " * 400 + b"}x")
    seen: list[tuple[int, str, int] | None] = []
    with JournalWriter(path, session_id=SESSION, settings=JournalSettings(), key=key) as journal:
        for index in range(5):
            journal.append(ExecutionStarted(action_id=f"a{index}"))
            await journal.commit()
            seen.append(key.read_head(head.read_bytes()))
            journal.emit(ExecutionFinished(action_id=f"a{index}", exit_code=0, duration_ms=1.0))
            seen.append(key.read_head(head.read_bytes()))
    assert [entry and entry[0] for entry in seen] == list(range(1, 11))
    assert sorted(p.name for p in path.parent.iterdir()) == sorted([path.name, head.name])
    assert read_journal_file(path, settings=JournalSettings(), mode="strict", key=key).issues == ()


def test_exchange_paths_swaps_two_names_and_declines_a_missing_one(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.write_bytes(b"first")
    assert exchange_paths(first, second) is False  # nothing to swap with: the caller renames instead
    assert first.read_bytes() == b"first"
    second.write_bytes(b"second")
    assert exchange_paths(first, second) is True
    assert (first.read_bytes(), second.read_bytes()) == (b"second", b"first")
    with pytest.raises(OSError):
        exchange_paths(tmp_path / "missing", second)


def test_opening_removes_the_head_temporaries_of_writers_that_are_gone(tmp_path: Path) -> None:
    """A writer killed before it closed leaves its head's temporary file; the next writer removes it, and leaves a
    living process's alone."""
    path = _journal(tmp_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    dead = head_path(path).with_name(f"{head_path(path).name}.{_ended_pid()}.7f.tmp")
    living = head_path(path).with_name(f"{head_path(path).name}.{os.getppid()}.7f.tmp")
    for stale in (dead, living):
        stale.write_bytes(b" ")
    with JournalWriter(path, session_id=SESSION, settings=JournalSettings(), key=JournalKey(b"k" * 32)) as journal:
        journal.emit(SessionOpened())
    assert not dead.exists()
    assert living.exists()


def _ended_pid() -> int:
    """The pid of a process that has ended (and been reaped): it names nobody now."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_text_with_undecodable_bytes_is_kept_as_escapes(tmp_path: Path) -> None:
    """A file name's undecodable bytes reach events as lone surrogates, which JSON cannot hold: the line is written
    with them escaped (\\xff for a byte, \\udXXX otherwise) and read back verified, not refused after the action ran."""
    path = _journal(tmp_path)
    key = JournalKey(b"k" * 32)
    with JournalWriter(path, session_id=SESSION, settings=JournalSettings(), key=key) as journal:
        written = journal.emit(prepared("a1", "cat f\udcff.txt \ud800"))
        journal.emit(SessionClosed())
    assert isinstance(written, ActionPrepared)
    assert written.action.command == "cat f\\xff.txt \\ud800"  # type: ignore[union-attr]
    result = read_journal_file(path, settings=JournalSettings(), mode="strict", key=key)
    assert result.verification == "verified" and not result.issues
    assert result.events[0].action.command == "cat f\\xff.txt \\ud800"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "text",
    ["f\udcff.txt", "\ud800 and \udfff", "a real \\xff and \\\\ beside \udc80", "\\", "\udcff\\"],
)
def test_the_escaping_of_unwritable_text_is_undone_exactly(text: str) -> None:
    """What the writer escapes, a reader can restore exactly: backslashes of an escaped text are doubled, so a real
    ``\\xff`` in a name holding an undecodable byte is not read back as that byte."""
    value = {"name": text, "names": [text, "plain"], text: 1}
    assert unescaped(escaped(value)) == value
    assert json.dumps(escaped(value), ensure_ascii=False).encode("utf-8")  # has a JSON form
