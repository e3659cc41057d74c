"""read_output paging: exact round trip, true positions, whole lines, byte ranges that never split a code point."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from executor.artifacts import ReadPage, SessionArtifacts
from executor.artifacts.paging import CheckpointTracker, Layout, MemorySource, byte_page, read_page, safe_cut
from executor.errors import OutputRangeError
from executor.testing.artifacts import open_session, store_bytes

_PIECES = st.sampled_from([b"\n", b"a", b"xyz ", "é".encode(), "€".encode(), "😀".encode(), b"\xff", b"\x80", b"\r\n"])
_CONTENT = st.lists(st.one_of(_PIECES, st.binary(max_size=40)), max_size=400).map(b"".join)


def _all_pages(session: SessionArtifacts, artifact_id: str, *, budget: int, lines: int) -> list[ReadPage]:
    pages = []
    position: tuple[int | None, int | None] = (1, None)
    while position[0] is not None:
        page = session.read_output(
            artifact_id, start_line=position[0], start_byte_in_line=position[1], line_count=lines, budget_chars=budget
        )
        pages.append(page)
        assert len(pages) < 100_000
        position = (page.next_start_line, page.next_start_byte_in_line)
    return pages


def _expected_stored(data: bytes, cap: int) -> tuple[bytes, int]:
    if len(data) <= cap:
        return data, 0
    head, tail = cap - cap // 2, cap // 2
    return data[:head] + data[len(data) - tail :], len(data) - cap


@settings(max_examples=40, deadline=None)
@given(
    data=_CONTENT,
    cap=st.integers(1024, 3000),
    budget=st.integers(16, 600),
    lines=st.integers(1, 50),
    chunk=st.integers(1, 700),
)
def test_pages_reproduce_the_stored_stream_exactly(data: bytes, cap: int, budget: int, lines: int, chunk: int) -> None:
    """Concatenating every page reproduces the kept bytes, each page at its true line and in-line offset."""
    with open_session(capture_max_bytes=cap) as session:
        artifact_id = store_bytes(session, data, chunk=chunk)
        pages = _all_pages(session, artifact_id, budget=budget, lines=lines)
    stored, dropped = _expected_stored(data, cap)
    assert b"".join(p.data for p in pages) == stored
    head_len = cap - cap // 2
    stored_pos = 0
    for page in pages:
        true_pos = stored_pos if (dropped == 0 or stored_pos < head_len) else stored_pos + dropped
        if page.data:
            assert page.start_line == data.count(b"\n", 0, true_pos) + 1
            if page.start_byte_in_line is not None:
                assert page.start_byte_in_line == true_pos - (data.rfind(b"\n", 0, true_pos) + 1)
            assert len(page.text) <= budget
        stored_pos += len(page.data)
    assert pages[-1].complete is (dropped == 0)
    assert all(p.truncated_capture is (dropped > 0) for p in pages)


@settings(max_examples=60, deadline=None)
@given(data=_CONTENT, budget=st.integers(16, 300))
def test_no_page_splits_a_code_point(data: bytes, budget: int) -> None:
    """Decoding page by page gives the same text as decoding the whole stream."""
    layout = Layout.whole(data)
    source = MemorySource(data)
    texts = []
    position: tuple[int | None, int | None] = (1, None)
    while position[0] is not None:
        page = read_page(
            source,
            layout,
            artifact_id="a",
            stream="s",
            start_line=position[0],
            start_byte_in_line=position[1],
            line_count=1000,
            budget_chars=budget,
        )
        texts.append(page.data.decode("utf-8", "surrogateescape"))
        position = (page.next_start_line, page.next_start_byte_in_line)
    assert "".join(texts) == data.decode("utf-8", "surrogateescape")


def test_a_complete_code_point_ending_at_the_window_end_stays() -> None:
    """A multi-byte character that ends exactly at the cut is kept; one that straddles it moves to the next page."""
    data = b"ab" + "€".encode() + b"cd"  # the euro sign is bytes 2..4
    assert safe_cut(data, 5) == 5
    assert safe_cut(data, 4) == 2
    assert safe_cut(data, 3) == 2
    assert safe_cut(b"ab\xff\xfecd", 3) == 3


def test_an_oversized_line_falls_back_to_byte_ranges() -> None:
    """A line larger than the budget is paged as byte ranges with a startByteInLine continuation."""
    line = ("é" * 300).encode() + b"\n"
    data = b"short\n" + line + b"end\n"
    layout, source = Layout.whole(data), MemorySource(data)
    first = read_page(
        source,
        layout,
        artifact_id="a",
        stream="s",
        start_line=1,
        start_byte_in_line=None,
        line_count=10,
        budget_chars=100,
    )
    assert (first.start_line, first.end_line, first.text) == (1, 1, "short\n")
    assert (first.next_start_line, first.next_start_byte_in_line) == (2, None)
    second = read_page(
        source,
        layout,
        artifact_id="a",
        stream="s",
        start_line=2,
        start_byte_in_line=None,
        line_count=10,
        budget_chars=100,
    )
    assert second.start_byte_in_line == 0
    assert second.end_byte_in_line == 200  # 100 characters of two bytes each
    assert (second.next_start_line, second.next_start_byte_in_line) == (2, 200)
    assert not second.complete


def test_whole_lines_respect_line_count_and_budget() -> None:
    """A page holds whole lines only, at most line_count of them and within the character budget."""
    data = b"".join(b"%03d\n" % i for i in range(1, 101))
    layout, source = Layout.whole(data), MemorySource(data)
    page = read_page(
        source,
        layout,
        artifact_id="a",
        stream="s",
        start_line=5,
        start_byte_in_line=None,
        line_count=3,
        budget_chars=1000,
    )
    assert (page.start_line, page.end_line, page.text) == (5, 7, "005\n006\n007\n")
    page = read_page(
        source,
        layout,
        artifact_id="a",
        stream="s",
        start_line=1,
        start_byte_in_line=None,
        line_count=1000,
        budget_chars=22,
    )
    assert (page.end_line, page.next_start_line) == (5, 6)


def test_past_the_end_is_its_own_outcome() -> None:
    """A start line past the end of a finished stream is reported as past the end, not as empty output."""
    layout, source = Layout.whole(b"a\nb\n"), MemorySource(b"a\nb\n")
    page = read_page(
        source,
        layout,
        artifact_id="a",
        stream="s",
        start_line=9,
        start_byte_in_line=None,
        line_count=5,
        budget_chars=100,
    )
    assert page.past_end and not page.empty_source and page.data == b""


def test_a_byte_offset_past_its_line_is_rejected() -> None:
    """startByteInLine beyond the end of its line raises OutputRangeError naming the line."""
    layout, source = Layout.whole(b"abc\ndef\n"), MemorySource(b"abc\ndef\n")
    with pytest.raises(OutputRangeError, match="past the end of line 1"):
        read_page(
            source,
            layout,
            artifact_id="a",
            stream="s",
            start_line=1,
            start_byte_in_line=9,
            line_count=5,
            budget_chars=100,
        )
    with pytest.raises(OutputRangeError, match="at least 1"):
        read_page(
            source,
            layout,
            artifact_id="a",
            stream="s",
            start_line=0,
            start_byte_in_line=None,
            line_count=5,
            budget_chars=100,
        )


def test_checkpoints_mark_true_line_starts() -> None:
    """Every checkpoint is the start of the line it names, and one exists per interval."""
    data = b"".join(b"line %d\n" % i for i in range(1, 40_000))
    tracker = CheckpointTracker(base=0, first_line=1)
    for i in range(0, len(data), 1000):
        tracker.feed(data[i : i + 1000])
    assert len(tracker.found) >= len(data) // (64 * 1024) - 1
    for offset, line in tracker.found:
        assert data[offset - 1 : offset] == b"\n"
        assert data.count(b"\n", 0, offset) + 1 == line


def test_reads_far_into_a_large_stream_use_the_index(session: SessionArtifacts) -> None:
    """A page deep inside a multi-megabyte artifact starts at the right true line."""
    data = b"".join(b"row %d\n" % i for i in range(1, 400_001))
    capture = session.begin(kind="test", streams=("output",))
    for i in range(0, len(data), 65536):
        capture.feed("output", data[i : i + 65536])
    artifact_id = capture.finish(status="ok").id
    # Default cap keeps head and tail only; ask for a line in the tail.
    record = session.record(artifact_id)
    line = record.streams["output"].lines - 5
    page = session.read_output(artifact_id, start_line=line, line_count=2)
    assert page.text == f"row {line}\nrow {line + 1}\n"


def _follow_bytes(data: bytes, *, budget: int, max_bytes: int) -> list[bytes]:
    """The pages of ``data`` (an ended stream) read from offset 0 by byte_page, each read ``max_bytes`` long."""
    pages, offset = [], 0
    while offset < len(data):
        read = data[offset : offset + max_bytes]
        count = byte_page(read, budget_chars=budget, more=offset + len(read) < len(data))
        assert 0 < count <= len(read)
        pages.append(read[:count])
        offset += count
    return pages


@settings(max_examples=300, deadline=None)
@given(content=_CONTENT, budget=st.integers(16, 200), max_bytes=st.integers(1, 2000))
def test_task_pages_show_every_byte_once_within_the_budget(content: bytes, budget: int, max_bytes: int) -> None:
    """Pages cut by byte_page and followed by their lengths rebuild the stream exactly, each within the budget."""
    pages = _follow_bytes(content, budget=budget, max_bytes=max_bytes)
    assert b"".join(pages) == content
    assert all(len(page.decode("utf-8", "backslashreplace")) <= budget for page in pages)


def test_a_task_page_stops_after_a_line_or_between_characters() -> None:
    """Over the budget a page ends after its last whole line that fits; a first line longer than the budget is cut
    between characters; under it every byte read is shown, less a character that more bytes will complete."""
    lines = b"".join(b"%d\n" % n for n in range(1, 3001))
    assert byte_page(lines, budget_chars=100, more=False) == lines.rfind(b"\n", 0, 100) + 1
    euro = "€".encode() * 100
    cut = byte_page(euro, budget_chars=16, more=True)
    assert cut == 48 and euro[:cut].decode() == "€" * 16
    assert byte_page(b"ab" + euro[:2], budget_chars=16, more=True) == 2
    assert byte_page(b"ab" + euro[:2], budget_chars=16, more=False) == 4
    assert byte_page(euro[:2], budget_chars=16, more=True) == 2  # never an empty page of bytes read
    assert byte_page(b"", budget_chars=16, more=True) == 0
    wide = b"\x01" * 40
    assert byte_page(wide, budget_chars=16, more=False, measure=lambda data: 4 * len(data)) == 4
    with pytest.raises(ValueError, match="budget_chars must be at least 16"):
        byte_page(b"x", budget_chars=15, more=False)
