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
from typing import Any

import regex

from executor.artifacts.models import SearchMatch, SearchPage, UnscannableLine, display
from executor.artifacts.paging import ByteSource, Layout, iter_lines
from executor.errors import PatternError, PatternTimeout

__all__ = ["compile_pattern", "run_search"]

_MAX_SPANS = 8
_ENTRY_OVERHEAD = 24  # characters a presented entry adds around its text (line number, markers)
_UNSCANNABLE_COST = 64
_PREVIEW_CHARS = 400


def compile_pattern(pattern: str, *, max_chars: int) -> Any:
    """Compile ``pattern`` with the ``regex`` module.

    Raises:
        PatternError: it is longer than ``max_chars`` or does not compile (the message says why).
    """
    if not isinstance(pattern, str) or not pattern:
        raise PatternError("the search pattern must be a non-empty string")
    if len(pattern) > max_chars:
        raise PatternError(
            f"the search pattern has {len(pattern)} characters; at most {max_chars} are accepted "
            "(artifacts.pattern_max_chars)"
        )
    try:
        return regex.compile(pattern)
    except (regex.error, ValueError, OverflowError, RecursionError) as exc:
        raise PatternError(f"the search pattern does not compile: {exc}; fix it and search again") from exc


def _preview(text: str, first: tuple[int, int], size: int) -> tuple[str, int]:
    start = max(0, min(first[0] - size // 4, len(text) - size))
    return text[start : start + size], start


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
) -> SearchPage:
    """Scan from true line ``start_line`` and return one page with its receipt.

    Raises:
        PatternTimeout: the pattern's evaluations took longer than ``timeout_s`` in total.
    """
    matches: list[SearchMatch] = []
    unscannable: list[UnscannableLine] = []
    used = 0
    scanned_lines = 0
    scanned_chars = 0
    regex_time = 0.0
    page_bounded = False
    scan_bounded = False
    next_line: int | None = None
    previous: int | None = None
    last_seen: int | None = None
    limit_reached = False
    preview_size = min(_PREVIEW_CHARS, budget_chars // 2)
    for line in iter_lines(source, layout, start_line=start_line, max_bytes=line_ceiling_chars):
        last_seen = line.number
        new_line = line.number != previous
        previous = line.number
        if new_line:
            # Stops happen only between lines, never between two fragments of one cut line.
            if limit_reached:
                page_bounded, next_line = True, line.number
                break
            if scanned_chars >= scan_max_chars:
                scan_bounded, next_line = True, line.number
                break
        if line.in_progress:
            next_line = line.number
            break
        if line.data is None or line.fragment:
            reason = "too_long" if line.data is None else "fragment"
            if used + _UNSCANNABLE_COST > budget_chars and (matches or unscannable):
                page_bounded, next_line = True, line.number
                break
            unscannable.append(UnscannableLine(line=line.number, reason=reason, bytes=line.end - line.start))
            used += _UNSCANNABLE_COST
            continue
        raw = line.data[:-1] if line.terminated else line.data
        text = display(raw)
        remaining = timeout_s - regex_time
        began = time.monotonic()
        try:
            if remaining <= 0:
                raise TimeoutError
            found = pattern.search(text, timeout=remaining, concurrent=True)
            spans: tuple[tuple[int, int], ...] = ()
            if found is not None:
                remaining = timeout_s - regex_time - (time.monotonic() - began)
                if remaining <= 0:
                    raise TimeoutError
                iterator = pattern.finditer(text, timeout=remaining, concurrent=True)
                spans = tuple(m.span() for m in itertools.islice(iterator, _MAX_SPANS))
        except TimeoutError:
            raise PatternTimeout(
                f"pattern {pattern_text[:80]!r} ran past the {timeout_s:g}s search time bound at line "
                f"{line.number} of {artifact_id} {stream}; whether it matches there is undetermined. Simplify the "
                "pattern (avoid nested or overlapping repetition such as (a|aa)+), or narrow it with start_line"
            ) from None
        finally:
            regex_time += time.monotonic() - began
        scanned_lines += 1
        scanned_chars += len(text)
        if found is None:
            continue
        room = budget_chars - used
        full_cost = len(text) + _ENTRY_OVERHEAD
        if full_cost <= room:
            entry = SearchMatch(line=line.number, text=text, spans=spans, truncated=False, preview_start=0)
            used += full_cost
        elif full_cost > budget_chars and preview_size + _ENTRY_OVERHEAD <= room:
            shown, offset = _preview(text, spans[0] if spans else (0, 0), preview_size)
            entry = SearchMatch(line=line.number, text=shown, spans=spans, truncated=True, preview_start=offset)
            used += len(shown) + _ENTRY_OVERHEAD
        else:
            page_bounded, next_line = True, line.number
            break
        matches.append(entry)
        if len(matches) >= limit:
            limit_reached = True
    else:
        if layout.growing:
            next_line = (last_seen + 1) if last_seen is not None else start_line
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
