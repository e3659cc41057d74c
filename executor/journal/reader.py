"""Read a journal under hard limits; corrupt or hostile lines become line-numbered issues.

Pure: no trio, no docker, nothing executes. The reader takes a binary stream (or a path) and:

* never holds more than ``max_line_bytes + 1`` bytes of one line: a longer line is skipped in bounded chunks
  and reported (``line_too_long``);
* measures JSON nesting on the raw bytes before ``json.loads`` sees them, so a 10^5-deep line is refused
  (``too_deep``) instead of exhausting the parser's recursion;
* refuses ``NaN``, ``Infinity``, ``-Infinity`` and numbers that overflow to infinity such as ``1e999``
  (``non_finite``), and objects with a repeated key (``duplicate_key``);
* refuses a byte-order mark, CRLF line ends, NUL bytes, invalid UTF-8, a last line without its newline
  (``truncated``: the writer always ends a line, so a missing newline means the write was cut);
* refuses unknown event types and schema versions, events that do not validate, a repeated ``event_id`` or
  ``judgment_id``, and a ``seq`` that does not increase.

With the home's journal key (:mod:`executor.journal.chain`) the reader also verifies every line's HMAC and its link
to the previous line, and, for a file, that the journal still reaches its sealed head: ``unsigned``, ``foreign_key``,
``bad_mac`` (altered or forged), ``chain_broken`` (deleted, reordered or copied-in records before it),
``head_missing`` and ``head_mismatch`` (records cut from the end). It verifies only a journal that this key signed;
one with no line signed by it (written by another home, or before signing existed, or read without a key) is read
*unverified*: :attr:`JournalRead.verification` says so and :attr:`JournalRead.note` says why.

A file is read only when it is a regular file of at most ``journal.max_file_bytes`` (``/dev/zero``, a pipe or a
terminal is refused at once), and never past that many bytes.

``mode="strict"`` raises :class:`JournalCorrupt` at the first issue; ``mode="lenient"`` keeps only complete,
valid records and returns every issue alongside them.

Line numbers are 1-based and count newline-terminated lines.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from executor.config import JournalSettings
from executor.errors import JournalCorrupt, JournalError
from executor.journal.chain import GENESIS, JournalKey, head_path, split_chain
from executor.journal.events import SCHEMA_VERSION, EventType, JournalEvent, JudgmentEvent, event_adapter
from executor.nesting import json_depth

__all__ = [
    "IssueCode",
    "JournalIssue",
    "JournalRead",
    "JournalRecord",
    "ReadMode",
    "Verification",
    "decode_line",
    "read_journal",
    "read_journal_file",
]

IssueCode = Literal[
    "line_too_long",
    "truncated",
    "bom",
    "crlf",
    "nul",
    "not_utf8",
    "blank",
    "too_deep",
    "non_finite",
    "duplicate_key",
    "invalid_json",
    "not_an_object",
    "missing_field",
    "unsupported_version",
    "unknown_type",
    "invalid_event",
    "duplicate_event_id",
    "duplicate_judgment_id",
    "seq_backwards",
    "unsigned",
    "foreign_key",
    "bad_mac",
    "chain_broken",
    "head_missing",
    "head_mismatch",
    "too_large",
]
"""Why a line was refused."""

Verification = Literal["verified", "unverified"]
"""``verified``: every accepted line carries this home's valid MAC in an unbroken chain; ``unverified``: nothing
was checked (see :attr:`JournalRead.note`)."""

ReadMode = Literal["strict", "lenient"]
"""``strict``: raise on the first issue; ``lenient``: collect issues and keep the valid records."""

_ENVELOPE = ("v", "seq", "ts", "session_id", "event_id", "type")
_EVENT_TYPES: frozenset[str] = frozenset(EventType.__args__)  # type: ignore[attr-defined]  # Literal's members
_SKIP_CHUNK = 64 * 1024
# A JSON string, written as an unrolled loop so that the match is linear and never backtracks.
_BOM = b"\xef\xbb\xbf"
_UNSIGNED = "carries no MAC: this home's executor did not write it (inserted?)"
_BLANK = "is blank"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class JournalIssue(_Model):
    """One refused line."""

    line: int
    """1-based line number."""
    code: IssueCode
    """Why it was refused."""
    message: str
    """What is wrong, for people."""
    ref: str | None = None
    """The id involved, for duplicate ids (the replay treats such an id as ambiguous)."""


class JournalRecord(_Model):
    """One accepted event and the line it came from."""

    line: int
    """1-based line number."""
    event: JournalEvent
    """The validated event."""


class JournalRead(_Model):
    """What a read produced: the accepted records, in file order, and every issue."""

    records: tuple[JournalRecord, ...]
    """Complete, valid records."""
    issues: tuple[JournalIssue, ...]
    """Refused lines, in file order: the first ``journal.max_issues`` of them, then those about the journal's end."""
    issues_omitted: int = 0
    """Refused lines past ``journal.max_issues``: counted, not listed."""
    ambiguous_judgments: tuple[str, ...] = ()
    """Judgment ids that appear on more than one line (listed whole, whether or not their issues are)."""
    lines: int
    """Lines seen (including refused ones)."""
    verification: Verification = "unverified"
    """Whether the lines' MACs and chain were checked against this home's key."""
    note: str = "read without a journal key; nothing was verified"
    """Why the journal is (un)verified, for people."""
    failed_authentication: int = 0
    """Of the refused lines (and the journal's end), how many failed authentication under this home's key (altered,
    forged, unsigned, reordered, cut): a verified journal with any is not authentic as a whole."""

    @property
    def events(self) -> tuple[JournalEvent, ...]:
        """The accepted events, in file order."""
        return tuple(record.event for record in self.records)


