"""Presentation: the bounded, focused and sanitized text a result shows, and the words around a run's view.

:class:`Views` turns a session's stored artifacts into what the model sees (``present_run``) and cleans every text
a result carries (``sanitize``: the judge's ``sanitize`` reflex, failing closed to the deterministic detector). The
module-level functions are pure: a run's header, its orphans note and its outcome.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Final, Literal

from executor.artifacts import ArtifactRecord, ReadPage, SearchPage, SessionArtifacts
from executor.artifacts.hints import Hints, Surface, hints_for
from executor.artifacts.view import bounded_view, render_read_page, render_search_page
from executor.config import Profile, Settings
from executor.errors import ExecutorError
from executor.focus import (
    apply_focus,
    build_focus_request,
    flagged_lines,
    instruction_lines,
    present_focused,
    sanitize,
    split_sections,
)
from executor.focus.sanitize import (
    credential_redactor,
    judged_view,
    key_block_open,
    key_body,
    redact_window,
    sanitize_request_for,
)
from executor.injection import UNTRUSTED_MARKER
from executor.journal.events import FocusDecision, SectionManifest
from executor.models import RunResult
from executor.session.api import FocusMode, Outcome
from executor.session.gating import Gatekeeper

__all__ = ["Views", "orphans_note", "outcome_of", "run_header"]

_RAW_MAX_LINES: Final = 100_000
"""Most lines of a raw stream a result carries (the display budget usually binds first)."""
_KEY_LOOKBACK_LINES: Final = 8192
"""How far back a page or hit looks for the BEGIN line of a private key block it may be inside (a 16384-bit RSA
key is about 200 lines; an armoured PGP secret key with a photo can pass 3000)."""
_KEY_LOOKBACK_CHARS: Final = 1024 * 1024
"""Most characters a page or hit reads back looking for that BEGIN line."""
_EDGE_CONTEXT_BYTES: Final = 4096
"""How much of a line cut by a page's edge its redaction reads on the other side of the edge (a credential the
redactor knows is shorter)."""
_NEIGHBOUR_LOOKBACK: Final = 8
"""Most blank lines a page's first line looks back over for the line before it (the detector skips blank lines)."""


_NOTICE_ALLOWANCE: Final = 2048
"""Characters a result may hold beyond ``artifacts.display_max_chars``: its headers, notices and hints."""


