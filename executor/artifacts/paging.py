"""Pure paging and line-window logic over a stored stream (imports neither trio nor docker).

A stored stream is one or two *segments* of a virtual byte space: the head, and, when the capture cap dropped
a middle part, the tail. Each segment knows where it sits in the true stream (true byte offset, true line number
of its first byte, and the in-line offset of that byte), so every position the tools report is a true one.

Readers go through a :class:`ByteSource` (``read(offset, size)``), so the same code pages a file on disk and a
``bytes`` object in a test. Memory stays bounded: a page reads at most a few display budgets, a seek reads at
most one checkpoint interval, and the :class:`LineReader` holds at most one block or one line (both bounded).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from executor.artifacts.models import ReadPage, display
from executor.errors import OutputRangeError

__all__ = [
    "CHECKPOINT_INTERVAL",
    "Block",
    "ByteSource",
    "CheckpointTracker",
    "Layout",
    "Line",
    "LineReader",
    "MemorySource",
    "Segment",
    "byte_page",
    "read_page",
    "safe_cut",
]

CHECKPOINT_INTERVAL = 64 * 1024
"""A checkpoint (line start offset, line number) is recorded for the first line starting at or after every
multiple of this many stored bytes, so that a seek scans at most about one interval."""

_CHUNK = 256 * 1024


class ByteSource(Protocol):
    """Random access to the virtual stored byte space of one stream."""

    def read(self, offset: int, size: int) -> bytes:
        """Return up to ``size`` bytes at ``offset`` (fewer only at the end)."""
        ...


@dataclass(frozen=True, slots=True)
class MemorySource:
    """A :class:`ByteSource` over bytes in memory (tests, tiny streams)."""

    data: bytes

    def read(self, offset: int, size: int) -> bytes:
        """Return up to ``size`` bytes at ``offset``."""
        return self.data[offset : offset + size]


@dataclass(frozen=True, slots=True)
class Segment:
    """A contiguous run of kept bytes."""

    stored_start: int
    """Offset of the segment in the virtual stored space."""
    stored_end: int
    """Offset just past the segment."""
    first_line: int
    """True line number of the segment's first byte."""
    first_line_offset: int
    """True offset of the segment's first byte within its line (0: the segment starts on a line start)."""
    newlines: int
    """Newline bytes in the segment."""
    ends_with_newline: bool
    """The segment's last byte is a newline."""

    @property
    def last_line(self) -> int:
        """True line number of the segment's last byte."""
        return self.first_line + self.newlines - (1 if self.ends_with_newline else 0)


@dataclass(frozen=True, slots=True)
class Layout:
    """Where a stream's kept bytes are and what they stand for."""

    segments: tuple[Segment, ...]
    """Kept segments in order; empty for an empty stream."""
    checkpoints: tuple[tuple[int, int], ...] = ()
    """Sorted ``(stored_offset, line)`` pairs, each a true line start inside a segment."""
    growing: bool = False
    """More bytes may still be appended to the last segment."""
    truncated: bool = False
    """A middle part was dropped (there is a gap between segments)."""

    @classmethod
    def whole(cls, data: bytes, *, growing: bool = False) -> Layout:
        """The layout of a stream kept entirely (tests and small streams)."""
        if not data:
            return cls(segments=(), growing=growing)
        seg = Segment(0, len(data), 1, 0, data.count(b"\n"), data.endswith(b"\n"))
        return cls(segments=(seg,), growing=growing)


@dataclass(frozen=True, slots=True)
class Line:
    """One line (or fragment) handed out by :class:`LineReader`."""

    number: int
    """True line number."""
    start: int
    """Stored offset of the first byte."""
    end: int
    """Stored offset just past the last byte (past the newline when there is one)."""
    data: bytes | None
    """The bytes, newline included; None when the line is longer than the iterator's ``max_bytes``."""
    terminated: bool
    """The line ends with a newline."""
    fragment: bool
    """Part of the line was dropped by the capture cap (its start, or its end)."""
    in_progress: bool
    """The stream's last line, unterminated, while the stream is still growing."""


