"""The focus reflex: what a judge is asked about a manifest, how its answer is checked and shown. Pure.

The pipeline owns the mode (``FocusSettings.mode``); this module gives it the pieces:

- ``off``: nothing here runs; the artifact store's bounded view is presented.
- ``shadow``: :func:`build_focus_request`, the judge, :func:`apply_focus`, then the decision and the manifest are
  journaled; the bounded view is presented unchanged.
- ``on``: as shadow; then a ``select`` decision is presented with :func:`present_focused`, while ``full`` and
  ``compute_or_retrieve`` fall back to the bounded view.

Replay recomputes a journaled decision with :func:`apply_focus` from the journaled manifest and answers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from executor.config import ArtifactSettings
from executor.errors import JudgeError
from executor.focus.sections import Manifest, Section, stream_digest, stream_lines
from executor.models import Answer, JudgmentRequest, Question, QuestionTable

__all__ = [
    "FOCUS_TABLE",
    "FocusDecision",
    "FocusStatus",
    "LinesGetter",
    "apply_focus",
    "build_focus_request",
    "present_focused",
]

FocusStatus = Literal["select", "full", "compute_or_retrieve"]
"""``select``: present only some sections; ``full``: the output is small enough to be read as is;
``compute_or_retrieve``: nothing stands out in a large output, the agent should search or compute."""

LinesGetter = Callable[[int, int], Sequence[str]]
"""Returns the stream's lines ``first..last`` (1-based, inclusive), without their newlines."""

_STATUSES: tuple[FocusStatus, ...] = ("select", "full", "compute_or_retrieve")
_CONTEXT_MAX_CHARS = 2_000
_DEFAULTS = ArtifactSettings()

