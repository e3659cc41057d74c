"""What the model is shown: the bounded view with its recovery notice, and rendered recovery pages.

**The sanitize seam.** Every text this module returns goes through exactly one function, :func:`present`, on the
way out. Each renderer takes ``present=`` (default :func:`present`); the pipeline passes its own callable (for
example ``lambda text: sanitize(present(text))`` once ``focus/sanitize.py`` exists) so that the bounded view and
every late recovery page, hostile content included, take the same path. The stored artifact is never changed.

Wording such as "(no output)" is added here, at delivery; it is never stored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from executor.artifacts.hints import MCP_HINTS, Hints
from executor.artifacts.models import ArtifactRecord, ReadPage, SearchPage, StreamInfo
from executor.artifacts.store import SessionArtifacts

__all__ = [
    "NO_OUTPUT",
    "SEARCH_PLACEHOLDER",
    "Presenter",
    "bounded_view",
    "present",
    "render_bounded_view",
    "render_read_page",
    "render_search_page",
]

Presenter = Callable[[str], str]
"""A final transformation of presented text (the sanitize seam)."""

NO_OUTPUT = "(no output)"
"""Delivery wording for a result whose streams are all empty."""

SEARCH_PLACEHOLDER = "<regex>"
"""The pattern a bounded view's search hint shows (a valid pattern: put the one you need in its place)."""


def present(text: str) -> str:
    """The default presenter: text as is. The pipeline wraps or replaces it (see the module docstring)."""
    return text


def _size(info: StreamInfo) -> str:
    lines = f"{info.lines} line" + ("" if info.lines == 1 else "s")
    text = f"{info.bytes_total} bytes, {lines}"
    if info.truncated:
        text += (
            f"; capture truncated: {info.dropped_bytes} bytes dropped from line {info.dropped_from_line} "
            f"to line {info.resumes_at_line} (head and tail kept)"
        )
    if info.growing:
        text += "; still growing"
    return text


def render_bounded_view(
    record: ArtifactRecord,
    heads: Mapping[str, ReadPage],
    *,
    present: Presenter = present,
    hints: Hints = MCP_HINTS,
) -> str:
    """The off-mode view: each stream's first lines, then a notice saying how to recover the rest.

    Args:
        record: the artifact's record.
        heads: each stream's first page (``read_output(start_line=1, line_count=view_head_lines)``).
        present: the final transformation (the sanitize seam).
        hints: whose words the recovery calls are in.
    """
    parts: list[str] = []
    all_empty = all(info.bytes_total == 0 and not info.growing for info in record.streams.values())
    several = len(record.streams) > 1
    if all_empty:
        parts.append(NO_OUTPUT)
    else:
        for name, info in record.streams.items():
            head = heads.get(name)
            if info.bytes_total == 0:
                if several:
                    parts.append(f"[{name}: empty]")
                continue
            if several:
                parts.append(f"[{name}]")
            if head is not None:
                text = head.text
                if text and not text.endswith("\n"):
                    # Cut inside a line (it goes on past the page), or the stream's last line has no newline.
                    text += "\n[line continues]" if head.next_start_byte_in_line is not None else "\n"
                parts.append(text)
    notice = [f"--- output kept as artifact {record.id} ({record.kind}, {record.status}) ---"]
    for name, info in record.streams.items():
        head = heads.get(name)
        notice.append(f"{name}: {_size(info)}")
        if head is None or info.bytes_total == 0:
            continue
        shown = "" if head.start_byte_in_line is not None else f"lines {head.start_line}-{head.end_line}"
        if head.start_byte_in_line is not None:
            shown = f"bytes {head.start_byte_in_line}-{head.end_byte_in_line} of line {head.start_line}"
        if head.next_start_line is not None:
            call = hints.read(
                record.id, stream=name, start_line=head.next_start_line, start_byte_in_line=head.next_start_byte_in_line
            )
            notice.append(f"  shown: {shown}; more: {call}")
    if not all_empty:
        # The first stream with output (stdout may be empty when stderr holds it all).
        first = next(name for name, info in record.streams.items() if info.bytes_total or info.growing)
        notice.append(f"search: {hints.search(record.id, stream=first, pattern=SEARCH_PLACEHOLDER)}")
    return present(_join([*parts, *notice]))


