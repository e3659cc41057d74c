"""The embedded rules judge for the focus reflex."""

from __future__ import annotations

import pytest

from executor.errors import JudgeError
from executor.focus.sections import split_sections
from executor.focus.select import FOCUS_TABLE, apply_focus, build_focus_request
from executor.gate.judge.rules_focus import answer
from executor.models import Answer, JudgmentRequest, QuestionTable

NOISE = "".join(f"downloading package_{n} done\n\n" for n in range(60))


def _ask(text: str, *, intent: str | None = None, budget: int = 8_000, head: int = 10) -> dict[str, Answer]:
    manifest = split_sections(text, max_sections=2_000)
    request = build_focus_request(
        manifest, command="run", intent=intent, session_id="s1", head_lines=head, budget_chars=budget
    )
    answers = answer(request)
    apply_focus(manifest, answers)  # every rules answer validates against its manifest
    return answers


def _ids(answers: dict[str, Answer]) -> tuple[str, ...]:
    ids = answers["sections"]
    assert isinstance(ids, tuple)
    return ids


def test_small_output_is_full() -> None:
    """Output no longer than the bounded view is ``full``, even with an error in it."""
    assert _ask("compiling\nerror: missing semicolon\n") == {"decision": "full", "sections": ()}
    assert _ask("") == {"decision": "full", "sections": ()}


def test_failures_and_tracebacks_are_selected_first() -> None:
    """Failure and traceback sections come before plain errors, and warnings come last."""
    text = NOISE + "warning: unused variable x\n\nerror: linker cannot find -lfoo\n\n"
    text += 'Traceback (most recent call last):\n  File "a.py", line 1, in <module>\nValueError: x\n'
    manifest = split_sections(text, max_sections=2_000)
    answers = _ask(text)
    assert answers["decision"] == "select"
    kinds = [manifest.section(sid).excerpt for sid in _ids(answers)]
    assert kinds == [
        "Traceback (most recent call last):",
        "error: linker cannot find -lfoo",
        "warning: unused variable x",
    ]


def test_intent_relevance_selects_matching_sections() -> None:
    """With nothing flagged, sections sharing words with the intent are selected, best match first."""
    text = NOISE + "resolved version of requests is 2.31\n\nrequests pinned in lockfile\n"
    answers = _ask(text, intent="which version of requests got resolved?")
    manifest = split_sections(text, max_sections=2_000)
    chosen = [manifest.section(sid).excerpt for sid in _ids(answers)]
    assert answers["decision"] == "select"
    assert chosen == ["resolved version of requests is 2.31", "requests pinned in lockfile"]


def test_large_output_without_signal_is_compute_or_retrieve() -> None:
    """A large output where nothing stands out is ``compute_or_retrieve``; a medium one is ``full``."""
    assert _ask(NOISE * 10) == {"decision": "compute_or_retrieve", "sections": ()}
    assert _ask(NOISE, budget=100_000) == {"decision": "full", "sections": ()}


def test_selection_fits_the_budget() -> None:
    """The judge selects at most what fits in the budget, but always at least one section."""
    text = "".join(f"ERROR {n}: " + "x" * 200 + "\n\n" for n in range(40))
    answers = _ask(text, budget=1_000)
    assert answers["decision"] == "select"
    assert 1 <= len(_ids(answers)) <= 4
    assert len(_ids(_ask(text, budget=300))) == 1


def test_answers_are_deterministic() -> None:
    """The same request always gets the same answers."""
    text = NOISE + "FAILED tests/test_a.py::test_x\n"
    assert _ask(text, intent="test_x") == _ask(text, intent="test_x")


def test_refuses_other_reflexes_and_bad_material() -> None:
    """A non-focus table or malformed material is a JudgeError."""
    table = QuestionTable(reflex="gate", version=1, questions=())
    with pytest.raises(JudgeError, match="asked a 'gate'"):
        answer(JudgmentRequest(table=table, material={}, session_id="s1"))
    with pytest.raises(JudgeError, match="needs a 'manifest'"):
        answer(JudgmentRequest(table=FOCUS_TABLE, material={"manifest": 3}, session_id="s1"))