class _LineRefused(Exception):
    def __init__(self, code: IssueCode, message: str, ref: str | None = None) -> None:
        super().__init__(message)
        self.code: IssueCode = code
        self.message = message
        self.ref = ref


def _depth_exceeds(raw: bytes, max_depth: int) -> bool:
    if raw.count(b"[") + raw.count(b"{") <= max_depth:
        return False
    return json_depth(raw) > max_depth


def _reject_constant(name: str) -> Any:
    raise _LineRefused("non_finite", f"{name} is not a finite number; journals carry finite numbers only")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _LineRefused("non_finite", f"number {text[:40]} overflows to infinity; journals carry finite numbers")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _LineRefused("duplicate_key", f"key {key[:80]!r} appears twice in one object")
        result[key] = value
    return result


def decode_line(raw: bytes, *, max_depth: int) -> dict[str, Any]:
    """Decode one line's bytes (without its newline) into a JSON object, under the depth limit.

    Raises:
        JournalCorrupt: the bytes are not one finite, duplicate-free JSON object no deeper than ``max_depth``.
    """
    try:
        return _decode(raw, max_depth)
    except _LineRefused as exc:
        raise JournalCorrupt(exc.message) from None


_DIGITS = tuple(bytes([digit]) for digit in b"0123456789")
_LONG_DIGITS = re.compile(rb"[0-9]{640,}")
"""A run of digits long enough that it may be an integer over the parser's digit limit (4300 by default; Python
lets it be lowered to 640 at the least)."""


def check_dumped_line(raw: bytes, *, max_depth: int) -> None:
    """Refuse what a reader would refuse in ``raw``, a line pydantic's ``model_dump_json`` wrote for an event.

    Such a line is one UTF-8 JSON object with unique keys, control characters escaped (so no NUL, CR or BOM) and
    non-finite floats written as ``null``, so of :func:`decode_line`'s checks only two can fail on it: nesting past
    ``max_depth`` (event material is free-form JSON) and an integer longer than the parser's digit limit. Both are
    screened by byte counts in C; the whole decode runs only when the screen cannot rule them out (a line with more
    brackets than ``max_depth``, or a long run of digits), so the writer does not parse every line it writes.

    Raises:
        JournalCorrupt: a reader would refuse the line.
    """
    if raw.count(b"{") + raw.count(b"[") <= max_depth and (
        len(raw) < 640 or sum(raw.count(digit) for digit in _DIGITS) < 640 or _LONG_DIGITS.search(raw) is None
    ):
        return
    decode_line(raw, max_depth=max_depth)


