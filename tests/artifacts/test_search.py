"""search_output: whole lines only, a time bound off the event loop, separate budgets and an exact receipt."""

from __future__ import annotations

import pytest
import regex
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from executor.artifacts import SearchPage, SessionArtifacts
from executor.errors import OutputRangeError, PatternError, PatternTimeout
from executor.testing.artifacts import open_session, store_bytes

_PATTERNS = st.sampled_from(["ab", "^x", "y$", "é+", "a.*b", r"(?<=a)b", r"\Ax", r"b\b", r"\s$", r"^$", r"^"])
_LINES = st.lists(st.text(alphabet="abxy é\t", max_size=120), max_size=120)


async def _all_pages(session: SessionArtifacts, artifact_id: str, pattern: str, limit: int) -> list[SearchPage]:
    pages = []
    start: int | None = 1
    while start is not None:
        page = await session.search_output(artifact_id, pattern=pattern, limit=limit, start_line=start)
        pages.append(page)
        assert len(pages) < 10_000
        assert page.next_start_line is None or page.next_start_line > start
        start = page.next_start_line
    return pages


@settings(max_examples=40, deadline=None)
@given(
    lines=_LINES,
    pattern=st.sampled_from(["ab", "^x", "y$", "é+", "a.*b", r"(?<=a)b", r"\Ax", r"b\b", r"\s$", r"^$"]),
    limit=st.integers(1, 5),
)
async def test_resuming_from_receipts_reports_every_match_once(lines: list[str], pattern: str, limit: int) -> None:
    """Following next_start_line until the end yields exactly the matching lines, each once, in order."""
    data = "".join(line + "\n" for line in lines).encode()
    with open_session(display_max_chars=256, scan_max_chars=1000) as session:
        artifact_id = store_bytes(session, data, chunk=100)
        pages = await _all_pages(session, artifact_id, pattern, limit)
    found = [m.line for page in pages for m in page.matches]
    expected = [i for i, line in enumerate(lines, start=1) if regex.search(pattern, line)]
    assert found == expected
    assert pages[-1].complete


async def test_limit_bounds_the_page_and_the_receipt_keeps_withheld_matches(session: SessionArtifacts) -> None:
    """A page stopped by limit says page bounded and resumes right after its last delivered match."""
    artifact_id = store_bytes(session, b"hit 1\nhit 2\nmiss\nhit 4\n")
    page = await session.search_output(artifact_id, pattern="hit", limit=1)
    assert [m.line for m in page.matches] == [1]
    assert page.page_bounded and not page.scan_bounded and page.next_start_line == 2
    rest = await session.search_output(artifact_id, pattern="hit", limit=10, start_line=2)
    assert [m.line for m in rest.matches] == [2, 4] and rest.complete


async def test_the_scan_budget_stops_on_a_line_boundary_and_reports_what_was_scanned() -> None:
    """Past scan_max_chars the scan finishes its current line, says scan bounded and counts what it scanned."""
    data = b"".join(b"%s\n" % (b"z" * 99) for _ in range(30)) + b"needle\n"
    with open_session(scan_max_chars=1000) as session:
        artifact_id = store_bytes(session, data)
        page = await session.search_output(artifact_id, pattern="needle", limit=5)
        assert page.scan_bounded and not page.page_bounded and page.matches == ()
        assert (page.scanned_lines, page.scanned_chars, page.next_start_line) == (11, 1089, 12)
        later = await session.search_output(artifact_id, pattern="needle", limit=5, start_line=23)
        assert [m.line for m in later.matches] == [31]


async def test_a_line_in_progress_at_the_budget_is_finished() -> None:
    """A long line that starts below the scan budget is evaluated whole, so a match at its end is found."""
    data = b"short\n" + b"q" * 5000 + b"needle\n" + b"after\n"
    with open_session(scan_max_chars=1000) as session:
        artifact_id = store_bytes(session, data)
        page = await session.search_output(artifact_id, pattern="needle$", limit=5)
        assert [m.line for m in page.matches] == [2]
        assert page.scanned_chars == 5 + 5006 and page.next_start_line == 3


async def test_a_line_over_the_ceiling_is_unscannable_and_the_scan_goes_on() -> None:
    """A line over line_ceiling_chars is reported unscannable (undetermined) and later lines are still searched."""
    data = b"x" * 3000 + b"needle\n" + b"needle again\n"
    with open_session(line_ceiling_chars=1000) as session:
        artifact_id = store_bytes(session, data)
        page = await session.search_output(artifact_id, pattern="needle", limit=5)
        assert [(u.line, u.reason) for u in page.unscannable] == [(1, "too_long")]
        assert [m.line for m in page.matches] == [2]


async def test_fragments_cut_by_the_cap_are_never_evaluated() -> None:
    """The two halves of a line cut by the capture cap are reported unscannable, never matched piecewise."""
    data = b"start " + b"m" * 4000 + b" end\nnext end\n"
    with open_session(capture_max_bytes=1024) as session:
        artifact_id = store_bytes(session, data)
        page = await session.search_output(artifact_id, pattern="^start|end$", limit=5)
        assert [(u.line, u.reason) for u in page.unscannable] == [(1, "fragment"), (1, "fragment")]
        assert [m.line for m in page.matches] == [2]
        assert page.truncated_capture and not page.complete


