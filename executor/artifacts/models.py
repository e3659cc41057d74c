"""Boundary models of the artifact store and the recovery tools.

Every model is frozen and forbids extra fields. Positions are given in the stream's *true* coordinates: line
numbers and byte offsets as the command produced them, even after a capture cap dropped a middle part.

Bytes that are not UTF-8 are never lost: ``ReadPage.data`` holds the exact stored bytes (in JSON: standard base64,
``executor.models.Base64Bytes``) and
``ReadPage.text`` their display form, with every byte that is not part of a valid UTF-8 sequence written as
``\\xNN`` (Python's ``backslashreplace``). Pages never split a valid code point, so the display form of a
concatenation equals the concatenation of the display forms.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, computed_field

from executor.models import Base64Bytes

__all__ = [
    "ArtifactRecord",
    "ReadPage",
    "SearchMatch",
    "SearchPage",
    "StreamInfo",
    "TaskRecord",
    "UnscannableLine",
    "display",
]


def display(data: bytes) -> str:
    """The display form of stored bytes: UTF-8, with every byte outside a valid sequence shown as ``\\xNN``."""
    return data.decode("utf-8", "backslashreplace")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class StreamInfo(_Model):
    """What the store knows about one captured stream."""

    name: str
    """Stream name (``stdout``, ``stderr``, ``output``, ...)."""
    bytes_total: int
    """Bytes the producer wrote, including any that the capture cap dropped."""
    bytes_stored: int
    """Bytes kept on disk (head plus tail)."""
    lines: int
    """True line count: newlines, plus one for a last line without a newline."""
    truncated: bool
    """The capture cap dropped a middle part; the stream is never reported complete."""
    dropped_bytes: int
    """Exact number of bytes dropped (0 when not truncated)."""
    dropped_at: int | None
    """True byte offset of the first dropped byte; None when nothing was dropped."""
    dropped_from_line: int | None
    """True line number holding the first dropped byte."""
    resumes_at_line: int | None
    """True line number of the first kept byte after the drop (the tail's first line)."""
    growing: bool
    """The producer is still running; more bytes may arrive."""


class ArtifactRecord(_Model):
    """One stored tool result: its identity, status and streams."""

    id: str
    """Artifact id, stamped with its owning session (``s-0123456789ab.a7``)."""
    session: str
    """Owning session id."""
    kind: str
    """What produced it (``bash``, ``write``, ``task``, ...)."""
    status: str
    """``running`` until finished, then the producer's status (``ok``, ``error``, ...)."""
    streams: dict[str, StreamInfo]
    """Streams in the order the producer declared them."""
    meta: dict[str, str]
    """Free-form producer metadata (command, exit code, ...)."""
    created_at: float
    """Creation time, seconds since the epoch."""


class ReadPage(_Model):
    """One ``read_output`` page.

    Either whole lines ``start_line..end_line`` (``start_byte_in_line`` is None), or a UTF-8 byte range
    ``[start_byte_in_line, end_byte_in_line)`` of the single line ``start_line`` when that line alone does not
    fit the display budget (or is a fragment cut by the capture cap).
    """

    artifact_id: str
    """The artifact read."""
    stream: str
    """The stream read."""
    data: Base64Bytes
    """The exact stored bytes of this page; concatenating every page's ``data`` reproduces the stored stream."""
    start_line: int
    """True line number of the first byte of the page."""
    end_line: int
    """True line number of the last line on the page (``start_line - 1`` for an empty page)."""
    start_byte_in_line: int | None
    """Byte-range page: true offset of the first byte within ``start_line``; None for a whole-line page."""
    end_byte_in_line: int | None
    """Byte-range page: true offset just past the last byte within ``start_line``; None for a whole-line page."""
    next_start_line: int | None
    """Where the next page starts; None when this page reaches the end of what is stored."""
    next_start_byte_in_line: int | None
    """Byte offset within ``next_start_line`` to continue from; None to start at the line's beginning."""
    gap_before: bool
    """The requested position fell in bytes dropped by the capture cap; the page starts at the next kept byte."""
    past_end: bool
    """The requested position lies past the end of the stream (nothing to show)."""
    complete: bool
    """This is the last page AND nothing was ever dropped AND the stream is no longer growing."""
    truncated_capture: bool
    """The capture cap dropped part of this stream (see the record's ``dropped_*`` fields)."""
    growing: bool
    """The producer is still running; a later read may return more."""
    empty_source: bool
    """The stream holds no bytes at all (the producer wrote nothing)."""

    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented computed_field-on-property pattern
    @property
    def text(self) -> str:
        """The page's display form (see :func:`display`)."""
        return display(self.data)


class SearchMatch(_Model):
    """A line on which the pattern matched."""

    line: int
    """True line number."""
    text: str
    """The line's display form without its newline, or a bounded preview of it when ``truncated``."""
    spans: tuple[tuple[int, int], ...]
    """Character spans of the matches within the line's display form (at most a few)."""
    truncated: bool
    """``text`` is a preview around the first match; read the whole line with ``read_output``."""
    preview_start: int
    """Character offset within the line's display form where ``text`` starts (0 unless truncated)."""


class UnscannableLine(_Model):
    """A line the search could not evaluate: whether it matches is undetermined, never "absent"."""

    line: int
    """True line number."""
    reason: str
    """``too_long`` (over the line ceiling) or ``fragment`` (the capture cap cut it)."""
    bytes: int
    """Stored bytes of the line (or fragment)."""


class SearchPage(_Model):
    """One ``search_output`` page and its receipt."""

    artifact_id: str
    """The artifact searched."""
    stream: str
    """The stream searched."""
    pattern: str
    """The pattern as given."""
    start_line: int
    """First line this page considered."""
    matches: tuple[SearchMatch, ...]
    """Matching lines, in order; every line before ``next_start_line`` not listed here or in ``unscannable``
    was scanned and did not match."""
    unscannable: tuple[UnscannableLine, ...]
    """Lines skipped without evaluation (undetermined)."""
    scanned_lines: int
    """Lines actually evaluated by the pattern."""
    scanned_chars: int
    """Characters actually evaluated by the pattern."""
    page_bounded: bool
    """Delivery stopped at ``limit`` or at the display budget; resume at ``next_start_line``."""
    scan_bounded: bool
    """Scanning stopped at the per-call scan budget (a line boundary); resume at ``next_start_line``."""
    next_start_line: int | None
    """The receipt: resume here to continue without skipping or repeating a match; None at the end."""
    complete: bool
    """The whole stream was searched, nothing was dropped by the capture cap, and it is no longer growing."""
    truncated_capture: bool
    """The capture cap dropped part of this stream; the dropped part was not searched."""
    growing: bool
    """The producer is still running; the last line in progress was not searched yet."""
    empty_source: bool
    """The stream holds no bytes at all."""


class TaskRecord(_Model):
    """What the index keeps about one background task (the agent keeps its process and its output buffer)."""

    task_id: str
    """Identifier given by the session's agent."""
    command: str
    """The command it runs."""
    owner: str | None = None
    """The opaque owner token given at start."""
    artifact_id: str | None = None
    """The artifact mirroring its streams."""
    action_id: str | None = None
    """The gated action that started it."""
    finished: bool = False
    """Its mirror completed: the artifact holds the whole output."""