def _decode(raw: bytes, max_depth: int) -> dict[str, Any]:
    if raw.startswith(_BOM):
        raise _LineRefused("bom", "starts with a byte-order mark; journals are UTF-8 without BOM")
    if raw.endswith(b"\r"):
        raise _LineRefused("crlf", "ends with CRLF; journals use LF line ends")
    if b"\x00" in raw:
        raise _LineRefused("nul", "contains NUL bytes (padding after a crash?)")
    if not raw.strip():
        raise _LineRefused("blank", _BLANK)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _LineRefused("not_utf8", f"is not UTF-8 (byte {exc.start})") from None
    if _depth_exceeds(raw, max_depth):
        raise _LineRefused("too_deep", f"nests deeper than journal.max_depth ({max_depth})")
    try:
        value = json.loads(
            text,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
            object_pairs_hook=_unique_keys,
        )
    except RecursionError:
        raise _LineRefused("too_deep", "nests too deeply for the parser") from None
    except ValueError as exc:  # JSONDecodeError, and int() beyond the digit limit
        raise _LineRefused("invalid_json", f"is not valid JSON ({str(exc)[:120]})") from None
    if not isinstance(value, dict):
        raise _LineRefused("not_an_object", "is JSON but not an object")
    return value


def _validate(obj: dict[str, Any]) -> JournalEvent:
    missing = [key for key in _ENVELOPE if key not in obj]
    if missing:
        raise _LineRefused("missing_field", f"lacks envelope field(s) {', '.join(missing)}")
    if obj["v"] != SCHEMA_VERSION:
        raise _LineRefused(
            "unsupported_version", f"has schema version {str(obj['v'])[:20]}; this reader knows {SCHEMA_VERSION}"
        )
    kind = obj["type"]
    if not isinstance(kind, str) or kind not in _EVENT_TYPES:
        raise _LineRefused("unknown_type", f"has unknown event type {str(kind)[:40]!r}")
    if not obj["session_id"]:
        raise _LineRefused("missing_field", "has an empty session_id")
    try:
        event: JournalEvent = event_adapter.validate_python(obj)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"][1:]) or "(event)"
        raise _LineRefused(
            "invalid_event", f"is not a valid {kind} event: {where}: {first['msg']} ({exc.error_count()} error(s))"
        ) from None
    return event


def _lines(stream: IO[bytes], max_line_bytes: int, max_bytes: int) -> Iterator[tuple[int, bytes | None, bool]]:
    """Yield (line number, bytes without newline or None when too long, terminated); stop after ``max_bytes``.

    Past the budget one more item is yielded, with the number of the first unread line and ``b""``, unterminated
    and empty, only when the stream still has bytes.
    """
    number = 0
    budget = max_bytes
    while True:
        if budget <= 0:
            if stream.read(1):
                yield number + 1, b"", False
            return
        raw = stream.readline(min(max_line_bytes + 1, budget))
        if not raw:
            return
        budget -= len(raw)
        number += 1
        if raw.endswith(b"\n"):
            yield number, raw[:-1], True
            continue
        if len(raw) <= max_line_bytes and budget > 0:
            yield number, raw, False  # EOF without a newline
            return
        if len(raw) <= max_line_bytes:
            # The budget ran out inside this line.
            yield number, raw, False
            if stream.read(1):
                yield number + 1, b"", False
            return
        # Longer than the limit: skip the rest of it in bounded chunks, never holding it whole.
        while budget > 0:
            chunk = stream.readline(min(_SKIP_CHUNK, budget))
            budget -= len(chunk)
            if not chunk or chunk.endswith(b"\n"):
                break
        yield number, None, True


def _own_key_signed(stream: IO[bytes], key: JournalKey, settings: JournalSettings) -> bool:
    """Whether any line of the (seekable) stream names ``key``; the stream is rewound to where it was."""
    start = stream.tell()
    marker = f',"chain":"{key.key_id}:'.encode("ascii")
    try:
        for _, raw, _ in _lines(stream, settings.max_line_bytes, settings.max_file_bytes):
            if raw is not None and marker in raw[-(len(marker) + 140) :]:
                return True
        return False
    finally:
        stream.seek(start)


