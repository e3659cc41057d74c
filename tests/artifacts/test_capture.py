"""The capture writer: head and tail past the cap, exact drop accounting, true line numbers, growing reads."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from executor.artifacts import ArtifactStore, SessionArtifacts
from executor.errors import ArtifactError, StreamNotFound
from executor.ids import new_session_id
from executor.testing.artifacts import artifact_settings, open_session, store_bytes


def test_under_the_cap_everything_is_kept(session: SessionArtifacts) -> None:
    """A stream below the cap is stored whole and reported complete, not truncated."""
    artifact_id = store_bytes(session, b"one\ntwo\nthree")
    info = session.record(artifact_id).streams["output"]
    assert (info.bytes_total, info.bytes_stored, info.lines, info.truncated) == (13, 13, 3, False)
    page = session.read_output(artifact_id)
    assert page.text == "one\ntwo\nthree" and page.complete


def test_past_the_cap_head_and_tail_are_kept_with_true_line_numbers() -> None:
    """Past the cap the first and last halves are kept, the drop is exact, and tail lines keep their numbers."""
    data = b"".join(b"line %05d\n" % i for i in range(1, 1001))  # 11 bytes a line
    with open_session(capture_max_bytes=1100) as session:
        artifact_id = store_bytes(session, data, chunk=97)
        info = session.record(artifact_id).streams["output"]
        assert info.truncated and info.bytes_total == len(data) and info.bytes_stored == 1100
        assert info.dropped_bytes == len(data) - 1100 and info.dropped_at == 550
        assert info.dropped_from_line == 51  # byte 550 is the first byte of line 51
        assert info.resumes_at_line == 951  # the tail holds the last 50 lines, 951..1000
        assert info.lines == 1000
        tail = session.read_output(artifact_id, start_line=990, line_count=3)
        assert tail.text == "line 00990\nline 00991\nline 00992\n"
        assert tail.truncated_capture and not tail.complete
        dropped = session.read_output(artifact_id, start_line=300, line_count=1)
        assert dropped.gap_before and dropped.start_line == 951


def test_a_cut_inside_a_line_keeps_true_in_line_offsets() -> None:
    """A line cut by the cap is paged as byte ranges whose offsets are true ones on both sides of the gap."""
    data = b"a" * 5000 + b"\nlast\n"
    with open_session(capture_max_bytes=2000) as session:
        artifact_id = store_bytes(session, data, chunk=333)
        head = session.read_output(artifact_id, start_line=1)
        assert (head.start_byte_in_line, head.end_byte_in_line) == (0, 1000)
        assert (head.next_start_line, head.next_start_byte_in_line) == (1, 5000 + 6 - 1000 - 0)
        tail = session.read_output(artifact_id, start_line=1, start_byte_in_line=head.next_start_byte_in_line)
        assert tail.data == b"a" * 994 + b"\n" and tail.start_line == 1
        assert session.read_output(artifact_id, start_line=2).text == "last\n"


def test_the_result_does_not_depend_on_how_bytes_arrive() -> None:
    """Feeding byte by byte or all at once stores the same bytes and the same record."""
    data = b"".join(b"%d\xc3\xa9\n" % i for i in range(800))
    results = []
    for chunk in (1, 7, len(data)):
        with open_session(capture_max_bytes=1024) as session:
            artifact_id = store_bytes(session, data, chunk=chunk)
            info = session.record(artifact_id).streams["output"]
            pages = []
            position: tuple[int | None, int | None] = (1, None)
            while position[0] is not None:
                page = session.read_output(artifact_id, start_line=position[0], start_byte_in_line=position[1])
                pages.append(page.data)
                position = (page.next_start_line, page.next_start_byte_in_line)
            results.append((info.model_dump(), b"".join(pages)))
    assert results[0] == results[1] == results[2]


def test_a_running_capture_reads_as_growing(session: SessionArtifacts) -> None:
    """A background task's stream is readable before it finishes and says it is still growing."""
    capture = session.begin(kind="task", streams=("stdout", "stderr"))
    capture.feed("stdout", b"first\nsecond\npart")
    page = session.read_output(capture.artifact_id)
    assert page.text == "first\nsecond\n" and page.growing and not page.complete
    assert (page.next_start_line, page.next_start_byte_in_line) == (3, None)
    partial = session.read_output(capture.artifact_id, start_line=3)
    assert partial.data == b"part" and partial.growing
    capture.feed("stdout", b"ial\n")
    rest = session.read_output(
        capture.artifact_id, start_line=partial.next_start_line or 0, start_byte_in_line=partial.next_start_byte_in_line
    )
    assert rest.data == b"ial\n"
    assert session.record(capture.artifact_id).status == "running"
    record = capture.finish(status="ok")
    assert record.status == "ok" and not record.streams["stdout"].growing
    assert session.read_output(capture.artifact_id, start_line=3).complete