def safe_cut(data: bytes, cut: int) -> int:
    """Move ``cut`` back so that ``data[:cut]`` does not end inside a valid multi-byte UTF-8 sequence.

    A sequence that ends exactly at ``cut`` is complete and stays. Invalid bytes have no code point to split and
    are cut anywhere. ``data`` should extend a few bytes past ``cut`` so that validity can be checked.
    """
    if cut <= 0 or cut >= len(data):
        return cut
    for back in range(1, 4):
        i = cut - back
        if i < 0:
            return cut
        byte = data[i]
        if byte < 0x80:
            return cut
        if byte >= 0xC0:
            width = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            if i + width > cut and i > 0:
                try:
                    data[i : i + width].decode("utf-8")
                except UnicodeDecodeError:
                    return cut
                return i
            return cut
    return cut


def _display_chars(data: bytes) -> int:
    return len(display(data))


def byte_page(data: bytes, *, budget_chars: int, more: bool, measure: Callable[[bytes], int] = _display_chars) -> int:
    """How many bytes of ``data`` (a stream's bytes from some offset: a background task's read) one page shows.

    All of ``data`` when it fits ``budget_chars``; else the whole lines that fit, or, when not even the first line
    fits, the longest part of it that does. The page never ends inside a valid UTF-8 character: ``more`` says that
    bytes follow ``data`` (or may still come), so a character that ``data``'s end cuts is left for the next page.
    Every byte past the returned count is shown by the page that starts there: following the counts shows each
    byte exactly once. Non-empty ``data`` always gives at least one byte (a page always moves on).

    Args:
        data: the bytes read (at most what the caller asked for).
        budget_chars: display characters one page may take (at least 16).
        more: bytes follow ``data`` in the stream, or the stream may still grow.
        measure: how many characters the presented page spends on some bytes (by default their display form,
            ``\\xNN`` for a byte that is not UTF-8); applied to whole lines, and to prefixes of one line.
    """
    if budget_chars < 16:
        raise ValueError("budget_chars must be at least 16")
    used = 0
    cut = 0
    while cut < len(data):
        newline = data.find(b"\n", cut)
        end = len(data) if newline < 0 else newline + 1
        chars = measure(data[cut:end])
        if used + chars > budget_chars:
            break
        used += chars
        cut = end
    if cut == 0 and data:
        # Not even the first line fits: its longest prefix that does, cut between characters. The measure of a
        # prefix need not grow with it (a long run of one escaped character is shown collapsed), so the search
        # keeps a prefix it has measured to fit.
        newline = data.find(b"\n")
        line = data if newline < 0 else data[: newline + 1]
        low, high = 1, len(line)
        while low < high:
            middle = (low + high + 1) // 2
            if measure(line[: safe_cut(data, middle) or middle]) <= budget_chars:
                low = middle
            else:
                high = middle - 1
        return safe_cut(data, low) or low
    if cut < len(data):
        return cut  # ends on a line's end
    if more:
        whole = _whole_characters(data)
        return whole or len(data)
    return len(data)