def _join(parts: list[str]) -> str:
    """Join blocks on their own lines without doubling a newline a block already ends with."""
    out = ""
    for part in parts:
        if out and not out.endswith("\n"):
            out += "\n"
        out += part
    return out


def bounded_view(
    artifacts: SessionArtifacts, artifact_id: str, *, present: Presenter = present, hints: Hints = MCP_HINTS
) -> str:
    """Read the heads and render the bounded view of one artifact (see :func:`render_bounded_view`).

    Raises:
        ArtifactNotFound, ArtifactEvicted: see ``SessionArtifacts.record``.
    """
    record = artifacts.record(artifact_id)
    settings = artifacts.settings
    heads: dict[str, ReadPage] = {}
    share = max(256, settings.display_max_chars // max(1, len(record.streams)))
    if settings.view_head_lines > 0:
        for name, info in record.streams.items():
            if info.bytes_total:
                heads[name] = artifacts.read_output(
                    artifact_id, stream=name, line_count=settings.view_head_lines, budget_chars=share
                )
    return render_bounded_view(record, heads, present=present, hints=hints)


def render_read_page(page: ReadPage, *, present: Presenter = present, hints: Hints = MCP_HINTS) -> str:
    """A ``read_output`` page as text: a header with its true range and markers, then the bytes."""
    if page.empty_source:
        header = f"[{page.artifact_id} {page.stream}: empty source: the command wrote nothing to this stream]"
        return present(header if not page.growing else header[:-1] + " yet; still growing]")
    if page.past_end:
        return present(f"[{page.artifact_id} {page.stream}: line {page.start_line} is past the end of the stream]")
    if page.start_byte_in_line is not None:
        where = f"line {page.start_line}, bytes {page.start_byte_in_line}-{page.end_byte_in_line}"
    else:
        where = f"lines {page.start_line}-{page.end_line}"
    marks = []
    if page.gap_before:
        marks.append("the requested position was dropped by the capture cap; showing the next kept bytes")
    if page.truncated_capture:
        marks.append("capture truncated (head and tail kept)")
    if page.growing:
        marks.append("still growing")
    if page.next_start_line is not None:
        call = hints.read(
            page.artifact_id,
            stream=page.stream,
            start_line=page.next_start_line,
            start_byte_in_line=page.next_start_byte_in_line,
        )
        marks.append(f"next: {call}")
    else:
        marks.append("end of stream" + (", complete" if page.complete else ""))
    header = f"[{page.artifact_id} {page.stream}: {where}; {'; '.join(marks)}]"
    return present(f"{header}\n{page.text}")


def render_search_page(page: SearchPage, *, present: Presenter = present, hints: Hints = MCP_HINTS) -> str:
    """A ``search_output`` page as text: each match with its line number, unscannable lines, and the receipt."""
    if page.empty_source:
        return present(f"[{page.artifact_id} {page.stream}: empty source: nothing to search]")
    lines = []
    for match in page.matches:
        if match.truncated:
            lines.append(
                f"{match.line}: [preview from char {match.preview_start}; line too long for a page, read it with "
                f"{hints.read(page.artifact_id, stream=page.stream, start_line=match.line)}] "
                f"{match.text}"
            )
        else:
            lines.append(f"{match.line}: {match.text}")
    for item in page.unscannable:
        why = "longer than the line ceiling" if item.reason == "too_long" else "cut by the capture cap"
        lines.append(
            f"{item.line}: [unscannable ({why}, {item.bytes} bytes): undetermined; inspect with "
            f"{hints.read(page.artifact_id, stream=page.stream, start_line=item.line)}]"
        )
    if not page.matches:
        lines.insert(0, "no matches in the scanned lines")
    notes = [f"scanned {page.scanned_lines} lines, {page.scanned_chars} chars from line {page.start_line}"]
    if page.page_bounded:
        notes.append("page bounded (limit or display budget)")
    if page.scan_bounded:
        notes.append("scan bounded by size")
    if page.truncated_capture:
        notes.append("capture truncated: the dropped part was not searched")
    if page.growing:
        notes.append("still growing")
    if page.next_start_line is not None:
        resume = hints.search(
            page.artifact_id, stream=page.stream, pattern=page.pattern, start_line=page.next_start_line
        )
        notes.append(f"resume with {resume}")
    else:
        notes.append("end of stream" + (", complete" if page.complete else ""))
    return present("\n".join([*lines, f"[{'; '.join(notes)}]"]))
