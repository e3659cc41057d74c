"""Split a captured stream into sections and describe them in a hashable manifest. Pure.

Lines are the stream split on ``\\n`` (a trailing newline does not open an empty last line); line
numbers are 1-based and true to the stream, so ``read_output`` on the same artifact finds them.
Blank lines separate sections and belong to none, except inside a block kept whole (a traceback,
a test-failure block).

Section kinds, recognised in this order at the start of each section:

- ``traceback``: ``Traceback (most recent call last):`` through the exception line, chained
  tracebacks (``During handling of the above exception ...``) included;
- ``failure``: a pytest ``____ test_x ____`` block (to the next such header or ``=== ... ===`` bar),
  a unittest ``FAIL:``/``ERROR:`` block (to the next ``=====`` bar or the ``Ran N tests`` footer),
  a cargo ``---- name stdout ----`` block, a go ``--- FAIL:`` block (its indented lines);
- ``heading``: a markdown ``#`` heading, an underlined heading, or a ``=== title ===`` bar, with the
  paragraph that follows it;
- ``log``: a run of lines sharing a log prefix shape (timestamp and/or level) and the same level;
  indented continuation lines stay with it;
- ``block``: any other run of non-blank lines;
- ``rest``: everything after the first ``max_sections - 1`` sections, as one section.

Classification looks at the first :data:`_SCAN_CHARS` characters of a line only, so one enormous
line costs no more than a short one.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

__all__ = ["SPLITTER_VERSION", "Manifest", "Section", "SectionKind", "split_sections", "stream_digest", "stream_lines"]

SPLITTER_VERSION = 1
"""Bumped whenever the same text would split differently; part of the manifest hash."""

SectionKind = Literal["traceback", "failure", "heading", "log", "block", "rest"]
"""What a section looks like; see the module docstring."""

_SCAN_CHARS = 1_000
_EXCERPT_CHARS = 120
_MAX_TERMS = 16
_TERM_SCAN_CHARS = 20_000


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class Section(_Model):
    """One section of a stream."""

    id: str
    """``S1``, ``S2``... in stream order."""
    kind: SectionKind
    """What the section looks like."""
    start_line: int
    """First line, 1-based, a true line number of the stream."""
    end_line: int
    """Last line, inclusive."""
    line_count: int
    """``end_line - start_line + 1``."""
    char_count: int
    """Characters in the section's lines, newlines included."""
    excerpt: str
    """The first non-blank line, stripped, non-printable characters shown as ``?``, cut to 120 characters."""
    terms: tuple[str, ...]
    """Up to 16 distinctive lowercase words of the section (most frequent first), for relevance matching."""
    has_error: bool
    """A line mentions an error (``error``, ``FooError``, ``fatal``, ``panic``, ``exception``...)."""
    has_warning: bool
    """A line mentions a warning or a deprecation."""
    has_traceback: bool
    """The section holds a stack trace (Python, Java, Rust panic, Go goroutine dump)."""
    has_failure: bool
    """A line reports a failure (``FAILED``, ``FAIL:``, ``failed``, ``AssertionError``...)."""


class Manifest(_Model):
    """The sections of one stream; what a focus judgment is made from and journaled with."""

    splitter_version: int
    """:data:`SPLITTER_VERSION` of the splitter that made it."""
    line_count: int
    """Lines in the stream."""
    char_count: int
    """Characters in the stream."""
    stream_sha256: str
    """Hex digest of the stream's UTF-8 bytes (``surrogateescape`` restores undecodable bytes)."""
    sections: tuple[Section, ...]
    """The sections, in stream order, non-overlapping."""
    manifest_hash: str
    """Hex sha256 over the canonical JSON of every other field; checked on construction."""

    @model_validator(mode="after")
    def _check(self) -> Manifest:
        expected = _manifest_hash(
            self.splitter_version, self.line_count, self.char_count, self.stream_sha256, self.sections
        )
        if self.manifest_hash != expected:
            raise ValueError("manifest_hash does not match the manifest's content; the manifest was altered")
        previous_end = 0
        for index, section in enumerate(self.sections, start=1):
            if section.id != f"S{index}":
                raise ValueError(f"section {index} has id {section.id!r}; ids run S1, S2, ... in order")
            if not previous_end < section.start_line <= section.end_line <= self.line_count:
                raise ValueError(f"section {section.id} has an invalid or overlapping line range")
            if section.line_count != section.end_line - section.start_line + 1:
                raise ValueError(f"section {section.id} has a line_count that does not match its range")
            previous_end = section.end_line
        return self

    def section(self, section_id: str) -> Section:
        """The section with that id.

        Raises:
            KeyError: no section has that id.
        """
        if section_id.startswith("S") and section_id[1:].isdigit():
            index = int(section_id[1:])
            if 1 <= index <= len(self.sections) and self.sections[index - 1].id == section_id:
                return self.sections[index - 1]
        raise KeyError(section_id)