def _whole_characters(data: bytes) -> int:
    """How many bytes of ``data`` end on a UTF-8 character's boundary: its length less a last character that is
    cut (at most three bytes of a started sequence); bytes that are not UTF-8 are left as they are."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # the last lead (or ASCII) byte
            needed = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4 if byte & 0xF8 == 0xF0 else 1
            return len(data) - back if needed > back else len(data)
    return len(data)


class CheckpointTracker:
    """Records a checkpoint for the first line start at or after every :data:`CHECKPOINT_INTERVAL` bytes.

    Fed the bytes of a segment in order. Only line starts that follow a newline inside the fed bytes are
    recorded, so a segment that starts mid-line never yields a false line start.
    """

    def __init__(self, *, base: int, first_line: int) -> None:
        self._pos = base
        self._line = first_line
        self._boundary = (base // CHECKPOINT_INTERVAL + 1) * CHECKPOINT_INTERVAL
        self.found: list[tuple[int, int]] = []
        """Checkpoints found so far (callers may take and clear them)."""

    def feed(self, data: bytes) -> None:
        """Account ``data``, the next bytes of the segment."""
        start = self._pos
        end = start + len(data)
        while self._boundary <= end:
            # The line starting at or after the boundary begins right after the first newline at or after
            # boundary - 1.
            j = data.find(b"\n", max(self._boundary - 1 - start, 0))
            if j < 0:
                break
            line_start = start + j + 1
            line = self._line + data.count(b"\n", 0, j + 1)
            self.found.append((line_start, line))
            self._boundary = (line_start // CHECKPOINT_INTERVAL + 1) * CHECKPOINT_INTERVAL
        self._line += data.count(b"\n")
        self._pos = end


def _seek_line_start(source: ByteSource, layout: Layout, seg: Segment, line: int) -> int:
    """Stored offset where true line ``line`` (> ``seg.first_line``, <= ``seg.last_line``) starts."""
    pos, at_line = seg.stored_start, seg.first_line
    keys = [cp[1] for cp in layout.checkpoints]
    i = bisect.bisect_right(keys, line) - 1
    while i >= 0:
        offset, cp_line = layout.checkpoints[i]
        if seg.stored_start <= offset < seg.stored_end:
            if cp_line <= line:
                pos, at_line = offset, cp_line
            break
        i -= 1
    while at_line < line:
        chunk = source.read(pos, min(_CHUNK, seg.stored_end - pos))
        if not chunk:
            raise ValueError(f"line {line} not found in segment")
        need = line - at_line
        count = chunk.count(b"\n")
        if count < need:
            at_line += count
            pos += len(chunk)
            continue
        j = -1
        for _ in range(need):
            j = chunk.find(b"\n", j + 1)
        return pos + j + 1
    return pos


def _line_end(source: ByteSource, pos: int, limit: int) -> int:
    """Stored offset just past the newline ending the line containing ``pos`` (or ``limit``)."""
    while pos < limit:
        chunk = source.read(pos, min(_CHUNK, limit - pos))
        j = chunk.find(b"\n")
        if j >= 0:
            return pos + j + 1
        pos += len(chunk)
    return limit


@dataclass(frozen=True, slots=True)
class _Located:
    seg_index: int
    pos: int
    line: int
    byte_in_line: int
    gap: bool


def _next_after_segment(layout: Layout, index: int, line_after: int) -> tuple[int | None, int | None]:
    """Continuation once a segment is exhausted."""
    if index + 1 < len(layout.segments):
        nxt = layout.segments[index + 1]
        return nxt.first_line, (nxt.first_line_offset or None)
    if layout.growing:
        return line_after, None
    return None, None


def _locate(source: ByteSource, layout: Layout, line: int, byte_in_line: int) -> _Located | None:
    """Resolve a true position to a stored one; None when it lies past the end."""
    segments = layout.segments
    for index, seg in enumerate(segments):
        if line < seg.first_line:
            return _Located(index, seg.stored_start, seg.first_line, seg.first_line_offset, gap=True)
        if line > seg.last_line:
            continue
        if line == seg.first_line:
            if byte_in_line < seg.first_line_offset:
                return _Located(index, seg.stored_start, line, seg.first_line_offset, gap=True)
            line_start_pos = seg.stored_start - seg.first_line_offset
        else:
            line_start_pos = _seek_line_start(source, layout, seg, line)
        pos = line_start_pos + byte_in_line
        if pos < seg.stored_end:
            if pos < _line_end(source, max(line_start_pos, seg.stored_start), seg.stored_end):
                return _Located(index, pos, line, byte_in_line, gap=False)
            raise _OutOfLine(line)
        # The position is past what this segment holds of the line: the line may go on in the next segment
        # (cut by the cap), or the stream may still be growing.
        if seg.ends_with_newline and line == seg.last_line:
            raise _OutOfLine(line)
        if index + 1 == len(segments):
            if layout.growing:
                return None
            raise _OutOfLine(line)
    return None


@dataclass(frozen=True, slots=True)
class _Ctx:
    artifact_id: str
    stream: str
    layout: Layout

    def page(
        self,
        *,
        data: bytes,
        start_line: int,
        end_line: int,
        byte_range: tuple[int, int] | None,
        next_pos: tuple[int | None, int | None],
        gap: bool,
        past_end: bool,
    ) -> ReadPage:
        layout = self.layout
        return ReadPage(
            artifact_id=self.artifact_id,
            stream=self.stream,
            data=data,
            start_line=start_line,
            end_line=end_line,
            start_byte_in_line=None if byte_range is None else byte_range[0],
            end_byte_in_line=None if byte_range is None else byte_range[1],
            next_start_line=next_pos[0],
            next_start_byte_in_line=next_pos[1],
            gap_before=gap,
            past_end=past_end,
            complete=next_pos[0] is None and not past_end and not layout.truncated and not layout.growing,
            truncated_capture=layout.truncated,
            growing=layout.growing,
            empty_source=not layout.segments,
        )


class _OutOfLine(OutputRangeError):
    def __init__(self, line: int) -> None:
        super().__init__(f"start_byte_in_line lies past the end of line {line}")
        self.line = line


def read_page(
    source: ByteSource,
    layout: Layout,
    *,
    artifact_id: str,
    stream: str,
    start_line: int,
    start_byte_in_line: int | None,
    line_count: int,
    budget_chars: int,
) -> ReadPage:
    """Build one page starting at a true position.

    Whole lines that fit ``budget_chars`` (display characters) and ``line_count``; when the first line alone
    does not fit, or the position is inside a line, or the line is a fragment cut by the cap, a byte range of that
    one line instead, never splitting a valid code point.

    Raises:
        OutputRangeError: a position or count below its minimum, or ``start_byte_in_line`` past the end of its
            line (the message names the line).
    """
    ctx = _Ctx(artifact_id, stream, layout)
    if start_line < 1:
        raise OutputRangeError.bounds("start_line", start_line, 1)
    if line_count < 1:
        raise OutputRangeError.bounds("line_count", line_count, 1)
    if start_byte_in_line is not None and start_byte_in_line < 0:
        raise OutputRangeError.bounds("start_byte_in_line", start_byte_in_line, 0)
    if budget_chars < 16:
        raise ValueError("budget_chars must be at least 16")
    located = _locate(source, layout, start_line, start_byte_in_line or 0) if layout.segments else None
    if located is None:
        return ctx.page(
            data=b"",
            start_line=start_line,
            end_line=start_line - 1,
            byte_range=None if start_byte_in_line is None else (start_byte_in_line, start_byte_in_line),
            next_pos=(start_line, start_byte_in_line) if layout.growing else (None, None),
            gap=False,
            past_end=bool(layout.segments) and not layout.growing,
        )
    if located.byte_in_line == 0:
        page = _whole_lines(source, ctx, located, line_count, budget_chars)
        if page is not None:
            return page
    return _byte_range(source, ctx, located, budget_chars)


def _whole_lines(source: ByteSource, ctx: _Ctx, located: _Located, line_count: int, budget: int) -> ReadPage | None:
    layout = ctx.layout
    seg = layout.segments[located.seg_index]
    is_last_segment = located.seg_index + 1 == len(layout.segments)
    # Any line that fits has at most 4 bytes per display character.
    window = source.read(located.pos, min(seg.stored_end - located.pos, 4 * budget + 1))
    window_reaches_end = located.pos + len(window) == seg.stored_end
    used = 0
    taken = 0
    cut = 0
    while taken < line_count:
        j = window.find(b"\n", cut)
        if j >= 0:
            end = j + 1
        elif window_reaches_end and cut < len(window) and is_last_segment and not layout.growing:
            end = len(window)  # the stream's last line, without a newline: whole
        else:
            break
        chars = len(display(window[cut:end]))
        if used + chars > budget:
            break
        used += chars
        taken += 1
        cut = end
    if taken == 0:
        return None
    end_line = located.line + taken - 1
    stored_after = located.pos + cut
    if stored_after == seg.stored_end:
        next_pos = _next_after_segment(layout, located.seg_index, end_line + 1)
    else:
        next_pos = (end_line + 1, None)
    return ctx.page(
        data=window[:cut],
        start_line=located.line,
        end_line=end_line,
        byte_range=None,
        next_pos=next_pos,
        gap=located.gap,
        past_end=False,
    )


def _byte_range(source: ByteSource, ctx: _Ctx, located: _Located, budget: int) -> ReadPage:
    layout = ctx.layout
    index = located.seg_index
    seg = layout.segments[index]
    # A display character takes at most 4 bytes; read 3 more to see whether a sequence at the cut is complete.
    reach = 4 * budget
    window = source.read(located.pos, min(seg.stored_end - located.pos, reach + 3))
    newline = window.find(b"\n", 0, reach)
    cut = newline + 1 if newline >= 0 else min(len(window), reach)
    if len(display(window[: safe_cut(window, cut)])) > budget:
        # The display length of a prefix cut at a safe boundary grows with the cut: binary search the largest.
        low, high = 1, cut
        while low < high:
            middle = (low + high + 1) // 2
            if len(display(window[: safe_cut(window, middle)])) <= budget:
                low = middle
            else:
                high = middle - 1
        cut = low
    cut = safe_cut(window, cut) or cut
    data = window[:cut]
    end_byte = located.byte_in_line + cut
    stored_after = located.pos + cut
    next_pos: tuple[int | None, int | None]
    if data.endswith(b"\n"):
        if stored_after == seg.stored_end:
            next_pos = _next_after_segment(layout, index, located.line + 1)
        else:
            next_pos = (located.line + 1, None)
    elif stored_after == seg.stored_end:
        if index + 1 == len(layout.segments) and layout.growing:
            next_pos = (located.line, end_byte)
        else:
            next_pos = _next_after_segment(layout, index, located.line + 1)
    else:
        next_pos = (located.line, end_byte)
    return ctx.page(
        data=data,
        start_line=located.line,
        end_line=located.line,
        byte_range=(located.byte_in_line, end_byte),
        next_pos=next_pos,
        gap=located.gap,
        past_end=False,
    )


@dataclass(frozen=True, slots=True)
class Block:
    """Consecutive whole, newline-terminated lines met by :class:`LineReader`."""

    first_line: int
    """True line number of the first line."""
    data: bytes
    """The lines' bytes, ending with a newline."""
    lines: int
    """How many lines."""


