"""Focus requests, decisions and the focused view."""

from __future__ import annotations

import re

import pytest

import executor.focus
from executor.config import load_settings
from executor.errors import ConfigError, JudgeError
from executor.focus.sections import split_sections, stream_lines
from executor.focus.select import FOCUS_TABLE, FocusDecision, apply_focus, build_focus_request, present_focused
from executor.gate.judge import rules_focus

LOG = "".join(f"step {n}: compiled module_{n} fine\n\n" for n in range(1, 41))
LOG += 'Traceback (most recent call last):\n  File "/a.py", line 3, in <module>\n    go()\nRuntimeError: disk full\n'
LOG += "".join(f"\ncleanup {n} fine\n" for n in range(5))


def test_request_material_is_data() -> None:
    """A focus request carries the focus table, the manifest as JSON, the command, the intent and the limits."""
    manifest = split_sections(LOG, max_sections=100)
    request = build_focus_request(
        manifest, command="make", intent="why is the disk full", session_id="s1", head_lines=10, budget_chars=500
    )
    assert request.table == FOCUS_TABLE and request.table.reflex == "focus"
    assert request.material["manifest"]["manifest_hash"] == manifest.manifest_hash
    assert request.material["limits"] == {"head_lines": 10, "budget_chars": 500}
    assert request.material["command"] == "make" and request.material["intent"] == "why is the disk full"
    long = build_focus_request(manifest, command="x" * 10_000, intent=None, session_id="s1")
    assert len(long.material["command"]) == 2_000 and long.material["intent"] is None


def test_apply_focus_validates_ids_and_status() -> None:
    """Unknown section ids, unknown statuses and an empty select are refused; duplicates are dropped."""
    manifest = split_sections(LOG, max_sections=100)
    decision = apply_focus(manifest, {"decision": "select", "sections": ("S41", "S2", "S41")})
    assert decision == FocusDecision(status="select", section_ids=("S41", "S2"), manifest_hash=manifest.manifest_hash)
    full = apply_focus(manifest, {"decision": "full", "sections": ("S1",)})
    assert full.status == "full" and full.section_ids == ()
    with pytest.raises(JudgeError, match="names section 'S999'"):
        apply_focus(manifest, {"decision": "select", "sections": ("S999",)})
    with pytest.raises(JudgeError, match="'decision' must be one of"):
        apply_focus(manifest, {"decision": "everything", "sections": ()})
    with pytest.raises(JudgeError, match="names no sections"):
        apply_focus(manifest, {"decision": "select", "sections": ()})
    with pytest.raises(JudgeError, match="must be a list"):
        apply_focus(manifest, {"decision": "select", "sections": "S1"})


def test_focused_view_shows_only_chosen_sections_with_receipt() -> None:
    """The focused view holds the chosen sections under their true line ranges and a coverage receipt."""
    manifest = split_sections(LOG, max_sections=1000)
    request = build_focus_request(manifest, command="make", intent=None, session_id="s1")
    decision = apply_focus(manifest, rules_focus.answer(request))
    assert decision.status == "select"
    traceback = next(s for s in manifest.sections if s.kind == "traceback")
    assert decision.section_ids == (traceback.id,)
    view = present_focused(LOG, manifest, decision, artifact_id="s1.a7", budget_chars=8_000)
    lines = stream_lines(LOG)
    assert view.startswith(f"[lines {traceback.start_line}-{traceback.end_line}]\n")
    assert lines[traceback.start_line - 1] in view and "RuntimeError: disk full" in view
    assert "step 1:" not in view and "cleanup" not in view
    assert view.endswith(
        f"[focus: showing 1 of {len(manifest.sections)} sections (lines {traceback.start_line}-{traceback.end_line} "
        f"of {manifest.line_count}); use read_output or search_output on artifact s1.a7 to recover the rest]"
    )


def test_focused_view_orders_by_line_and_never_shows_scores() -> None:
    """Several sections appear in stream order whatever the judge's order, with no score or rank in the text."""
    manifest = split_sections(LOG, max_sections=1000)
    decision = apply_focus(manifest, {"decision": "select", "sections": ("S41", "S3")})
    view = present_focused(LOG, manifest, decision, artifact_id="s1.a7", budget_chars=8_000)
    assert view.index("step 3:") < view.index("RuntimeError")
    assert "showing 2 of" in view and "lines 5, 81-84 of" in view
    assert not re.search(r"score|rank|tier|overlap|confidence|\d\.\d", view, re.IGNORECASE)


