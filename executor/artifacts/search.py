"""``search_output``'s scan: whole lines only, a time bound, two separate budgets and an exact receipt.

:func:`run_search` is synchronous and blocking on purpose: the store runs it in a worker thread. It never
evaluates the pattern on part of a line (a fragment cut by the capture cap, or a line over the ceiling, is
reported unscannable instead), stops scanning only on a line boundary once ``scan_max_chars`` characters were
evaluated, and stops delivering at ``limit`` matches or at the display budget. The receipt ``next_start_line``
is the first line whose matches were not all delivered, so resuming never skips nor repeats a match.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

import regex

from executor.artifacts.models import SearchMatch, SearchPage, UnscannableLine, display
from executor.artifacts.paging import Block, ByteSource, Layout, LineReader
from executor.errors import PatternError, PatternTimeout

__all__ = ["compile_pattern", "run_search"]

_MAX_SPANS = 8
_ENTRY_OVERHEAD = 24  # characters a presented entry adds around its text (line number, markers)
_UNSCANNABLE_COST = 64
_PREVIEW_CHARS = 400


def compile_pattern(pattern: str, *, max_chars: int, max_expansion: int) -> Any:
    """Compile ``pattern`` with the ``regex`` module.

    Raises:
        PatternError: it is longer than ``max_chars``, expands past ``max_expansion`` items (see :func:`expansion`),
            or does not compile (the message says why).
    """
    if not isinstance(pattern, str) or not pattern:
        raise PatternError("the search pattern must be a non-empty string")
    try:
        pattern.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise PatternError(
            f"the search pattern is not valid UTF-8 (an undecodable byte at character {exc.start}); search for text"
        ) from None
    if len(pattern) > max_chars:
        raise PatternError(
            f"the search pattern has {len(pattern)} characters; at most {max_chars} are accepted "
            "(artifacts.pattern_max_chars)"
        )
    size = expansion(pattern, ceiling=max_expansion)
    if size > max_expansion:
        raise PatternError(
            f"the search pattern expands to more than {max_expansion} items when compiled (the minimum counts of "
            "nested repeats multiply: (?:a{1000}){100} is 100000; artifacts.pattern_max_expansion); use smaller "
            "counts, or a range from 0 such as {0,1000}, which is not unrolled"
        )
    try:
        return regex.compile(pattern)
    except (regex.error, ValueError, OverflowError, RecursionError) as exc:
        raise PatternError(f"the search pattern does not compile: {exc}; fix it and search again") from exc


_COUNTED = regex.compile(r"\{(\d*)(?:,(\d*))?\}")
_NAMED_ESCAPE = frozenset("pPNxuUgk")
_BLANKS = frozenset(" \t\n\r\f\v")


def expansion(pattern: str, *, ceiling: int) -> int:
    """How many items compiling ``pattern`` unrolls, counted from above (stops counting past ``ceiling``).

    The ``regex`` module compiles a counted repeat by repeating its item as many times as its minimum count
    (``{n}``, ``{n,}``, ``{n,m}``), so nested counts multiply: ``(?:a{1000}){3000}`` took seconds and gigabytes to
    compile, on the calling thread, with no bound. Every other item (a character, a class, an escape, a group call)
    counts 1; an item repeated at least zero times (``*``, ``?``, ``{0,m}``) is compiled once. The pattern is read
    four ways, with sets as version 0 (``[[]`` is one class) and as version 1 (nested sets), each verbatim and as a
    verbose pattern (blanks and ``#`` comments outside classes dropped), and the largest count is taken: whichever
    reading ``regex`` uses, nothing that unrolls is missed (an over-estimate only refuses a pattern).
    """
    counts = []
    for nested_sets in (False, True):
        for verbose in (False, True):
            text = _verbose_stripped(pattern, nested_sets) if verbose else pattern
            counts.append(_count(text, nested_sets, ceiling))
            if counts[-1] > ceiling:
                return counts[-1]
    return max(counts)


def _count(pattern: str, nested_sets: bool, ceiling: int) -> int:
    totals = [0]  # one running total per open group
    last = 0  # the size of the item a quantifier would repeat
    quantified = False  # the previous token was a quantifier: a '?' or '+' now makes it lazy or possessive
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if quantified and c in "?+":
            quantified = False
            i += 1
            continue
        quantified = False
        if c == "\\":
            i += 2
            if i - 1 < n and pattern[i - 1] in _NAMED_ESCAPE and i < n and pattern[i] in "{<":
                close = pattern.find("}" if pattern[i] == "{" else ">", i)
                i = n if close < 0 else close + 1
            last = 1
        elif c == "[":
            i = _class_end(pattern, i, nested_sets)
            last = 1
        elif c == "(":
            if pattern.startswith("(?#", i):
                close = pattern.find(")", i)
                i = n if close < 0 else close + 1
                continue
            totals.append(0)
            last = 0
            quantified = True  # a '?' right after '(' opens a construct: it repeats nothing
            i += 1
            continue
        elif c == ")":
            last = totals.pop() if len(totals) > 1 else 0
            i += 1
        elif c == "{" and (counted := _COUNTED.match(pattern, i)) is not None:
            # The item was counted once; a minimum of n unrolls it n times (0 or 1: once, as it stands).
            times = max(1, int(counted.group(1) or 0))
            totals[-1] += last * (times - 1)
            last *= times
            i = counted.end()
            quantified = True
            if totals[-1] > ceiling:
                return totals[-1]
            continue
        elif c in "*+?":
            last = 0  # the item is compiled once, as counted
            i += 1
            quantified = True
            continue
        elif c == "|":
            last = 0
            i += 1
            continue
        else:
            last = 1
            i += 1
        totals[-1] += last
        if totals[-1] > ceiling:
            return totals[-1]
    while len(totals) > 1:  # an unclosed group (the compile refuses it): count it all the same
        inner = totals.pop()
        totals[-1] += inner
    return totals[0]


def _verbose_stripped(pattern: str, nested_sets: bool) -> str:
    """``pattern`` as a verbose pattern reads: blanks and ``#`` comments outside classes and escapes dropped."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i : i + 2])
            i += 2
        elif c == "[":
            end = _class_end(pattern, i, nested_sets)
            out.append(pattern[i:end])
            i = end
        elif c in _BLANKS:
            i += 1
        elif c == "#":
            newline = pattern.find("\n", i)
            i = n if newline < 0 else newline + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _class_end(pattern: str, start: int, nested_sets: bool) -> int:
    """The index after the character class opening at ``start``: with ``nested_sets`` (version 1) a '[' inside
    opens a nested set; without (version 0, the default) it is a character."""
    depth = 0
    i = start
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[" and (depth == 0 or nested_sets):
            depth += 1
            i += 1
            if pattern.startswith("^", i):
                i += 1
            if pattern.startswith("]", i):  # a ']' first in a class is a character
                i += 1
            continue
        if c == "]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def _preview(text: str, first: tuple[int, int], size: int) -> tuple[str, int]:
    start = max(0, min(first[0] - size // 4, len(text) - size))
    return text[start : start + size], start


_UNSAFE_FOR_BLOCKS = ("\\A", "\\Z", "\\z", "\\G", "(?=", "(?!", "(?<", "(?-", "(?|")
_BLOCK_BYTES = 64 * 1024


def _block_pattern(pattern: Any) -> Any | None:
    """A MULTILINE twin of ``pattern`` usable as an exact prefilter over a block of lines, or None.

    Over ``line1\\nline2\\n...`` with MULTILINE, any match a line has on its own is also a match of the block
    (``^``/``$`` match at the line edges, and a newline, like the end of a string, is neither a word character
    nor anything a ``.`` matches), so a block without a match has no matching line. Patterns whose meaning
    depends on the string's real ends or on what lies beyond the line (``\\A``, ``\\Z``, ``\\G``, lookaround,
    inline flag removal, branch reset) are evaluated line by line only.
    """
    source = pattern.pattern
    if any(token in source for token in _UNSAFE_FOR_BLOCKS):
        return None
    try:
        return regex.compile(source, pattern.flags | regex.MULTILINE)
    except (regex.error, ValueError):  # pragma: no cover - the same source compiled once already
        return None


class _Scan:
    """State of one search call."""

    def __init__(self, *, pattern: Any, pattern_text: str, timeout_s: float, where: str) -> None:
        self.pattern = pattern
        self.pattern_text = pattern_text
        self.timeout_s = timeout_s
        self.where = where
        self.regex_time = 0.0

    def timed(self, fn: Any, text: str, line: int, **kwargs: Any) -> Any:
        remaining = self.timeout_s - self.regex_time
        began = time.monotonic()
        try:
            if remaining <= 0:
                raise TimeoutError
            return fn(text, timeout=remaining, concurrent=True, **kwargs)
        except TimeoutError:
            raise PatternTimeout(
                f"pattern {self.pattern_text[:80]!r} ran past the {self.timeout_s:g}s search time bound at line "
                f"{line} of {self.where}; whether it matches there is undetermined. Simplify the pattern (avoid "
                "nested or overlapping repetition such as (a|aa)+), or narrow it with start_line"
            ) from None
        finally:
            self.regex_time += time.monotonic() - began

    def spans(self, text: str, line: int) -> tuple[tuple[int, int], ...] | None:
        """Match spans of one whole line, or None when it does not match."""
        if self.timed(self.pattern.search, text, line) is None:
            return None
        iterator = self.timed(self.pattern.finditer, text, line)
        return tuple(m.span() for m in itertools.islice(iterator, _MAX_SPANS))


def run_search(
    source: ByteSource,
    layout: Layout,
    *,
    artifact_id: str,
    stream: str,
    pattern: Any,
    pattern_text: str,
    limit: int,
    start_line: int,
    budget_chars: int,
    scan_max_chars: int,
    line_ceiling_chars: int,
    timeout_s: float,
    redact: Callable[[str], str] | None = None,
) -> SearchPage:
    """Scan from true line ``start_line`` and return one page with its receipt.

    ``redact`` (called in order on every scanned text, a block of whole lines or one line, and keeping lines one
    for one) turns stored text into what a reader may see before the pattern runs on it: a pattern then matches
    only what the presentation shows, never a secret it hides (not by a hit inside it, nor by a lookaround).

    Raises:
        PatternTimeout: the pattern's evaluations took longer than ``timeout_s`` in total.
    """
    scan = _Scan(pattern=pattern, pattern_text=pattern_text, timeout_s=timeout_s, where=f"{artifact_id} {stream}")
    block_pattern = _block_pattern(pattern)
    matches: list[SearchMatch] = []
    unscannable: list[UnscannableLine] = []
    used = 0
    scanned_lines = 0
    scanned_chars = 0
    page_bounded = False
    scan_bounded = False
    next_line: int | None = None
    previous: int | None = None
    preview_size = min(_PREVIEW_CHARS, budget_chars // 2)
    reader = LineReader(source, layout, start_line=start_line, max_bytes=line_ceiling_chars)

    def deliver(number: int, text: str, spans: tuple[tuple[int, int], ...]) -> bool:
        """Add a match if it fits; False when the page is full (the match is withheld for the next page)."""
        nonlocal used
        room = budget_chars - used
        full_cost = len(text) + _ENTRY_OVERHEAD
        if full_cost <= room:
            matches.append(SearchMatch(line=number, text=text, spans=spans, truncated=False, preview_start=0))
            used += full_cost
            return True
        if full_cost > budget_chars and preview_size + _ENTRY_OVERHEAD <= room:
            shown, offset = _preview(text, spans[0] if spans else (0, 0), preview_size)
            matches.append(SearchMatch(line=number, text=shown, spans=spans, truncated=True, preview_start=offset))
            used += len(shown) + _ENTRY_OVERHEAD
            return True
        return False

    while True:
        upcoming = reader.next_line_number()
        if upcoming is None:
            if layout.growing:
                next_line = previous + 1 if previous is not None else start_line
            break
        if upcoming != previous:
            # Stops happen only between lines, never between two fragments of one cut line.
            if len(matches) >= limit:
                page_bounded, next_line = True, upcoming
                break
            if scanned_chars >= scan_max_chars:
                scan_bounded, next_line = True, upcoming
                break
        # A block never holds a line over the ceiling: it is no longer than the ceiling itself.
        item = reader.next(min(_BLOCK_BYTES, scan_max_chars - scanned_chars, line_ceiling_chars))
        if item is None:  # pragma: no cover - next_line_number() said there is more
            break
        if isinstance(item, Block):
            text = display(item.data)
            if redact is not None:
                text = redact(text)
            offset = 0
            number = item.first_line
            stop = False
            while offset < len(text):
                if block_pattern is not None:
                    found = scan.timed(block_pattern.search, text, number, pos=offset)
                    # A match at the very end (after the last newline) belongs to no line.
                    if found is None or found.start() >= len(text):
                        rest = text.count("\n", offset)
                        scanned_lines += rest
                        scanned_chars += len(text) - offset - rest
                        number += rest
                        break
                    # Lines before the one holding the leftmost block match have no match of their own.
                    skipped = text.count("\n", offset, found.start())
                    if skipped:
                        line_start = text.rindex("\n", offset, found.start()) + 1
                        scanned_lines += skipped
                        scanned_chars += line_start - offset - skipped
                        number += skipped
                        offset = line_start
                end = text.index("\n", offset)
                line_text = text[offset:end]
                spans = scan.spans(line_text, number)
                if spans is not None and not deliver(number, line_text, spans):
                    page_bounded, next_line, stop = True, number, True
                    break
                scanned_lines += 1
                scanned_chars += len(line_text)
                offset = end + 1
                number += 1
                if spans is not None and len(matches) >= limit and offset < len(text):
                    page_bounded, next_line, stop = True, number, True
                    break
            previous = number - 1
            if stop:
                break
            continue
        line = item
        previous = line.number
        if line.in_progress:
            next_line = line.number
            break
        if line.fragment or line.data is None:
            reason = "fragment" if line.fragment else "too_long"
            if used + _UNSCANNABLE_COST > budget_chars and (matches or unscannable):
                page_bounded, next_line = True, line.number
                break
            unscannable.append(UnscannableLine(line=line.number, reason=reason, bytes=line.end - line.start))
            used += _UNSCANNABLE_COST
            continue
        line_text = display(line.data[:-1] if line.terminated else line.data)
        if redact is not None:
            line_text = redact(line_text)
        spans = scan.spans(line_text, line.number)
        if spans is not None and not deliver(line.number, line_text, spans):
            page_bounded, next_line = True, line.number
            break
        scanned_lines += 1
        scanned_chars += len(line_text)
    return SearchPage(
        artifact_id=artifact_id,
        stream=stream,
        pattern=pattern_text,
        start_line=start_line,
        matches=tuple(matches),
        unscannable=tuple(unscannable),
        scanned_lines=scanned_lines,
        scanned_chars=scanned_chars,
        page_bounded=page_bounded,
        scan_bounded=scan_bounded,
        next_start_line=next_line,
        complete=next_line is None and not layout.truncated and not layout.growing,
        truncated_capture=layout.truncated,
        growing=layout.growing,
        empty_source=not layout.segments,
    )