class LineReader:
    """Reads a stream from a true line on, as blocks of whole lines or as single :class:`Line` items.

    It hands out many short lines at once (the search prefilters them in bulk) and lets the caller size each
    block, so that a scan budget still stops exactly on the line it would stop on line by
    line. Anything that is not a plain whole line (a fragment cut by the cap, a line over ``max_bytes``, the
    last line of a stream, a line longer than the requested block) comes as a :class:`Line`.
    """

    def __init__(self, source: ByteSource, layout: Layout, *, start_line: int, max_bytes: int) -> None:
        self._source = source
        self._layout = layout
        self._max = max_bytes
        self._index = -1
        self._pos = 0
        self._line = start_line
        self._cut_start = False
        for index, seg in enumerate(layout.segments):
            if start_line > seg.last_line:
                continue
            self._index = index
            if start_line <= seg.first_line:
                self._pos, self._line = seg.stored_start, seg.first_line
                self._cut_start = seg.first_line_offset > 0
            else:
                self._pos = _seek_line_start(source, layout, seg, start_line)
            break

    def _segment(self) -> Segment | None:
        segments = self._layout.segments
        while 0 <= self._index < len(segments):
            seg = segments[self._index]
            if self._pos < seg.stored_end:
                return seg
            self._index += 1
            if self._index < len(segments):
                nxt = segments[self._index]
                self._pos, self._line = nxt.stored_start, nxt.first_line
                self._cut_start = nxt.first_line_offset > 0
        return None

    def next_line_number(self) -> int | None:
        """True line number of the next item; None at the end."""
        return self._line if self._segment() is not None else None

    def next(self, block_bytes: int) -> Block | Line | None:
        """The next item: whole lines within about ``block_bytes`` bytes, or one line; None at the end."""
        seg = self._segment()
        if seg is None:
            return None
        if not self._cut_start:
            window = self._source.read(self._pos, min(max(1, block_bytes), seg.stored_end - self._pos))
            k = window.rfind(b"\n")
            if k >= 0:
                data = window[: k + 1]
                block = Block(self._line, data, data.count(b"\n"))
                self._pos += k + 1
                self._line += block.lines
                return block
        return self._one_line(seg)

    def _one_line(self, seg: Segment) -> Line:
        start = self._pos
        end = _line_end(self._source, start, seg.stored_end)
        terminated = end < seg.stored_end or (end == seg.stored_end and seg.ends_with_newline)
        is_last = self._index + 1 == len(self._layout.segments)
        fragment = self._cut_start or (not terminated and not is_last)
        in_progress = not terminated and is_last and self._layout.growing
        data = None if end - start > self._max else self._source.read(start, end - start)
        line = Line(self._line, start, end, data, terminated, fragment, in_progress)
        self._pos = end
        self._cut_start = False
        if terminated:
            self._line += 1
        return line