def _within_budget(text: str, budget: int) -> str:
    """``text`` (sanitized) cut in its middle when it is longer than ``budget`` plus the notices' allowance: pages
    and views are measured before sanitizing, and a byte the sanitizer writes as ``\\x01`` or an invisible
    character written ``<U+E0041>`` takes four to nine characters, so output made of them would flood the reader's
    context. The head and the tail (where headers, notices and recovery hints are) stay; a cut falls at a line break
    when one is near, never inside an escape, and a flagged line cut in two keeps its marker on both parts."""
    limit = budget + _NOTICE_ALLOWANCE
    if len(text) <= limit:
        return text
    keep_head = budget // 2
    keep_tail = budget // 2 + _NOTICE_ALLOWANCE // 2
    head_end = text.rfind("\n", keep_head // 2, keep_head)
    if head_end == -1:
        head_end = _escape_boundary(text, keep_head)
    tail_start = text.find("\n", len(text) - keep_tail, len(text) - keep_tail // 2)
    if tail_start == -1:
        tail_start = _escape_boundary(text, len(text) - keep_tail)
        line_start = text.rfind("\n", 0, tail_start) + 1
        marker = UNTRUSTED_MARKER if text.startswith(UNTRUSTED_MARKER, line_start) else ""
    else:
        tail_start, marker = tail_start + 1, ""
    cut = tail_start - head_end
    notice = (
        f"\n[... {cut} characters cut here: this text is longer than artifacts.display_max_chars ({budget}) allows "
        "(a control or invisible character is shown escaped, four to nine characters); read a smaller part to see "
        "them ...]\n"
    )
    return text[:head_end] + notice + marker + text[tail_start:]


_ESCAPE_START: Final = re.compile(r"\\x[0-9a-f]{0,2}$|<U\+[0-9A-F]{0,6}>?$|\\$|<U?\+?$")


def _escape_boundary(text: str, position: int) -> int:
    """``position`` moved back to before an escape (``\\x1b``, ``<U+200B>``) that it would cut."""
    found = _ESCAPE_START.search(text, max(0, position - 10), position)
    return found.start() if found is not None else position


def _across_edges(text: str, neighbours: Sequence[tuple[int, str, str]]) -> set[int]:
    """Lines of ``text`` (1-based) that, read with the stream's line before or after them, hold a phrase that
    addresses the agent (split over a page's edge)."""
    lines = text.split("\n")
    out: set[int] = set()
    for number, before, after in neighbours:
        if not 1 <= number <= len(lines):
            continue
        line = lines[number - 1]
        if before and 2 in instruction_lines(f"{before}\n{line}"):
            out.add(number)
        if after and 1 in instruction_lines(f"{line}\n{after}"):
            out.add(number)
    return out


def outcome_of(result: RunResult) -> Outcome:
    """How a finished run ended, from the caller's point of view."""
    if result.cause == "exited":
        return "completed" if result.exit_code == 0 else "failed"
    if result.cause in ("signaled", "oom"):
        return "failed"
    if result.cause == "timeout":
        return "timeout"
    if result.cause == "cancelled":
        return "cancelled"
    if result.cause == "unresponsive":
        return "unresponsive"
    return "error"


def run_header(result: RunResult, spec_timeout_ms: int | None, grace_ms: int, *, stopped: bool = False) -> str:
    """The one-line header above a run's view: how it ended and after how long (``stopped``: the session was stopped
    under it)."""
    seconds = f"{result.duration_ms / 1000:.2f}s"
    if result.cause == "exited":
        head = f"[exit {result.exit_code} after {seconds}]"
    elif result.cause == "signaled":
        head = f"[killed by signal {result.signal} after {seconds}]"
    elif result.cause == "oom":
        head = f"[killed by the out-of-memory killer after {seconds}: the session's memory limit was reached]"
    elif result.cause == "timeout":
        # SIGKILL follows only when the group outlived the grace (the shell's own end says which).
        kill = (
            f"then SIGKILL after {grace_ms} ms" if result.signal == 9 else f"and ended within the {grace_ms} ms grace"
        )
        head = (
            f"[timed out after {spec_timeout_ms} ms: the whole process group got SIGTERM, {kill}; "
            "partial output is kept]"
        )
    elif result.cause == "cancelled":
        why = "the session was stopped; " if stopped else ""
        head = f"[cancelled after {seconds}: {why}the whole process group was killed; partial output is kept]"
    elif result.cause == "unresponsive":
        head = (
            f"[sandbox unresponsive: no answer from the agent after {seconds} (past the deadline + grace + drain + "
            "agent.host_margin_s); the container may be paused or frozen; partial output is kept; the session is "
            "unhealthy: stop it and start a new one]"
        )
    else:
        head = "[sandbox lost: the session's container or its agent went away; the result is not a success]"
    return head


def limits_note(result: RunResult, profile: Profile) -> str:
    """Name the container limit a run ran into (pids, or memory held by tmpfs files), or nothing."""
    notes = []
    if result.pids_limit_hits:
        notes.append(
            f"[the session's pids limit (pids={profile.pids}) refused {result.pids_limit_hits} fork(s) during this "
            "run (EAGAIN: 'Resource temporarily unavailable'): processes could not start; end what still runs]"
        )
    if result.cause == "oom" and result.tmpfs_bytes:
        notes.append(
            f"[the memory limit ({profile.memory // 2**20} MiB) was reached; tmpfs files (/tmp, the home, /dev/shm) "
            f"held {result.tmpfs_bytes / 2**20:.1f} MiB of it and still do: delete them to free that memory]"
        )
    return "\n".join(notes)


def orphans_note(result: RunResult) -> str:
    """What the command left running, and what happened to each (empty when nothing was left).

    The agent lists at most 64 processes per list but counts them all: the header gives the true number, and a last
    line says how many were not listed and how many in all were killed."""
    left = max(result.orphans_left_total, len(result.orphans_left))
    if not left:
        return ""
    killed = {proc.pid for proc in result.orphans_killed}
    lines = [f"[{left} process(es) left running by the command:"]
    for proc in result.orphans_left:
        fate = "killed" if proc.pid in killed else "kept (orphans = keep)"
        lines.append(f"  pid {proc.pid}: {proc.cmd[:200]} ({fate})")
    if unlisted := left - len(result.orphans_left):
        killed_total = max(result.orphans_killed_total, len(result.orphans_killed))
        lines.append(f"  ... {unlisted} more not listed; {killed_total} of the {left} killed")
    return "\n".join(lines) + "]"


_READER: ContextVar[Surface | None] = ContextVar("executor_results_read_by", default=None)


@contextmanager
def results_read_by(surface: Surface) -> Iterator[None]:
    """Write the recovery hints of the results made in this context (and in tasks it starts) for ``surface``'s
    reader rather than the session's own: the service answers the thin CLI (``cli``) and programs (``python``)
    from one session."""
    token = _READER.set(surface)
    try:
        yield
    finally:
        _READER.reset(token)


class Views:
    """A session's presentation: focused or bounded views of its artifacts, and sanitizing of every text shown."""

    def __init__(
        self,
        *,
        session_id: str,
        settings: Settings,
        artifacts: SessionArtifacts,
        gatekeeper: Gatekeeper,
        surface: Surface,
    ) -> None:
        self.session_id = session_id
        self._hints = hints_for(surface)
        self._settings = settings
        self._artifacts = artifacts
        self._gatekeeper = gatekeeper

    @property
    def hints(self) -> Hints:
        """The recovery calls in the words of the surface that reads this session's results (see
        :func:`results_read_by`)."""
        reader = _READER.get()
        return self._hints if reader is None else hints_for(reader)

    async def sanitize(
        self,
        text: str,
        *,
        action_id: str | None = None,
        artifact_id: str | None = None,
        neighbours: Sequence[tuple[int, str, str]] = (),
    ) -> str:
        """Judge (reflex ``sanitize``) and clean the exact text the model will see; commits the journal.

        ``neighbours``: ``(line, before, after)`` for a line of ``text`` whose stream goes on beyond what is shown
        (a page's first and last line): the stream's line before it and after it, so a phrase split over the page's
        edge is flagged as it would be on one page.
        """
        redacted = sanitize(text, redact_credentials=True)
        request = sanitize_request_for(redacted, self.session_id)
        record = await self._gatekeeper.run_judgment(request, action_id=action_id, artifact_id=artifact_id)
        if record.error is None:
            try:
                flagged = flagged_lines(record.answers, view_text=text)
            except ExecutorError:
                flagged = instruction_lines(text)
        else:
            # A failed judgment fails closed: the deterministic detector marks what it can.
            flagged = instruction_lines(text)
        if neighbours:
            flagged = tuple(sorted({*flagged, *_across_edges(text, neighbours)}))
        cleaned = judged_view(
            text, redacted, flagged_lines=flagged, redact_credentials=self._settings.focus.redact_credentials
        )
        cleaned = _within_budget(cleaned, self._settings.artifacts.display_max_chars)
        # Every tool's result passes here last: what was journaled for it (this judgment included) is committed
        # before the result can be returned.
        await self._gatekeeper.journal.commit()
        return cleaned

    def page_neighbours(self, page: ReadPage, *, first_line_of_page: int) -> list[tuple[int, str, str]]:
        """``neighbours`` for :meth:`sanitize` of a rendered ``read_output`` page whose first stream line is line
        ``first_line_of_page`` of the text: the stream's non-blank line before the page and its line after it."""
        if not page.data or page.start_byte_in_line is not None:
            return []
        count = page.data.count(b"\n") + (0 if page.data.endswith(b"\n") else 1)
        before = after = ""
        line = page.start_line - 1
        while line >= max(1, page.start_line - _NEIGHBOUR_LOOKBACK) and not before.strip():
            before = self._line_text(page.artifact_id, page.stream, line)
            line -= 1
        if page.next_start_line is not None and page.next_start_byte_in_line is None:
            after = self._line_text(page.artifact_id, page.stream, page.next_start_line)
        out = []
        if before.strip():
            out.append((first_line_of_page, before, ""))
        if after.strip():
            out.append((first_line_of_page + count - 1, "", after))
        return out

    def _line_text(self, artifact_id: str, stream: str, line: int) -> str:
        page = self._artifacts.read_output(
            artifact_id, stream=stream, start_line=line, line_count=1, budget_chars=_EDGE_CONTEXT_BYTES
        )
        return page.text.split("\n", 1)[0]

    def _reader_from(self, artifact_id: str, stream: str) -> Callable[[int], str]:
        """The call that reads ``stream`` from a given line, in the reader's words."""

        def call(start_line: int) -> str:
            return self.hints.read(artifact_id, stream=stream, start_line=start_line)

        return call

    def bounded(self, artifact_id: str) -> str:
        """The bounded (head and tail) view of an artifact."""
        return bounded_view(self._artifacts, artifact_id, hints=self.hints)

    def raw_stream(self, record: ArtifactRecord, stream: str) -> tuple[bytes, bool]:
        """A finished artifact's stream as its exact bytes, cut at the display budget, and whether that is the whole
        stream (an empty stream is answered from the record, without a read)."""
        info = record.streams.get(stream)
        if info is not None and info.bytes_total == 0 and not info.growing:
            return b"", True
        page = self._artifacts.read_output(
            record.id,
            stream=stream,
            start_line=1,
            line_count=_RAW_MAX_LINES,
            budget_chars=self._settings.artifacts.display_max_chars,
        )
        return page.data, page.complete

    def read_page(self, page: ReadPage) -> str:
        """A ``read_output`` page as text (raw; the caller sanitizes it).

        What the sanitizer, which sees only this page, cannot know is redacted here: the lines of a private key
        block whose BEGIN line is on an earlier page, and a credential that the page's edge cuts inside a line (a
        byte-range page of a long line: its part on this page no longer looks like one).
        """
        if page.data and self._settings.focus.redact_credentials:
            # surrogateescape both ways: bytes that are not UTF-8 stay themselves (shown as \xff), not U+FFFD.
            text = page.data.decode("utf-8", "surrogateescape")
            before, after = self._cut_line_context(page)
            first = (before + text).split("\n", 1)[0]
            block_open = (
                page.start_line > 1
                and key_body(first, block_open=True)
                and self._key_block_open_before(page.artifact_id, page.stream, page.start_line)
            )
            redacted = redact_window(before, text, after, key_block_open=block_open)
            if redacted != text:
                page = page.model_copy(update={"data": redacted.encode("utf-8", "surrogateescape")})
        return render_read_page(page, hints=self.hints)

    def _cut_line_context(self, page: ReadPage) -> tuple[str, str]:
        """The text of the page's first line before the page (when the page starts inside it) and of its last line
        after the page (when the page ends inside it), each at most ``_EDGE_CONTEXT_BYTES``."""
        before = after = ""
        if page.start_byte_in_line:
            first = max(0, page.start_byte_in_line - _EDGE_CONTEXT_BYTES)
            head = self._artifacts.read_output(
                page.artifact_id,
                stream=page.stream,
                start_line=page.start_line,
                start_byte_in_line=first,
                line_count=1,
                # A byte may show as four characters (\xff): the budget covers every byte up to the page.
                budget_chars=4 * _EDGE_CONTEXT_BYTES + 64,
            )
            before = head.data[: page.start_byte_in_line - first].decode("utf-8", "surrogateescape")
        if page.next_start_line is not None and page.next_start_byte_in_line:
            tail = self._artifacts.read_output(
                page.artifact_id,
                stream=page.stream,
                start_line=page.next_start_line,
                start_byte_in_line=page.next_start_byte_in_line,
                line_count=1,
                budget_chars=_EDGE_CONTEXT_BYTES,
            )
            after = tail.data.decode("utf-8", "surrogateescape").split("\n", 1)[0]
        return before, after

    async def byte_window(
        self, data: bytes, *, offset: int, first_kept: int, end: int, read: Callable[[int, int], Awaitable[bytes]]
    ) -> str:
        """Bytes ``offset..offset+len(data)`` of a stream (``first_kept..end`` readable with ``read(offset, count)``)
        as text (raw; the caller sanitizes it), with what their edges cut redacted: a credential whose other part
        is outside the range, and the lines of a private key block that began before it (a ``bg read`` page)."""
        text = data.decode("utf-8", "surrogateescape")
        if not text or not self._settings.focus.redact_credentials:
            return text
        before = after = ""
        if offset > first_kept:
            start = max(first_kept, offset - _EDGE_CONTEXT_BYTES)
            before = (await read(start, offset - start)).decode("utf-8", "surrogateescape").rsplit("\n", 1)[-1]
        block_open = False
        if offset > first_kept and key_body((before + text).split("\n", 1)[0], block_open=True):
            start = max(first_kept, offset - _KEY_LOOKBACK_CHARS)
            lines = (await read(start, offset - start)).decode("utf-8", "surrogateescape").split("\n")
            # The line the range starts in is ``before``; the first line read back is cut unless it is the first.
            block_open = key_block_open(lines[0 if start == 0 else 1 : -1])
        stop = offset + len(data)
        if stop < end and not text.endswith("\n"):
            after = (await read(stop, min(end - stop, _EDGE_CONTEXT_BYTES))).decode("utf-8", "surrogateescape")
            after = after.split("\n", 1)[0]
        return redact_window(before, text, after, key_block_open=block_open)

    def search_page(self, page: SearchPage) -> str:
        """A ``search_output`` page as text (raw; the caller sanitizes it)."""
        return render_search_page(page, hints=self.hints)

    def search_redactor(self, artifact_id: str) -> Callable[[str, int], Callable[[str], str]]:
        """What a search of ``artifact_id`` matches its pattern against: each scanned text with the credentials and
        private keys the presentation hides already redacted (a key block open before the search's first line
        included), so a hit, a count or an exit code never tells a hidden character: not by a hit inside a secret,
        nor by a lookaround that tests it."""

        def make(stream: str, start_line: int) -> Callable[[str], str]:
            block_open = start_line > 1 and self._key_block_open_before(artifact_id, stream, start_line)
            return credential_redactor(key_block_open=block_open)

        return make

    def _key_block_open_before(self, artifact_id: str, stream: str, line: int) -> bool:
        """Whether a private key block that began on an earlier line (at most ``_KEY_LOOKBACK_LINES`` back) is still
        open when ``line`` of the stream starts."""
        first = max(1, line - _KEY_LOOKBACK_LINES)
        lines: list[str] = []
        while first < line:
            page = self._artifacts.read_output(
                artifact_id, stream=stream, start_line=first, line_count=line - first, budget_chars=_KEY_LOOKBACK_CHARS
            )
            if page.start_byte_in_line is not None or page.end_line < first:
                # A line too long for one page is no key material: the block (if any) was over before it.
                lines.append("")
                first += 1
                continue
            lines.extend(page.data.decode("utf-8", "replace").removesuffix("\n").split("\n"))
            first = page.end_line + 1
        return key_block_open(lines)

    def _stream_text(self, artifact_id: str, stream: str) -> str:
        parts: list[str] = []
        line = 1
        budget = self._settings.artifacts.capture_max_bytes * 4 + 1024
        while True:
            page = self._artifacts.read_output(
                artifact_id, stream=stream, start_line=line, line_count=100_000, budget_chars=budget
            )
            parts.append(page.text)
            if page.next_start_line is None or page.next_start_byte_in_line is not None:
                break
            line = page.next_start_line
        return "".join(parts)

    async def present_run(self, artifact_id: str, *, command: str, mode: FocusMode, intent: str | None) -> str:
        """The view of a finished run's artifact under ``mode`` (raw; the caller sanitizes it)."""
        if mode == "off":
            return self.bounded(artifact_id)
        record = self._artifacts.record(artifact_id)
        settings = self._settings
        journal = self._gatekeeper.journal
        focused: list[str] = []
        fallback = False
        for stream, info in record.streams.items():
            if info.bytes_total == 0:
                continue
            if info.truncated:
                journal.append(  # committed by the sanitize that follows
                    FocusDecision(artifact_id=artifact_id, stream=stream, mode=mode, status="compute_or_retrieve")
                )
                fallback = True
                continue
            text = self._stream_text(artifact_id, stream)
            if settings.focus.redact_credentials:
                # Sections are cut from the whole stream, so one can start inside a private key block; the
                # sanitizer, which sees only the sections shown, could not know its lines are key material.
                text = credential_redactor()(text)
            manifest = split_sections(text, max_sections=settings.focus.max_sections)
            request = build_focus_request(
                manifest,
                command=command,
                intent=intent,
                session_id=self.session_id,
                head_lines=settings.artifacts.view_head_lines,
                budget_chars=settings.artifacts.display_max_chars,
            )
            judgment = await self._gatekeeper.run_judgment(request, artifact_id=artifact_id)
            status: Literal["select", "full", "compute_or_retrieve", "error"] = "error"
            selected: tuple[str, ...] = ()
            decision = None
            if judgment.error is None:
                try:
                    decision = apply_focus(manifest, judgment.answers)
                    status, selected = decision.status, decision.section_ids
                except (ExecutorError, ValueError):
                    decision = None
            journal.append(  # committed by the sanitize that follows
                FocusDecision(
                    artifact_id=artifact_id,
                    stream=stream,
                    mode=mode,
                    status=status,
                    manifest_hash=manifest.manifest_hash,
                    manifest=SectionManifest.of(manifest.sections),
                    judgment_id=judgment.judgment_id,
                    selected=selected,
                )
            )
            if decision is not None and status == "select":
                body = present_focused(
                    text,
                    manifest,
                    decision,
                    artifact_id=artifact_id,
                    budget_chars=settings.artifacts.display_max_chars // max(1, len(record.streams)),
                    recover=self._reader_from(artifact_id, stream),
                )
                focused.append(f"[{stream}]\n{body}" if len(record.streams) > 1 else body)
            elif status == "full" and len(text) <= settings.artifacts.display_max_chars // max(1, len(record.streams)):
                focused.append(f"[{stream}]\n{text}" if len(record.streams) > 1 else text)
            else:
                fallback = True
        if mode == "shadow" or fallback or not focused:
            return self.bounded(artifact_id)
        return "\n".join(focused)