def read_journal(
    stream: IO[bytes],
    *,
    settings: JournalSettings,
    mode: ReadMode = "lenient",
    key: JournalKey | None = None,
    head: bytes | None = None,
    expect_head: bool = False,
) -> JournalRead:
    """Read a journal from a binary stream (at most ``journal.max_file_bytes`` of it).

    Args:
        stream: the journal's bytes, read line by line (seekable when ``key`` is given).
        settings: the journal section (``max_line_bytes``, ``max_depth``, ``max_file_bytes``).
        mode: ``strict`` raises on the first issue, ``lenient`` collects them.
        key: the home's journal key: verify each line's MAC and chain when the journal was signed with it.
        head: the bytes of the journal's sealed head file, read *before* the journal (None: there is none).
        expect_head: a missing head is an issue (the journal was signed, so its writer sealed one).

    Raises:
        JournalCorrupt: strict mode only; the message starts with ``journal line N:``.
    """
    # A head this key sealed says this home wrote the journal: it is verified even when no line carries this key's
    # signature any more (stripped or replaced signatures are then failures, not an unsigned journal).
    sealed_here = key.read_head(head) if (key is not None and head is not None) else None
    verify = key is not None and (sealed_here is not None or _own_key_signed(stream, key, settings))
    sealed = sealed_here if verify else None
    records: list[JournalRecord] = []
    issues: list[JournalIssue] = []
    omitted = 0
    failed_auth = 0
    ambiguous: dict[str, None] = {}
    event_ids: dict[str, int] = {}
    judgment_ids: dict[str, int] = {}
    last_seq: int | None = None
    last_mac = GENESIS
    last_mac_line = 0
    previous_altered: str | None = None
    last_signed_seq: int | None = None
    head_reached = False
    lines = 0

    def refuse(number: int, exc: _LineRefused, *, listed: bool = False) -> None:
        nonlocal omitted, failed_auth
        if mode == "strict":
            raise JournalCorrupt(f"journal line {number} {exc.message}") from None
        if exc.code in _AUTH_CODES:
            failed_auth += 1
        if exc.code == "duplicate_judgment_id" and exc.ref:
            ambiguous[exc.ref] = None
        if len(issues) >= settings.max_issues and not listed:
            omitted += 1
            return
        # The message is made only for a listed issue: a file of garbage is mostly counted.
        issues.append(
            JournalIssue(line=number, code=exc.code, message=f"journal line {number} {exc.message}", ref=exc.ref)
        )

    # An empty line is refused as the full checks would refuse it (it carries no MAC, so a verified read calls it
    # unsigned), without them: a file of newlines is the cheapest garbage there is.
    empty = _LineRefused("unsigned", _UNSIGNED) if verify else _LineRefused("blank", _BLANK)
    for number, raw, terminated in _lines(stream, settings.max_line_bytes, settings.max_file_bytes):
        lines = number
        if terminated and raw == b"":
            refuse(number, empty)
            previous_altered = None
            continue
        authentic: str | None = None
        altered_mac: str | None = None
        try:
            if raw is None:
                raise _LineRefused(
                    "line_too_long", f"is longer than journal.max_line_bytes ({settings.max_line_bytes} bytes)"
                )
            if not terminated:
                if not raw:
                    lines = number - 1
                    raise _LineRefused(
                        "too_large",
                        f"was not read: the journal is larger than journal.max_file_bytes ({settings.max_file_bytes})",
                    )
                if b"\x00" in raw:
                    raise _LineRefused("nul", "contains NUL bytes and no final newline (padding after a crash?)")
                raise _LineRefused("truncated", "is the last line and has no newline: the write was cut")
            body, mark = split_chain(raw)
            if verify:
                assert key is not None
                if mark is None:
                    raise _LineRefused("unsigned", _UNSIGNED)
                if mark.key_id != key.key_id:
                    raise _LineRefused(
                        "foreign_key", f"is signed by another key ({mark.key_id}), not this home's ({key.key_id})"
                    )
                if not key.verifies(body, mark):
                    # The next line may still name this line's mac: then this line was altered in place, and the
                    # link itself holds (only this line is reported).
                    altered_mac = mark.mac
                    raise _LineRefused("bad_mac", "fails its MAC: the line was altered or forged")
                authentic = mark.mac
                if mark.prev != last_mac and mark.prev != previous_altered:
                    after = f"line {last_mac_line}" if last_mac_line else "the start of the journal"
                    raise _LineRefused(
                        "chain_broken",
                        f"is authentic but does not follow {after}: records were deleted, reordered or copied in "
                        "before it",
                    )
            event = _validate(_decode(body, settings.max_depth))
            if authentic is not None:
                last_signed_seq = event.seq
                if sealed is not None and event.seq == sealed[0] and authentic == sealed[1]:
                    head_reached = True
            if event.event_id in event_ids:
                raise _LineRefused(
                    "duplicate_event_id",
                    f"repeats event_id {event.event_id!r} of line {event_ids[event.event_id]}",
                    ref=event.event_id,
                )
            if last_seq is not None and event.seq <= last_seq:
                raise _LineRefused("seq_backwards", f"has seq {event.seq}, not after the previous seq {last_seq}")
            if isinstance(event, JudgmentEvent):
                if event.judgment_id in judgment_ids:
                    raise _LineRefused(
                        "duplicate_judgment_id",
                        f"repeats judgment_id {event.judgment_id!r} of line {judgment_ids[event.judgment_id]}",
                        ref=event.judgment_id,
                    )
                judgment_ids[event.judgment_id] = number
        except _LineRefused as exc:
            refuse(number, exc)
            continue
        finally:
            if authentic is not None:
                # The writer chains to every line the key verifies, so the reader follows the same links.
                last_mac, last_mac_line = authentic, number
            previous_altered = altered_mac
        event_ids[event.event_id] = number
        last_seq = event.seq
        records.append(JournalRecord(line=number, event=event))
    if verify:
        end = lines + 1
        if head is None:
            if expect_head:
                refuse(
                    end,
                    _LineRefused("head_missing", "(the end): the journal's sealed head file is missing"),
                    listed=True,
                )
        elif sealed is None:
            refuse(
                end,
                _LineRefused("head_mismatch", "(the end): the sealed head is not valid under this key"),
                listed=True,
            )
        elif not head_reached:
            reached = f"seq {last_signed_seq}" if last_signed_seq is not None else "no signed record"
            refuse(
                end,
                _LineRefused(
                    "head_mismatch",
                    f"(the end): the journal reaches {reached} but its sealed head records seq {sealed[0]}: records "
                    "were cut from the end (or altered)",
                ),
                listed=True,
            )
    return JournalRead(
        records=tuple(records),
        issues=tuple(issues),
        issues_omitted=omitted,
        ambiguous_judgments=tuple(ambiguous),
        lines=lines,
        verification="verified" if verify else "unverified",
        note=_note(verify, key, failed_auth, len(issues) + omitted - failed_auth),
        failed_authentication=failed_auth if verify else 0,
    )


