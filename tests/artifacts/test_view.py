"""The bounded view and rendered pages: head lines, a recovery notice, distinct outcomes, one present seam."""

from __future__ import annotations

import executor.artifacts as artifacts_pkg
from executor.artifacts import SessionArtifacts, bounded_view, render_read_page, render_search_page
from executor.artifacts.hints import CLI_HINTS
from executor.testing.artifacts import open_session, store_bytes


def test_the_view_shows_head_lines_and_how_to_recover_the_rest(session: SessionArtifacts) -> None:
    """The view holds the first view_head_lines lines and names the id, sizes and both recovery calls."""
    capture = session.begin(kind="bash", streams=("stdout", "stderr"))
    capture.feed("stdout", b"".join(b"out %d\n" % i for i in range(1, 51)))
    capture.feed("stderr", b"warning\n")
    record = capture.finish(status="ok")
    view = bounded_view(session, record.id)
    assert "out 10\n" in view and "out 11" not in view
    assert f"artifact {record.id}" in view
    assert "stdout: 341 bytes, 50 lines" in view and "stderr: 8 bytes, 1 line" in view
    assert f'more: read_output(artifact_id="{record.id}", stream="stdout", start_line=11)' in view
    assert f'search: search_output(artifact_id="{record.id}", stream="stdout", pattern="<regex>")' in view
    cli_view = bounded_view(session, record.id, hints=CLI_HINTS)
    assert f"more: executor output read {record.id} --stream stdout --start-line 11" in cli_view
    assert f"search: executor output search {record.id} --stream stdout --pattern '<regex>'" in cli_view


def test_the_search_hint_names_a_stream_with_output_and_a_last_line_without_newline_ends(
    session: SessionArtifacts,
) -> None:
    """With stdout empty and stderr holding the output, the search hint names stderr (searching stdout as written
    found nothing); a last line without a newline is not said to continue, a line cut by the page is."""
    capture = session.begin(kind="bash", streams=("stdout", "stderr"))
    capture.feed("stderr", b"ps: command not found")
    record = capture.finish(status="ok")
    view = bounded_view(session, record.id)
    assert f'search: search_output(artifact_id="{record.id}", stream="stderr", pattern="<regex>")' in view
    assert "ps: command not found\n" in view and "[line continues]" not in view
    with open_session(display_max_chars=256) as small:
        cut = store_bytes(small, b"x" * 5000 + b"\n")
        assert "[line continues]" in bounded_view(small, cut)


def test_view_head_lines_and_truncation_show_in_the_view() -> None:
    """view_head_lines sets how many lines show, and a truncated capture says what was dropped."""
    with open_session(view_head_lines=2, capture_max_bytes=1024) as session:
        artifact_id = store_bytes(session, b"".join(b"l%04d\n" % i for i in range(1, 1001)))
        view = bounded_view(session, artifact_id)
    assert view.startswith("l0001\nl0002\n--- output kept")
    assert "capture truncated: 4976 bytes dropped from line 86 to line 915" in view


def test_no_output_is_delivery_wording_only(session: SessionArtifacts) -> None:
    """An empty result shows (no output) in the view while the stored stream stays empty."""
    capture = session.begin(kind="bash", streams=("stdout", "stderr"))
    record = capture.finish(status="ok")
    assert bounded_view(session, record.id).startswith("(no output)\n")
    assert session.read_output(record.id).data == b""
    assert "empty source" in render_read_page(session.read_output(record.id))


async def test_every_rendering_goes_through_the_present_seam(session: SessionArtifacts) -> None:
    """A presenter passed in transforms the bounded view and both kinds of recovery page."""
    artifact_id = store_bytes(session, b"token=hunter2\n")

    def redact(text: str) -> str:
        return text.replace("hunter2", "[redacted]")

    assert "hunter2" not in bounded_view(session, artifact_id, present=redact)
    assert "hunter2" not in render_read_page(session.read_output(artifact_id), present=redact)
    page = await session.search_output(artifact_id, pattern="token", limit=1)
    assert "hunter2" not in render_search_page(page, present=redact)
    assert "1: token=hunter2" in render_search_page(page)


async def test_rendered_pages_carry_ranges_and_markers(session: SessionArtifacts) -> None:
    """A rendered read page names its true range and continuation; a search page its receipt and budgets."""
    artifact_id = store_bytes(session, b"a\nb\nc\n")
    text = render_read_page(session.read_output(artifact_id, line_count=2))
    nxt = f'read_output(artifact_id="{artifact_id}", stream="output", start_line=3)'
    assert text.startswith(f"[{artifact_id} output: lines 1-2; next: {nxt}]\na\nb\n")
    page = await session.search_output(artifact_id, pattern="[ab]", limit=1)
    resume = f'search_output(artifact_id="{artifact_id}", stream="output", pattern="[ab]", start_line=2)'
    assert "page bounded" in render_search_page(page) and f"resume with {resume}" in render_search_page(page)
    cli_resume = f"executor output search {artifact_id} --stream output --start-line 2 --pattern '[ab]'"
    assert f"resume with {cli_resume}" in render_search_page(page, hints=CLI_HINTS)


def test_all_names_are_exported() -> None:
    """Every name in executor.artifacts.__all__ exists, once."""
    for name in artifacts_pkg.__all__:
        assert hasattr(artifacts_pkg, name)
    assert len(set(artifacts_pkg.__all__)) == len(artifacts_pkg.__all__)