def _manifest_hash(
    version: int, line_count: int, char_count: int, stream_sha256: str, sections: Sequence[Section]
) -> str:
    payload = {
        "splitter_version": version,
        "line_count": line_count,
        "char_count": char_count,
        "stream_sha256": stream_sha256,
        "sections": [section.model_dump(mode="json") for section in sections],
    }
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def stream_lines(text: str) -> list[str]:
    """The stream's lines as this module numbers them (``lines[0]`` is line 1)."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def stream_digest(text: str) -> str:
    """Hex sha256 of the stream's bytes, as :attr:`Manifest.stream_sha256` records it."""
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        # Lone surrogates outside the surrogateescape range: still hash something stable.
        data = text.encode("utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest()


# --- line classification ------------------------------------------------------------------------------------

_TRACEBACK_START = re.compile(r"^\s*(?:\+ )?(?:Exception Group )?Traceback \(most recent call last\):")
_TRACEBACK_CHAIN = re.compile(
    r"^(During handling of the above exception, another exception occurred:"
    r"|The above exception was the direct cause of the following exception:)"
)
_PYTEST_HEADER = re.compile(r"^_{3,} .+ _{3,}$")
_BAR = re.compile(r"^={3,}( .* ={3,})?\s*$")
_TITLE_BAR = re.compile(r"^={3,} .+ ={3,}\s*$")
_UNITTEST_START = re.compile(r"^(FAIL|ERROR): \S")
_UNITTEST_END = re.compile(r"^(={20,}|-{20,})\s*$")
_UNITTEST_RAN = re.compile(r"^Ran \d+ tests? in ")
_CARGO_HEADER = re.compile(r"^---- \S.* (stdout|stderr) ----\s*$")
_CARGO_END = re.compile(r"^(failures:|test result: |---- \S.* (stdout|stderr) ----)")
_GO_FAIL = re.compile(r"^\s*--- FAIL: \S")
_MD_HEADING = re.compile(r"^#{1,6} \S")
_UNDERLINE = re.compile(r"^(={3,}|-{3,})\s*$")
_LEVEL = r"(TRACE|DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|ERR|CRITICAL|FATAL|PANIC)"
_LOG_PREFIX = re.compile(
    r"^\[?(?P<ts>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}[^\s\]]*"
    r"|\d{2}:\d{2}:\d{2}(?:[.,]\d+)?"
    r"|[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2})?\]?"
    r"\s*(?:\[?(?P<level>" + _LEVEL + r")\]?(?=[\s:\]|]))?",
)

_ERROR = re.compile(
    r"(?<![\w-])(?<!\b0 )(?<!\bno )(errors?|fatal|panic|panicked|exception|segmentation fault|"
    r"core dumped|critical|traceback)(?![\w-])|(?-i:\b[A-Z]\w*(Error|Exception)\b|^E\s{3})",
    re.IGNORECASE,
)
_WARNING = re.compile(
    r"(?<![\w-])(?<!\b0 )(?<!\bno )(warn|warning|warnings|deprecated|deprecation)(?![\w-])", re.IGNORECASE
)
_FAILURE = re.compile(
    r"(?<![\w-])(?<!\b0 )(?<!\bno )(fail|failed|fails|failure|failures|failing)(?![\w-])|(?-i:AssertionError)"
    r"|\bassert(ion)? failed\b",
    re.IGNORECASE,
)
_STACK = re.compile(
    r"^\s*Traceback \(most recent call last\)|^\s+File \".*\", line \d+|^\s+at [\w$.<>/]+\(.*\)\s*$"
    r"|panicked at |^goroutine \d+ \[|^\s*stack backtrace:"
)
# Anchored at word boundaries so a long digit run is scanned once, not once per position.
_TERM = re.compile(r"\b[A-Za-z0-9_]*[A-Za-z][A-Za-z0-9_]*\b")
_STOPWORD_TEXT = (
    "the and for with that this from are was were not but you your have has had all any can its into out "
    "use used using via per then than there their they them what when where which who will would should "
    "could been being also just only more most some such other over under line lines file files"
)
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def _log_key(line: str) -> tuple[str, str] | None:
    """(prefix shape, level) of a log line, or None when the line has no log prefix."""
    match = _LOG_PREFIX.match(line[:_SCAN_CHARS])
    if match is None:
        return None
    ts, level = match.group("ts"), match.group("level")
    if ts is None and level is None:
        return None
    if ts is None:
        shape = "level"
    elif ts[:4].isdigit():
        shape = "iso"
    elif ts[0].isdigit():
        shape = "clock"
    else:
        shape = "syslog"
    normal = (level or "").upper()
    normal = {"WARN": "WARNING", "ERR": "ERROR", "FATAL": "CRITICAL", "PANIC": "CRITICAL"}.get(normal, normal)
    return shape, normal


def _blank(line: str) -> bool:
    return not line[:_SCAN_CHARS].strip() and (len(line) <= _SCAN_CHARS or not line.strip())


def _indented(line: str) -> bool:
    return line[:1] in (" ", "\t")


# --- splitting ----------------------------------------------------------------------------------------------

_Span = tuple[int, int, SectionKind]
"""0-based start index, 0-based inclusive end index, kind."""


class _Splitter:
    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.n = len(lines)

    def _skip_blank(self, i: int) -> int:
        while i < self.n and _blank(self.lines[i]):
            i += 1
        return i

    def _trim(self, start: int, end: int) -> int:
        """Last non-blank index in ``start..end`` (``end`` exclusive)."""
        while end - 1 > start and _blank(self.lines[end - 1]):
            end -= 1
        return end - 1

    def _structural(self, i: int) -> bool:
        """True when line ``i`` opens a section of its own kind (it cuts a plain block or a log run)."""
        head = self.lines[i][:_SCAN_CHARS]
        return bool(
            _TRACEBACK_START.match(head)
            or _PYTEST_HEADER.match(head)
            or _UNITTEST_START.match(head)
            or _CARGO_HEADER.match(head)
            or _GO_FAIL.match(head)
            or _MD_HEADING.match(head)
            or _TITLE_BAR.match(head)
            or (_BAR.match(head) and i + 1 < self.n and _UNITTEST_START.match(self.lines[i + 1][:_SCAN_CHARS]))
        )

    def _setext(self, i: int) -> bool:
        if i + 1 >= self.n or _blank(self.lines[i]):
            return False
        if i + 2 < self.n and _UNITTEST_START.match(self.lines[i + 2][:_SCAN_CHARS]):
            return False  # the bar opens a unittest failure block, it underlines nothing
        return bool(_UNDERLINE.match(self.lines[i + 1][:_SCAN_CHARS])) and not _UNDERLINE.match(
            self.lines[i][:_SCAN_CHARS]
        )

    def spans(self) -> list[_Span]:
        spans: list[_Span] = []
        i = self._skip_blank(0)
        while i < self.n:
            end, kind = self._one(i)
            spans.append((i, end, kind))
            i = self._skip_blank(end + 1)
        return spans

    def _one(self, i: int) -> tuple[int, SectionKind]:
        head = self.lines[i][:_SCAN_CHARS]
        if _TRACEBACK_START.match(head):
            return self._traceback(i), "traceback"
        if _PYTEST_HEADER.match(head):
            return self._pytest(i), "failure"
        if _BAR.match(head) and i + 1 < self.n and _UNITTEST_START.match(self.lines[i + 1][:_SCAN_CHARS]):
            return self._unittest(i + 1), "failure"
        if _UNITTEST_START.match(head):
            return self._unittest(i), "failure"
        if _CARGO_HEADER.match(head):
            return self._cargo(i), "failure"
        if _GO_FAIL.match(head):
            return self._go(i), "failure"
        if _MD_HEADING.match(head) or _TITLE_BAR.match(head):
            return self._heading(i, i), "heading"
        if self._setext(i):
            return self._heading(i, i + 1), "heading"
        key = _log_key(head)
        if key is not None:
            return self._log(i, key), "log"
        return self._block(i), "block"

    def _traceback(self, i: int) -> int:
        j = i + 1
        while True:
            while j < self.n and (_indented(self.lines[j]) and not _blank(self.lines[j])):
                j += 1
            # The exception line ends the traceback (absent when the stream was cut short).
            if j < self.n and not _blank(self.lines[j]):
                j += 1
            end = j - 1
            # A chained traceback: blank, "During handling ...", blank, "Traceback ...".
            k = self._skip_blank(j)
            if k < self.n and _TRACEBACK_CHAIN.match(self.lines[k][:_SCAN_CHARS]):
                m = self._skip_blank(k + 1)
                if m < self.n and _TRACEBACK_START.match(self.lines[m][:_SCAN_CHARS]):
                    j = m + 1
                    continue
            return end

    def _pytest(self, i: int) -> int:
        j = i + 1
        while j < self.n:
            head = self.lines[j][:_SCAN_CHARS]
            if _PYTEST_HEADER.match(head) or _BAR.match(head):
                break
            j += 1
        return self._trim(i, j)

    def _unittest(self, i: int) -> int:
        j = i + 1
        # The first dashed bar right after "FAIL: name" belongs to the block.
        if j < self.n and _UNITTEST_END.match(self.lines[j][:_SCAN_CHARS]):
            j += 1
        while j < self.n:
            head = self.lines[j][:_SCAN_CHARS]
            if head.startswith("=") and _UNITTEST_END.match(head):
                break
            if _UNITTEST_END.match(head) and j + 1 < self.n and _UNITTEST_RAN.match(self.lines[j + 1]):
                break
            if _UNITTEST_RAN.match(head):
                break
            j += 1
        return self._trim(i, j)

    def _cargo(self, i: int) -> int:
        j = i + 1
        while j < self.n and not _CARGO_END.match(self.lines[j][:_SCAN_CHARS]):
            j += 1
        return self._trim(i, j)

    def _go(self, i: int) -> int:
        j = i + 1
        while j < self.n and _indented(self.lines[j]) and not _GO_FAIL.match(self.lines[j][:_SCAN_CHARS]):
            j += 1
        return j - 1

    def _heading(self, i: int, last_heading_line: int) -> int:
        j = self._skip_blank(last_heading_line + 1)
        if j >= self.n or self._structural(j) or self._setext(j):
            return last_heading_line
        while j < self.n and not _blank(self.lines[j]) and not self._structural(j) and not self._setext(j):
            j += 1
        return j - 1

    def _log(self, i: int, key: tuple[str, str]) -> int:
        j = i + 1
        while j < self.n:
            line = self.lines[j]
            if _blank(line) or self._structural(j):
                break
            if _indented(line) and _log_key(line) is None:
                j += 1
                continue
            if _log_key(line) != key:
                break
            j += 1
        return j - 1

    def _block(self, i: int) -> int:
        j = i + 1
        while j < self.n:
            line = self.lines[j]
            if _blank(line) or self._structural(j) or self._setext(j):
                break
            if _log_key(line) is not None:
                break
            j += 1
        return j - 1


def _excerpt(lines: Sequence[str]) -> str:
    for line in lines:
        stripped = line[:_SCAN_CHARS].strip()
        if stripped:
            shown = "".join(ch if ch.isprintable() else "?" for ch in stripped[: _EXCERPT_CHARS + 1])
            if len(shown) > _EXCERPT_CHARS:
                shown = shown[: _EXCERPT_CHARS - 1] + "…"
            return shown
    return ""


def _describe(index: int, lines: list[str], start: int, end: int, kind: SectionKind) -> Section:
    body = lines[start : end + 1]
    has_error = has_warning = has_failure = False
    has_traceback = kind == "traceback"
    counts: Counter[str] = Counter()
    scanned = 0
    for line in body:
        head = line[:_SCAN_CHARS]
        has_error = has_error or _ERROR.search(head) is not None
        has_warning = has_warning or _WARNING.search(head) is not None
        has_failure = has_failure or _FAILURE.search(head) is not None
        has_traceback = has_traceback or _STACK.search(head) is not None
        if scanned < _TERM_SCAN_CHARS:
            scanned += len(head)
            counts.update(
                t for t in (m.strip("_").lower() for m in _TERM.findall(head)) if len(t) >= 3 and t not in _STOPWORDS
            )
    terms = tuple(term for term, _ in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:_MAX_TERMS])
    return Section(
        id=f"S{index}",
        kind=kind,
        start_line=start + 1,
        end_line=end + 1,
        line_count=end - start + 1,
        char_count=sum(len(line) + 1 for line in body),
        excerpt=_excerpt(body),
        terms=terms,
        has_error=has_error or kind == "traceback",
        has_warning=has_warning,
        has_traceback=has_traceback,
        has_failure=has_failure or kind == "failure",
    )