def _note(verify: bool, key: JournalKey | None, failed_auth: int, refused: int = 0) -> str:
    if verify:
        if failed_auth:
            return (
                f"checked with this home's key: {failed_auth} line(s) failed authentication and were not used (see "
                "issues); the accepted lines are authentic"
            )
        if refused:
            return (
                "verified with this home's key: every accepted line is authentic and the chain is whole; "
                f"{refused} line(s) that are not records were refused (see issues: an incomplete last line is a "
                "writer killed mid-line, or bytes added by hand)"
            )
        return "verified with this home's key: every accepted line is authentic and the chain is whole"
    if key is None:
        return "this home has no journal key; the journal was read UNVERIFIED (it may have been altered)"
    return (
        "no line is signed by this home's key (another home's journal, or written before signing); "
        "it was read UNVERIFIED (it may have been altered)"
    )


_AUTH_CODES: frozenset[str] = frozenset(
    {"unsigned", "foreign_key", "bad_mac", "chain_broken", "head_missing", "head_mismatch"}
)


def read_journal_file(
    path: Path, *, settings: JournalSettings, mode: ReadMode = "lenient", key: JournalKey | None = None
) -> JournalRead:
    """Read the journal at ``path`` (see :func:`read_journal`), with its sealed head when ``key`` is given.

    Raises:
        JournalError: the file cannot be opened, is not a regular file, or is larger than
            ``journal.max_file_bytes`` (the message names it and says what to do).
        JournalCorrupt: strict mode only, at the first refused line.
    """
    head: bytes | None = None
    if key is not None:
        # The head is read before the journal: a writer seals it only after appending, so every line it names
        # is already in the file when the journal is read.
        head = _read_head(head_path(Path(os.path.realpath(path))))  # beside the file, not beside a link to it
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below like any non-regular file.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise JournalError(f"cannot open journal {path}: {exc.strerror or exc}; pass an existing journal file") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise JournalError(
                f"journal {path} is not a regular file; pass a journal.ndjson file, not a device or a pipe"
            )
        if info.st_size > settings.max_file_bytes:
            raise JournalError(
                f"journal {path} is {info.st_size} bytes, over journal.max_file_bytes ({settings.max_file_bytes}); "
                "raise the limit to read it"
            )
        os.set_blocking(fd, True)
        stream = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with stream:
        return read_journal(stream, settings=settings, mode=mode, key=key, head=head, expect_head=key is not None)


def _read_head(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError:
        return b""  # present but unreadable: reported as an invalid head
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
        return os.read(fd, 4096)
    finally:
        os.close(fd)
