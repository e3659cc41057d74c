"""Many writers on one journal, in many processes and in many trio tasks: one whole, verifiable journal."""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import trio
import trio.lowlevel

from executor.config import JournalSettings
from executor.journal.chain import load_journal_key
from executor.journal.events import SessionOpened
from executor.journal.reader import JournalRead, read_journal_file
from executor.journal.writer import JournalWriter
from executor.testing.journal import SESSION, judgment, prepared

SETTINGS = JournalSettings.model_validate({"fsync": "never"})

_WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from executor.config import JournalSettings
    from executor.journal.chain import load_journal_key
    from executor.journal.events import SessionOpened
    from executor.journal.writer import JournalWriter
    from executor.testing.journal import judgment, prepared

    home, name, rounds, go = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
    deadline = time.monotonic() + 60
    while not go.exists():  # a start line, so every process opens and appends at the same moment
        if time.monotonic() > deadline:
            sys.exit("never started")
        time.sleep(0.005)
    key = load_journal_key(home, create=True)
    settings = JournalSettings.model_validate({"fsync": "never"})
    # Like CLI calls on a named session: each round opens the journal afresh while the others keep appending.
    for round in range(rounds):
        with JournalWriter(home / "journal.ndjson", session_id="s1", settings=settings, key=key) as journal:
            journal.emit(SessionOpened())
            for index in range(20):
                journal.emit(prepared(f"{name}-{round}-{index}", "ls"))
                if index % 5 == 0:  # a judgment's JSON does not start with seq
                    journal.emit(judgment(f"j-{name}-{round}-{index}", f"{name}-{round}-{index}", {"risk": 1}))
    """
)


def _assert_whole(read: JournalRead, expected: int) -> None:
    assert read.issues == ()
    assert read.verification == "verified"
    seqs = [event.seq for event in read.events]
    assert len(seqs) == expected == read.lines
    assert all(b > a for a, b in itertools.pairwise(seqs))


@pytest.mark.timeout(180)
def test_twelve_processes_appending_at_once_leave_one_whole_verified_journal(tmp_path: Path) -> None:
    """Twelve processes reopen a long journal ten times each while the others append: every line kept, in order."""
    processes, rounds = 12, 10
    go = tmp_path / "go"
    key = load_journal_key(tmp_path, create=True)
    settings = JournalSettings.model_validate({"fsync": "never"})
    # A long journal makes opening slow, which is when an unlocked look at the tail used to go stale.
    with JournalWriter(tmp_path / "journal.ndjson", session_id="s1", settings=settings, key=key) as journal:
        for index in range(2000):
            journal.emit(prepared(f"pre-{index}", "ls"))
    repo = Path(__file__).resolve().parents[2]
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(tmp_path), f"p{n}", str(rounds), str(go)],
            cwd=repo,
            stderr=subprocess.PIPE,
        )
        for n in range(processes)
    ]
    go.touch()
    for child in children:
        _, err = child.communicate(timeout=150)
        assert child.returncode == 0, err.decode()[-2000:]
    read = read_journal_file(tmp_path / "journal.ndjson", settings=JournalSettings(), key=key)
    _assert_whole(read, 2000 + processes * rounds * 25)
    names = {event.action_id for event in read.events if hasattr(event, "action_id")}
    assert len(names) == 2000 + processes * rounds * 20


def test_many_trio_tasks_with_their_own_writers_interleave_into_one_whole_journal(tmp_path: Path) -> None:
    """Twenty tasks in one process, each with its own writer, yielding between appends: one whole chain."""
    key = load_journal_key(tmp_path, create=True)
    path = tmp_path / "journal.ndjson"
    settings = JournalSettings.model_validate({"fsync": "never"})

    async def task(name: str) -> None:
        with JournalWriter(path, session_id=SESSION, settings=settings, key=key) as journal:
            await trio.lowlevel.checkpoint()
            journal.emit(SessionOpened())
            for index in range(50):
                await trio.lowlevel.checkpoint()
                journal.emit(prepared(f"{name}-{index}", "ls"))

    async def main() -> None:
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for n in range(20):
                    nursery.start_soon(task, f"t{n}")

    trio.run(main)
    _assert_whole(read_journal_file(path, settings=JournalSettings(), key=key), 20 * 51)


def test_trio_tasks_sharing_one_writer_and_threads_with_their_own_keep_one_chain(tmp_path: Path) -> None:
    """Tasks sharing a writer and worker threads with their own writers append concurrently without a break."""
    key = load_journal_key(tmp_path, create=True)
    path = tmp_path / "journal.ndjson"
    settings = JournalSettings.model_validate({"fsync": "never"})

    def thread_writer(name: str) -> None:
        with JournalWriter(path, session_id=SESSION, settings=settings, key=key) as journal:
            for index in range(100):
                journal.emit(prepared(f"{name}-{index}", "ls"))

    async def main(shared: JournalWriter) -> None:
        async def task(name: str) -> None:
            for index in range(100):
                await trio.lowlevel.checkpoint()
                shared.emit(prepared(f"{name}-{index}", "ls"))

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for n in range(4):
                    nursery.start_soon(task, f"t{n}")
                    nursery.start_soon(trio.to_thread.run_sync, thread_writer, f"w{n}")

    with JournalWriter(path, session_id=SESSION, settings=settings, key=key) as shared:
        trio.run(main, shared)
    _assert_whole(read_journal_file(path, settings=JournalSettings(), key=key), 800)


def test_a_writer_learns_the_seq_of_every_event_kind_another_writer_appended(tmp_path: Path) -> None:
    """A judgment (whose JSON does not start with seq) appended by one writer is counted by the other."""
    key = load_journal_key(tmp_path, create=True)
    path = tmp_path / "journal.ndjson"
    with (
        JournalWriter(path, session_id=SESSION, settings=SETTINGS, key=key) as one,
        JournalWriter(path, session_id=SESSION, settings=SETTINGS, key=key) as two,
    ):
        for index in range(3):
            one.emit(judgment(f"j{index}", f"a{index}", {"risk": 1}))
            two.emit(prepared(f"b{index}", "ls"))
    _assert_whole(read_journal_file(path, settings=JournalSettings(), key=key), 6)
