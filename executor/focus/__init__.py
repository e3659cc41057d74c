"""Focus and sanitize: section manifests, focus selection and the sanitizer for presented views (pure)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from executor._lazy import lazy_getattr

# ``sanitize`` names both a submodule and its function: importing the submodule binds the package attribute to the
# module, which a lazy ``__getattr__`` never overrides. Bound here instead (the module is pure: no trio, no docker).
from executor.focus.sanitize import sanitize

if TYPE_CHECKING:
    from executor.focus.sanitize import (
        SANITIZE_TABLE,
        UNTRUSTED_MARKER,
        SanitizeCounts,
        SanitizedView,
        build_sanitize_request,
        flagged_lines,
        instruction_lines,
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

_HOMES = {
    "SANITIZE_TABLE": "executor.focus.sanitize",
    "UNTRUSTED_MARKER": "executor.focus.sanitize",
    "SanitizeCounts": "executor.focus.sanitize",
    "SanitizedView": "executor.focus.sanitize",
    "build_sanitize_request": "executor.focus.sanitize",
    "flagged_lines": "executor.focus.sanitize",
    "instruction_lines": "executor.focus.sanitize",
    "SPLITTER_VERSION": "executor.focus.sections",
    "Manifest": "executor.focus.sections",
    "Section": "executor.focus.sections",
    "SectionKind": "executor.focus.sections",
    "split_sections": "executor.focus.sections",
    "stream_digest": "executor.focus.sections",
    "stream_lines": "executor.focus.sections",
    "FOCUS_TABLE": "executor.focus.select",
    "FocusDecision": "executor.focus.select",
    "FocusStatus": "executor.focus.select",
    "LinesGetter": "executor.focus.select",
    "apply_focus": "executor.focus.select",
    "build_focus_request": "executor.focus.select",
    "present_focused": "executor.focus.select",
}

__getattr__ = lazy_getattr(__name__, _HOMES)
