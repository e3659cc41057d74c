"""A capture whose process is killed is finalised by the next process on the home: interrupted, bytes readable."""

from __future__ import annotations

import fcntl
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import trio

from executor.artifacts import ArtifactStore
from executor.config import JournalSettings
from executor.ids import new_session_id
from executor.journal import ArtifactInterrupted, interruption_journaler, load_journal_key, read_journal_file
from executor.testing.artifacts import artifact_settings

_CAPTURER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from executor.artifacts import ArtifactStore
    from executor.testing.artifacts import artifact_settings

    home, session_id, lines, publish = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
    store = ArtifactStore.open(home, artifact_settings(capture_max_bytes=int(sys.argv[5])))
    capture = store.session(session_id).begin(kind="bash", streams=("stdout", "stderr"))
    for n in range(1, lines + 1):
        capture.feed("stdout", f"line {n}\\n".encode())
        if publish and n == lines // 2:
            capture.flush()
    if sys.argv[6] == "1":
        capture.feed("stderr", b"oops\\n")
    print(capture.artifact_id, flush=True)
    if sys.argv[7] == "1":
        capture.finish(status="ok")
        print("finished", flush=True)
    time.sleep(600)  # killed by the test long before
    """
)


def _start(
    home: Path,
    session_id: str,
    *,
    lines: int,
    publish: bool,
    cap: int = 1_000_000,
    stderr: bool = True,
    finish: bool = False,
) -> tuple[str, object]:
    repo = Path(__file__).resolve().parents[2]
    flags = ["1" if flag else "0" for flag in (stderr, finish)]
    child = subprocess.Popen(
        [sys.executable, "-c", _CAPTURER, str(home), session_id, str(lines), "1" if publish else "0", str(cap), *flags],
        cwd=repo,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    artifact_id = child.stdout.readline().strip()
    assert artifact_id.startswith(session_id), "the capturing process did not start"
    if finish:
        assert child.stdout.readline().strip() == "finished", "the capturing process did not finish"
    return artifact_id, child


def _kill(child: object) -> None:
    assert isinstance(child, subprocess.Popen)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=30)
    if child.stdout is not None:
        child.stdout.close()


def test_a_killed_capture_is_finalised_as_interrupted_with_every_byte_readable(home: Path) -> None:
    """SIGKILL mid-capture: the next open marks it interrupted, reads and searches see all the bytes, once."""
    session_id = new_session_id()
    artifact_id, child = _start(home, session_id, lines=5000, publish=False)
    seen: list[tuple[str, str, int, str]] = []
    try:
        with ArtifactStore.open(home, artifact_settings(), on_interrupted=lambda *a: seen.append(a)) as store:
            assert store.session(session_id).record(artifact_id).status == "running"  # its owner is alive
        assert seen == []
    finally:
        _kill(child)
    with ArtifactStore.open(home, artifact_settings(), on_interrupted=lambda *a: seen.append(a)) as store:
        artifacts = store.session(session_id)
        record = artifacts.record(artifact_id)
        assert record.status == "interrupted"
        assert record.streams["stdout"].lines == 5000 and not record.streams["stdout"].growing
        assert record.streams["stderr"].bytes_total == len(b"oops\n")
        assert "ended before finishing it" in record.meta["interrupted"]
        page = artifacts.read_output(artifact_id, start_line=4999, line_count=5)
        assert page.data == b"line 4999\nline 5000\n" and page.end_line == 5000
        found = trio.run(lambda: artifacts.search_output(artifact_id, pattern=r"^line 4321$", limit=5))
        assert [m.line for m in found.matches] == [4321]
    assert len(seen) == 1
    assert seen[0][:2] == (session_id, artifact_id) and seen[0][2] == record.streams["stdout"].bytes_stored + 5
    with ArtifactStore.open(home, artifact_settings(), on_interrupted=lambda *a: seen.append(a)):
        pass
    assert len(seen) == 1  # finalised once


def test_a_killed_capture_past_its_cap_keeps_its_head(home: Path) -> None:
    """A capture that had wrapped its tail ring when killed keeps its head exactly and reads without error."""
    session_id = new_session_id()
    artifact_id, child = _start(home, session_id, lines=20_000, publish=True, cap=16_384)
    _kill(child)
    with ArtifactStore.open(home, artifact_settings(capture_max_bytes=16_384)) as store:
        artifacts = store.session(session_id)
        assert artifacts.record(artifact_id).status == "interrupted"
        page = artifacts.read_output(artifact_id, start_line=1, line_count=3)
        assert page.data == b"line 1\nline 2\nline 3\n"


def test_the_interruption_is_journaled_in_the_sessions_journal(home: Path) -> None:
    """The journaler appends a signed artifact_interrupted event to the session's own journal."""
    session_id = new_session_id()
    artifact_id, child = _start(home, session_id, lines=10, publish=False)
    _kill(child)
    journaler = interruption_journaler(home, JournalSettings())
    with ArtifactStore.open(home, artifact_settings(), on_interrupted=journaler):
        pass
    path = home / "sessions" / session_id / "journal.ndjson"
    read = read_journal_file(path, settings=JournalSettings(), key=load_journal_key(home, create=False))
    assert read.verification == "verified" and read.issues == ()
    [event] = read.events
    assert isinstance(event, ArtifactInterrupted)
    assert (
        event.artifact_id == artifact_id
        and event.bytes_kept == len(b"".join(f"line {n}\n".encode() for n in range(1, 11))) + 5
    )