def test_a_running_capture_past_the_cap_reads_its_current_tail() -> None:
    """While running and already truncated, reads see the head and the newest tail bytes in order."""
    with open_session(capture_max_bytes=1024) as session:
        capture = session.begin(kind="task", streams=("output",))
        for i in range(1, 301):
            capture.feed("output", b"n%04d\n" % i)
        info = session.record(capture.artifact_id).streams["output"]
        assert info.truncated and info.growing
        page = session.read_output(capture.artifact_id, start_line=300)
        assert page.text == "n0300\n" and page.growing


def test_empty_streams_are_stored_and_distinct(session: SessionArtifacts) -> None:
    """An empty result is still an artifact; reading it says empty source, never a bare no-output."""
    capture = session.begin(kind="bash", streams=("stdout", "stderr"))
    artifact_id = capture.finish(status="error").id
    page = session.read_output(artifact_id, stream="stderr")
    assert page.empty_source and page.complete and page.data == b""
    assert session.record(artifact_id).streams["stdout"].lines == 0


def test_files_live_under_the_session_folder(session: SessionArtifacts, home: Path) -> None:
    """Stream files sit at sessions/<session>/artifacts/<artifact>/<stream>, whitespace preserved."""
    artifact_id = store_bytes(session, b"  spaced \t\n\n", stream="stdout")
    path = home / "sessions" / session.session_id / "artifacts" / artifact_id / "stdout"
    assert path.read_bytes() == b"  spaced \t\n\n"
    assert not path.with_name("stdout.part").exists()


def test_undeclared_streams_and_finished_captures_refuse_bytes(session: SessionArtifacts) -> None:
    """Feeding an undeclared stream or a finished capture raises instead of losing bytes silently."""
    capture = session.begin(kind="bash", streams=("stdout",))
    with pytest.raises(StreamNotFound, match="no stream 'stderr'"):
        capture.feed("stderr", b"x")
    capture.finish(status="ok")
    with pytest.raises(ArtifactError, match="is finished"):
        capture.feed("stdout", b"x")


def test_an_exception_finishes_the_capture_as_error(session: SessionArtifacts) -> None:
    """Leaving the capture's with-block by an exception records status error, output kept."""
    with pytest.raises(RuntimeError), session.begin(kind="bash", streams=("stdout",)) as capture:
        capture.feed("stdout", b"partial\n")
        raise RuntimeError("boom")
    record = session.record(capture.artifact_id)
    assert record.status == "error" and record.streams["stdout"].bytes_total == 8


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs of its own (root only), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True, timeout=30, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, timeout=30, check=False)


