"""Focus and sanitize: section manifests, focus selection and the sanitizer for presented views (pure)."""

from __future__ import annotations

from executor.focus.sanitize import (
    SANITIZE_TABLE,
    UNTRUSTED_MARKER,
    SanitizeCounts,
    SanitizedView,
    build_sanitize_request,
    flagged_lines,
    instruction_lines,
    sanitize,
)
from executor.focus.sections import (
    SPLITTER_VERSION,
    Manifest,
    Section,
    SectionKind,
    split_sections,
    stream_digest,
    stream_lines,
)
from executor.focus.select import (
    FOCUS_TABLE,
    FocusDecision,
    FocusStatus,
    LinesGetter,
    apply_focus,
    build_focus_request,
    present_focused,
)

__all__ = [
    "FOCUS_TABLE",
    "SANITIZE_TABLE",
    "SPLITTER_VERSION",
    "UNTRUSTED_MARKER",
    "FocusDecision",
    "FocusStatus",
    "LinesGetter",
    "Manifest",
    "SanitizeCounts",
    "SanitizedView",
    "Section",
    "SectionKind",
    "apply_focus",
    "build_focus_request",
    "build_sanitize_request",
    "flagged_lines",
    "instruction_lines",
    "present_focused",
    "sanitize",
    "split_sections",
    "stream_digest",
    "stream_lines",
]