def split_sections(text: str, *, max_sections: int) -> Manifest:
    """Split a stream into sections and describe them.

    Deterministic: the same text and ``max_sections`` always give the same manifest and hash.

    Args:
        text: the whole stream (decoded; undecodable bytes as ``surrogateescape`` surrogates are fine).
        max_sections: at most this many sections; past ``max_sections - 1`` the rest of the stream
            becomes one trailing section of kind ``rest`` (``FocusSettings.max_sections``).

    Raises:
        ValueError: ``max_sections`` is below 1.
    """
    if max_sections < 1:
        raise ValueError(f"max_sections must be at least 1, got {max_sections}")
    lines = stream_lines(text)
    spans = _Splitter(lines).spans()
    if len(spans) > max_sections:
        tail_start = spans[max_sections - 1][0]
        spans = [*spans[: max_sections - 1], (tail_start, spans[-1][1], "rest")]
    sections = tuple(_describe(n, lines, start, end, kind) for n, (start, end, kind) in enumerate(spans, start=1))
    digest = stream_digest(text)
    return Manifest(
        splitter_version=SPLITTER_VERSION,
        line_count=len(lines),
        char_count=len(text),
        stream_sha256=digest,
        sections=sections,
        manifest_hash=_manifest_hash(SPLITTER_VERSION, len(lines), len(text), digest, sections),
    )