def test_a_full_disk_at_finish_keeps_the_wrapped_ring_readable(tiny_fs: Path) -> None:
    """With no room to lay a wrapped stream out, finishing keeps its ring file in place: head and tail stay
    readable with true line numbers, and nothing is counted that is not on disk."""
    data = b"".join(b"line %06d\n" % i for i in range(1, 20_001))  # 12 bytes a line
    with ArtifactStore.open(tiny_fs / "home", artifact_settings(capture_max_bytes=120_000)) as store:
        session = store.session(new_session_id())
        capture = session.begin(kind="test", streams=("output",))
        for i in range(0, len(data), 4096):
            capture.feed("output", data[i : i + 4096])
        stats = os.statvfs(tiny_fs)
        (tiny_fs / "filler").write_bytes(b"\0" * (stats.f_bavail * stats.f_frsize - 16 * 1024))
        record = capture.finish(status="ok")
        folder = tiny_fs / "home" / "sessions" / session.session_id / "artifacts" / record.id
        assert sorted(p.name for p in folder.iterdir()) == ["output.idx", "output.part"]
        info = record.streams["output"]
        assert info.truncated and info.bytes_total == len(data) and info.bytes_stored == 120_000
        head = session.read_output(record.id, start_line=1, line_count=2)
        assert (head.start_line, head.text) == (1, "line 000001\nline 000002\n")
        tail = session.read_output(record.id, start_line=19_999, line_count=5)
        assert (tail.start_line, tail.text) == (19_999, "line 019999\nline 020000\n")
        found = trio.run(lambda: session.search_output(record.id, pattern="line 0199[0-9]8", limit=20))
        assert [m.line for m in found.matches] == [19_908 + 10 * k for k in range(10)]


def test_a_stream_that_stays_empty_has_no_file(session: SessionArtifacts, home: Path) -> None:
    """Nothing is made on disk for an empty stream: an artifact whose streams stay empty has no folder at all, yet
    it reads back as empty, live and finished, here and through another store on the home."""
    capture = session.begin(kind="bash", streams=("stdout", "stderr"))
    folder = home / "sessions" / session.session_id / "artifacts" / capture.artifact_id
    assert session.read_output(capture.artifact_id, stream="stdout").empty_source
    assert not folder.exists()
    record = capture.finish(status="ok")
    assert not folder.exists()
    assert {n: (i.bytes_total, i.lines, i.growing) for n, i in record.streams.items()} == {
        "stdout": (0, 0, False),
        "stderr": (0, 0, False),
    }
    with ArtifactStore.open(home, artifact_settings()) as other:
        theirs = other.session(session.session_id)
        for stream in ("stdout", "stderr"):
            page = theirs.read_output(record.id, stream=stream)
            assert page.empty_source and page.complete and page.data == b""
            assert theirs.read_bytes(record.id, stream=stream) == (b"", 0, 0)
        found = trio.run(lambda: theirs.search_output(record.id, pattern="x", limit=1))
        assert found.empty_source and found.matches == ()
        assert theirs.record(record.id) == record


def test_only_the_streams_that_received_bytes_have_files(session: SessionArtifacts, home: Path) -> None:
    """A stream's file appears with its first byte; a short stream has no line index file, a long one has."""
    capture = session.begin(kind="bash", streams=("stdout", "stderr", "long"))
    capture.feed("stdout", b"")
    capture.feed("stderr", b"warning\n")
    folder = home / "sessions" / session.session_id / "artifacts" / capture.artifact_id
    assert sorted(p.name for p in folder.iterdir()) == ["stderr.part"]
    lines = b"".join(b"line %06d\n" % i for i in range(1, 20_001))  # 240 kB: past a few checkpoint intervals
    capture.feed("long", lines)
    record = capture.finish(status="ok")
    assert sorted(p.name for p in folder.iterdir()) == ["long", "long.idx", "stderr"]
    assert (folder / "stderr").read_bytes() == b"warning\n"
    assert record.streams["stdout"].bytes_total == 0 and session.read_output(record.id, stream="stdout").empty_source
    page = session.read_output(record.id, stream="long", start_line=15_000, line_count=2)
    assert page.data == b"line 015000\nline 015001\n"


def test_a_wrapped_stream_leaves_only_its_laid_out_file(home: Path) -> None:
    """Finishing a stream past its cap rotates it into place: no ring file or temporary file stays behind."""
    with ArtifactStore.open(home, artifact_settings(capture_max_bytes=100_000)) as store:
        session = store.session(new_session_id())
        artifact_id = store_bytes(session, b"".join(b"%07d\n" % i for i in range(100_000)), chunk=65536)
        folder = home / "sessions" / session.session_id / "artifacts" / artifact_id
        assert sorted(p.name for p in folder.iterdir()) == ["output", "output.idx"]
        assert (folder / "output").stat().st_size == 100_000
        assert session.read_output(artifact_id, start_line=100_000).data == b"0099999\n"