async def test_a_match_on_a_huge_line_is_a_truncated_preview(session: SessionArtifacts) -> None:
    """A match whose line exceeds the page is delivered as a bounded preview, never as no matches."""
    artifact_id = store_bytes(session, b"y" * 20_000 + b"NEEDLE" + b"y" * 20_000 + b"\n")
    page = await session.search_output(artifact_id, pattern="NEEDLE", limit=3)
    (match,) = page.matches
    assert match.truncated and "NEEDLE" in match.text and len(match.text) <= 400
    assert match.spans == ((20_000, 20_006),)


async def test_a_redos_pattern_times_out_bounded_and_off_the_event_loop() -> None:
    """A catastrophic pattern raises PatternTimeout near the bound while the event loop keeps running."""
    data = b"a" * 5000 + b"b\n"
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await trio.sleep(0.01)
            ticks += 1

    with open_session(search_timeout_s=0.3) as session:
        artifact_id = store_bytes(session, data)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker)
            with pytest.raises(PatternTimeout, match=r"ran past the 0.3s search time bound at line 1"):
                await session.search_output(artifact_id, pattern=r"^(a|aa)+$", limit=1)
            nursery.cancel_scope.cancel()
        assert ticks >= 3  # the loop ran while the search did


async def test_bad_patterns_and_arguments_are_rejected(session: SessionArtifacts) -> None:
    """A pattern that does not compile, a too-long pattern and a zero limit are refused with their reason."""
    artifact_id = store_bytes(session, b"x\n")
    with pytest.raises(PatternError, match="does not compile"):
        await session.search_output(artifact_id, pattern="(", limit=1)
    with pytest.raises(PatternError, match="at most 1000"):
        await session.search_output(artifact_id, pattern="a" * 1001, limit=1)
    with pytest.raises(OutputRangeError, match="limit"):
        await session.search_output(artifact_id, pattern="x", limit=0)


async def test_a_growing_stream_is_searched_up_to_its_last_whole_line(session: SessionArtifacts) -> None:
    """While running, the unfinished last line is left for later and the page says growing."""
    capture = session.begin(kind="task", streams=("output",))
    capture.feed("output", b"hit\nhit but unfinished")
    page = await session.search_output(capture.artifact_id, pattern="hit", limit=5)
    assert [m.line for m in page.matches] == [1] and page.growing and page.next_start_line == 2
    capture.feed("output", b"\n")
    capture.finish(status="ok")
    rest = await session.search_output(capture.artifact_id, pattern="hit", limit=5, start_line=2)
    assert [m.line for m in rest.matches] == [2] and rest.complete


@pytest.mark.parametrize(
    ("pattern", "at_least"),
    [
        ("(?:a{1000}){3000}", 3_000_000),
        ("(?:a{1000,}){1000,}", 1_000_000),
        ("(?:a{100}){100,}?", 10_000),  # lazy: still unrolled
        ("(?:a{100}){100}+", 10_000),  # possessive: still unrolled
        ("a{5000}(?:(?:b{1000}){1000})", 1_005_000),  # a repeat before a group does not make it smaller
        ("a{5000}(?i:(?:b{1000}){1000})", 1_005_000),
        ("(?<n>a{10}){10}", 100),
        ("[{]{50}(?:x{40}){40}", 1_650),
        (r"\p{L}{300}", 300),
        ("(a|bc){10}", 30),
        ("[[](?:a{1000}){3000}", 3_000_000),  # '[[]' is one class in version 0 (not a set left open)
        ("(?:(?:a{1000})*){1000}", 1_000_000),  # a body repeated at least zero times is still compiled once
        ("(?:(?:a{1000}){0,1}){1000}", 1_000_000),
        ("(?x)(?:a{1000}) {1000}", 1_000_000),  # verbose: blanks, comments and blanks in braces are dropped
        ("(?x)(?:a{1000})#c\n{1000}", 1_000_000),
        ("(?x)(?:a{1000}){ 1000 }", 1_000_000),
        ("(?x)[#]\n(?:a{1000})#\n{1000}", 1_000_000),  # a '#' in a class starts no comment
    ],
)
def test_expansion_counts_what_compiling_unrolls(pattern: str, at_least: int) -> None:
    """Nested counted repeats multiply their minimum counts; nothing that unrolls is missed (lazy and possessive
    repeats, a group after a repeat, named groups and escapes with braces)."""
    from executor.artifacts.search import expansion

    assert expansion(pattern, ceiling=10**12) >= at_least


@pytest.mark.parametrize(
    ("pattern", "at_most"),
    [
        ("a{0,100000}", 5),
        ("(?:a{1000}){0,1000}", 1_010),
        ("(?:x{1000})*", 1_010),
        ("(?:x{1000})?", 1_010),
        ("x{,9}", 5),
    ],
)
def test_ranges_from_zero_are_compiled_once(pattern: str, at_most: int) -> None:
    """A repeat that may match zero times compiles its item once (the regex module loops over it): it is not
    multiplied by its maximum."""
    from executor.artifacts.search import expansion

    assert expansion(pattern, ceiling=10**12) <= at_most
