"""The artifact settings: each field's default, its effect (tested where the behaviour is) and its rejection."""

from __future__ import annotations

from typing import Any

import pytest

from executor.config import load_settings
from executor.errors import ConfigError
from executor.testing.artifacts import open_session, store_bytes


def test_defaults() -> None:
    """The defaults are the documented ones."""
    a = load_settings().artifacts
    assert (a.capture_max_bytes, a.display_max_chars, a.view_head_lines, a.read_page_lines) == (256_000, 8_000, 10, 200)
    assert (a.journal_mode, a.session_max_bytes, a.session_max_artifacts) == ("wal", 512 * 1024**2, 10_000)
    assert (a.tombstone_horizon_s, a.search_timeout_s, a.scan_max_chars) == (7 * 86_400.0, 1.0, 1_000_000)
    assert (a.line_ceiling_chars, a.pattern_max_chars, a.busy_timeout_s) == (16_000_000, 1_000, 10.0)
    assert a.pattern_max_expansion == 20_000


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("capture_max_bytes", 100),
        ("display_max_chars", 10),
        ("view_head_lines", -1),
        ("read_page_lines", 0),
        ("journal_mode", "memory"),
        ("session_max_bytes", 10),
        ("session_max_artifacts", 0),
        ("tombstone_horizon_s", -1),
        ("search_timeout_s", 0),
        ("scan_max_chars", 10),
        ("line_ceiling_chars", 10),
        ("pattern_max_chars", 0),
        ("pattern_max_expansion", 99),
        ("pattern_max_expansion", 10_000_001),
        ("busy_timeout_s", 0),
        ("busy_timeout_s", 601),
    ],
)
def test_bad_values_are_rejected_at_load(field: str, value: Any) -> None:
    """An out-of-range value raises ConfigError naming the field."""
    with pytest.raises(ConfigError, match=rf"artifacts\.{field}"):
        load_settings(overrides={"artifacts": {field: value}})


def test_capture_max_bytes_accepts_sizes() -> None:
    """The capture cap takes size strings and sets how much of a stream is kept."""
    with open_session(capture_max_bytes="2k") as session:
        artifact_id = store_bytes(session, b"x" * 5000)
        assert session.record(artifact_id).streams["output"].bytes_stored == 2048


def test_display_budget_and_read_page_lines_bound_a_page() -> None:
    """display_max_chars bounds a page's characters and read_page_lines its default line count."""
    with open_session(display_max_chars=300, read_page_lines=3) as session:
        artifact_id = store_bytes(session, b"".join(b"%09d\n" % i for i in range(100)))
        assert session.read_output(artifact_id).end_line == 3
        assert len(session.read_output(artifact_id, line_count=1000).text) == 300


async def test_pattern_max_expansion_bounds_what_a_pattern_unrolls() -> None:
    """pattern_max_expansion refuses a short pattern whose nested counted repeats would unroll past it (compiling
    (?:a{1000}){3000} took seconds and gigabytes on the event loop); raising it admits the pattern, and ranges from 0,
    which unroll nothing, stay accepted."""
    from executor.errors import PatternError

    with open_session(pattern_max_expansion=1_000) as session:
        artifact_id = store_bytes(session, b"aaaa\n" * 3)
        with pytest.raises(PatternError, match=r"artifacts\.pattern_max_expansion"):
            await session.search_output(artifact_id, pattern="(?:a{10}){101}", limit=1)
        with pytest.raises(PatternError, match="more than 1000"):
            await session.search_output(artifact_id, pattern="(?:a{1000,}){2}?", limit=1)
        assert (await session.search_output(artifact_id, pattern="(?:a{0,1000}){0,1000}", limit=5)).matches
        assert (await session.search_output(artifact_id, pattern="(?:a{2}){2}", limit=5)).matches
    with open_session(pattern_max_expansion=2_000) as session:
        artifact_id = store_bytes(session, b"aaaa\n")
        assert not (await session.search_output(artifact_id, pattern="(?:a{10}){101}", limit=1)).matches
    with open_session() as session:
        artifact_id = store_bytes(session, b"aaaa\n")
        with pytest.raises(PatternError, match="more than 20000"):
            await session.search_output(artifact_id, pattern="(?:a{1000}){3000}", limit=1)


async def test_pattern_max_chars_bounds_patterns() -> None:
    """pattern_max_chars sets the longest pattern accepted."""
    from executor.errors import PatternError

    with open_session(pattern_max_chars=3) as session:
        artifact_id = store_bytes(session, b"abcd\n")
        assert len((await session.search_output(artifact_id, pattern="abc", limit=1)).matches) == 1
        with pytest.raises(PatternError, match="at most 3"):
            await session.search_output(artifact_id, pattern="abcd", limit=1)