def test_a_killed_capture_with_an_empty_stream_reads_it_as_empty(home: Path) -> None:
    """A stream that had received no byte when its process was killed (so has no file) is recovered as empty."""
    session_id = new_session_id()
    artifact_id, child = _start(home, session_id, lines=3, publish=False, stderr=False)
    folder = home / "sessions" / session_id / "artifacts" / artifact_id
    assert sorted(p.name for p in folder.iterdir()) == ["stdout.part"]
    _kill(child)
    with ArtifactStore.open(home, artifact_settings()) as store:
        artifacts = store.session(session_id)
        record = artifacts.record(artifact_id)
        assert record.status == "interrupted"
        assert record.streams["stdout"].lines == 3 and record.streams["stderr"].bytes_total == 0
        assert artifacts.read_output(artifact_id, stream="stdout").data == b"line 1\nline 2\nline 3\n"
        page = artifacts.read_output(artifact_id, stream="stderr")
        assert page.empty_source and page.complete
    assert list((home / "owners").iterdir()) == []  # the dead owner's file went with its last capture


def test_the_owner_file_of_a_process_killed_between_captures_is_removed(home: Path) -> None:
    """A process killed after finishing its captures leaves an unlocked owner file; the next open removes it and
    finalises nothing."""
    session_id = new_session_id()
    artifact_id, child = _start(home, session_id, lines=3, publish=False, finish=True)
    assert len(list((home / "owners").iterdir())) == 1
    _kill(child)
    seen: list[tuple[str, str, int, str]] = []
    with ArtifactStore.open(home, artifact_settings(), on_interrupted=lambda *a: seen.append(a)) as store:
        assert store.session(session_id).record(artifact_id).status == "ok"
    assert seen == [] and list((home / "owners").iterdir()) == []


def test_a_second_store_in_the_same_process_leaves_a_live_capture_alone(home: Path) -> None:
    """The owner lock is per store: another store opened by the same process sees the capture as live."""
    with ArtifactStore.open(home, artifact_settings()) as first:
        session = first.session(new_session_id())
        capture = session.begin(kind="bash", streams=("stdout",))
        capture.feed("stdout", b"still going\n")
        with ArtifactStore.open(home, artifact_settings()) as second:
            assert second.session(session.session_id).record(capture.artifact_id).status == "running"
        assert capture.finish(status="ok").status == "ok"


def test_a_capture_begun_with_a_folder_owner_file_is_still_recovered(home: Path) -> None:
    """An artifact left running by an earlier version (its owner file in its folder, no owner token) is finalised
    when that file is unlocked, and left alone while a process holds it."""
    session_id = new_session_id()
    with ArtifactStore.open(home, artifact_settings()) as store:
        session = store.session(session_id)
        dead, alive = (session.begin(kind="bash", streams=("stdout",)) for _ in range(2))
        for capture in (dead, alive):
            capture.feed("stdout", b"old style\n")
            capture.flush()
    conn = sqlite3.connect(home / "artifacts.sqlite3")
    conn.execute("UPDATE artifacts SET owner = NULL")
    conn.commit()
    conn.close()
    folders = home / "sessions" / session_id / "artifacts"
    (folders / dead.artifact_id / "owner").write_text('{"pid": 1, "cap": 1000000}')
    held = os.open(folders / alive.artifact_id / "owner", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with ArtifactStore.open(home, artifact_settings()) as store:
            artifacts = store.session(session_id)
            assert artifacts.record(dead.artifact_id).status == "interrupted"
            assert artifacts.read_output(dead.artifact_id).data == b"old style\n"
            assert artifacts.record(alive.artifact_id).status == "running"
        assert not (folders / dead.artifact_id / "owner").exists()
    finally:
        os.close(held)