def test_focused_view_respects_the_budget() -> None:
    """A section larger than the budget is cut at a line and the header and receipt say which lines are shown."""
    text = "ERROR begin\n" + "".join(f"ERROR detail {n:04d}\n" for n in range(500))
    manifest = split_sections(text, max_sections=10)
    decision = apply_focus(manifest, {"decision": "select", "sections": ("S1",)})
    view = present_focused(text, manifest, decision, artifact_id="s1.a2", budget_chars=1_000)
    assert len(view) <= 1_000
    header = view.split("\n", 1)[0]
    match = re.fullmatch(r"\[lines 1-(\d+) \(section continues to line 501\)\]", header)
    assert match is not None
    shown_last = int(match.group(1))
    assert f"ERROR detail {shown_last - 2:04d}" in view and f"ERROR detail {shown_last - 1:04d}" not in view
    assert f"(lines 1-{shown_last} of 501)" in view
    # The recovery call starts at the first line not shown (it re-read from line 1).
    called: list[int] = []

    def recover(line: int) -> str:
        called.append(line)
        return f"read from {line}"

    view = present_focused(text, manifest, decision, artifact_id="s1.a2", budget_chars=1_000, recover=recover)
    shown = re.fullmatch(r"\[lines 1-(\d+) \(section continues to line 501\)\]", view.split("\n", 1)[0])
    assert shown is not None and called[-1] == int(shown.group(1)) + 1
    assert view.endswith(f"read from {int(shown.group(1)) + 1} to recover the rest]")


def test_focused_view_from_a_line_getter() -> None:
    """A line getter gives the same view as the whole text."""
    manifest = split_sections(LOG, max_sections=1000)
    decision = apply_focus(manifest, {"decision": "select", "sections": ("S2",)})
    lines = stream_lines(LOG)
    calls: list[tuple[int, int]] = []

    def getter(first: int, last: int) -> list[str]:
        calls.append((first, last))
        return lines[first - 1 : last]

    by_getter = present_focused(getter, manifest, decision, artifact_id="a", budget_chars=4_000)
    assert by_getter == present_focused(LOG, manifest, decision, artifact_id="a", budget_chars=4_000)
    assert calls == [(3, 3)]


def test_focused_view_refuses_mismatches() -> None:
    """A non-select decision, another manifest's decision, or another text is refused."""
    manifest = split_sections(LOG, max_sections=1000)
    other = split_sections(LOG + "more\n", max_sections=1000)
    decision = apply_focus(manifest, {"decision": "select", "sections": ("S1",)})
    with pytest.raises(ValueError, match="only a 'select' decision"):
        present_focused(
            LOG,
            manifest,
            apply_focus(manifest, {"decision": "full", "sections": ()}),
            artifact_id="a",
            budget_chars=100,
        )
    with pytest.raises(ValueError, match="another manifest"):
        present_focused(LOG, other, decision, artifact_id="a", budget_chars=1_000)
    with pytest.raises(ValueError, match="not the stream"):
        present_focused(LOG + "more\n", manifest, decision, artifact_id="a", budget_chars=1_000)


def test_mode_setting_default_and_rejection() -> None:
    """``focus.mode`` defaults to off, accepts shadow and on, and refuses anything else at load."""
    assert load_settings().focus.mode == "off"
    assert load_settings(overrides={"focus": {"mode": "shadow"}}).focus.mode == "shadow"
    with pytest.raises(ConfigError, match=r"focus\.mode"):
        load_settings(overrides={"focus": {"mode": "sometimes"}})


def test_package_all() -> None:
    """``executor.focus`` exports exactly its public names, and each exists."""
    assert sorted(executor.focus.__all__) == sorted(set(executor.focus.__all__))
    for name in executor.focus.__all__:
        assert getattr(executor.focus, name) is not None
    assert {"split_sections", "apply_focus", "present_focused", "sanitize", "build_sanitize_request"} <= set(
        executor.focus.__all__
    )