FOCUS_TABLE = QuestionTable(
    reflex="focus",
    version=1,
    questions=(
        Question(
            id="decision",
            text=(
                "How should this command's output be shown to the agent? 'select': only some sections matter "
                "(errors, failures, tracebacks, warnings, or what the intent asks about); 'full': the output is "
                "small enough to show as is; 'compute_or_retrieve': the output is large and nothing in particular "
                "stands out, so the agent should search or compute over it instead of reading it."
            ),
            answer="choice",
            choices=_STATUSES,
        ),
        Question(
            id="sections",
            text=(
                "If the decision is 'select': the ids of the sections to show (from manifest.sections[].id), most "
                "important first, as few as serve the intent. Otherwise an empty list."
            ),
            answer="ids",
        ),
    ),
)
"""The focus reflex's questions; its version is journaled with every focus judgment."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class FocusDecision(_Model):
    """A validated focus judgment, bound to the manifest it was made from."""

    status: FocusStatus
    """What to present."""
    section_ids: tuple[str, ...]
    """For ``select``: the chosen section ids, most important first, without duplicates; empty otherwise."""
    manifest_hash: str
    """The manifest the ids refer to."""


def _cap(text: str) -> str:
    return text if len(text) <= _CONTEXT_MAX_CHARS else text[: _CONTEXT_MAX_CHARS - 1] + "…"


def build_focus_request(
    manifest: Manifest,
    *,
    command: str,
    intent: str | None,
    session_id: str,
    head_lines: int = _DEFAULTS.view_head_lines,
    budget_chars: int = _DEFAULTS.display_max_chars,
) -> JudgmentRequest:
    """The focus judgment to ask about one stream.

    The material is data only: the manifest (as JSON), the command and the intent (each cut to 2000
    characters), and the presentation limits a judge needs to tell "small" from "large".

    Args:
        manifest: the stream's manifest from :func:`~executor.focus.sections.split_sections`.
        command: the command that produced the stream.
        intent: what the agent said it is looking for, if anything.
        session_id: the session the judgment is charged to.
        head_lines: lines the bounded view shows (``ArtifactSettings.view_head_lines``).
        budget_chars: characters one presented view may hold (``ArtifactSettings.display_max_chars``).
    """
    return JudgmentRequest(
        table=FOCUS_TABLE,
        material={
            "command": _cap(command),
            "intent": None if intent is None else _cap(intent),
            "limits": {"head_lines": head_lines, "budget_chars": budget_chars},
            "manifest": manifest.model_dump(mode="json"),
        },
        session_id=session_id,
    )


def apply_focus(manifest: Manifest, answers: Mapping[str, Answer]) -> FocusDecision:
    """Validate a judge's answers to :data:`FOCUS_TABLE` against the manifest.

    Raises:
        JudgeError: a missing or ill-typed answer, an unknown status, an unknown section id, or
            ``select`` with no sections. The pipeline then falls back to the bounded view.
    """
    status = answers.get("decision")
    if not isinstance(status, str) or status not in _STATUSES:
        raise JudgeError(f"focus answer 'decision' must be one of {', '.join(_STATUSES)}; got {status!r}")
    raw_ids = answers.get("sections", ())
    if isinstance(raw_ids, str) or not isinstance(raw_ids, tuple | list):
        raise JudgeError(f"focus answer 'sections' must be a list of section ids; got {type(raw_ids).__name__}")
    ids: list[str] = []
    for section_id in raw_ids:
        if not isinstance(section_id, str):
            raise JudgeError(f"focus answer 'sections' holds a non-string id {section_id!r}")
        try:
            manifest.section(section_id)
        except KeyError:
            raise JudgeError(
                f"focus answer names section {section_id[:40]!r}, which manifest {manifest.manifest_hash[:12]} "
                f"does not have (it has S1..S{len(manifest.sections)})"
            ) from None
        if section_id not in ids:
            ids.append(section_id)
    if status == "select" and not ids:
        raise JudgeError("focus answer 'select' names no sections; select at least one or answer 'full'")
    checked: FocusStatus = next(known for known in _STATUSES if known == status)
    return FocusDecision(
        status=checked,
        section_ids=tuple(ids) if checked == "select" else (),
        manifest_hash=manifest.manifest_hash,
    )


def _range(first: int, last: int) -> str:
    return f"{first}" if first == last else f"{first}-{last}"


def _first_unshown(shown: Sequence[tuple[int, int]]) -> int:
    """The first line no shown range holds (where reading the rest starts)."""
    line = 1
    for first, last in sorted(shown):
        if first > line:
            break
        line = max(line, last + 1)
    return line


def _receipt(
    shown: Sequence[tuple[int, int]],
    total_sections: int,
    total_lines: int,
    artifact_id: str,
    recover: Callable[[int], str] | None,
) -> str:
    ranges = ", ".join(_range(first, last) for first, last in shown)
    how = (
        recover(min(_first_unshown(shown), total_lines))
        if recover is not None
        else f"use read_output or search_output on artifact {artifact_id}"
    )
    return (
        f"[focus: showing {len(shown)} of {total_sections} sections (lines {ranges} of {total_lines}); "
        f"{how} to recover the rest]"
    )


def present_focused(
    source: str | LinesGetter,
    manifest: Manifest,
    decision: FocusDecision,
    *,
    artifact_id: str,
    budget_chars: int,
    recover: Callable[[int], str] | None = None,
) -> str:
    """The focused view of a ``select`` decision: the chosen sections, then a coverage receipt.

    Sections are taken most important first while they fit in ``budget_chars`` (the first one that
    does not fit is cut at a line boundary, a lone long line at a character), then shown in stream
    order, each headed by the true line range it shows. The receipt names the shown ranges and how
    to recover the rest. Nothing of the judge's reasoning or scoring is shown. The text is raw: the
    pipeline sanitizes it like any other view.

    Args:
        source: the whole stream text, or a function returning lines by 1-based inclusive range.
        manifest: the stream's manifest.
        decision: a ``select`` decision validated against ``manifest``.
        artifact_id: the artifact the stream is stored in, named in the receipt.
        budget_chars: characters the view may hold; the receipt is always shown whole.
        recover: the call that reads the stream from a given line, in the reader's words (default: names the
            tools); the receipt shows it from the first line not shown.

    Raises:
        ValueError: the decision is not ``select``, belongs to another manifest, or the text is not the
            manifest's stream.
    """
    if decision.status != "select":
        raise ValueError(f"only a 'select' decision has a focused view; '{decision.status}' shows the bounded view")
    if decision.manifest_hash != manifest.manifest_hash:
        raise ValueError("the focus decision was made for another manifest; judge this manifest first")
    if isinstance(source, str):
        if stream_digest(source) != manifest.stream_sha256:
            raise ValueError("the text is not the stream this manifest describes")
        all_lines = stream_lines(source)

        def get_lines(first: int, last: int) -> Sequence[str]:
            return all_lines[first - 1 : last]

        get: LinesGetter = get_lines
    else:
        get = source
    chosen: list[Section] = [manifest.section(section_id) for section_id in decision.section_ids]
    reserve = (
        len(
            _receipt(
                [(s.start_line, s.end_line) for s in chosen],
                len(manifest.sections),
                manifest.line_count,
                artifact_id,
                recover,
            )
        )
        + 2
    )
    room = budget_chars - reserve
    blocks: list[tuple[int, int, str]] = []
    for section in chosen:
        header_for = f"[lines {_range(section.start_line, section.end_line)}]\n"
        lines = list(get(section.start_line, section.end_line))
        body = "".join(line + "\n" for line in lines)
        if len(header_for) + len(body) + 1 <= room:
            blocks.append((section.start_line, section.end_line, body))
            room -= len(header_for) + len(body) + 1
            continue
        # Cut this section to what fits, then stop: later sections matter less.
        kept: list[str] = []
        used = len(header_for) + 1 + 64  # the longer header of a cut section
        for line in lines:
            if used + len(line) + 1 > room:
                if not kept and room - used > 40:
                    cut = room - used - 30
                    kept.append(f"{line[:cut]}… [line cut at {cut} of {len(line)} characters]")
                break
            kept.append(line)
            used += len(line) + 1
        if kept:
            last = section.start_line + len(kept) - 1
            blocks.append((section.start_line, last, "".join(line + "\n" for line in kept)))
        break
    blocks.sort()
    parts: list[str] = []
    for first, last, body in blocks:
        section = next(s for s in chosen if s.start_line == first)
        note = "" if last == section.end_line else f" (section continues to line {section.end_line})"
        parts.append(f"[lines {_range(first, last)}{note}]\n{body}")
    receipt = _receipt(
        [(first, last) for first, last, _ in blocks], len(manifest.sections), manifest.line_count, artifact_id, recover
    )
    return "\n".join([*parts, receipt])
