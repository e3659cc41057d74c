"""The screens in front of the sanitizer's regexes: the injection detector and the credential redactor search a text
only if it holds a trigger of some pattern, so every text a pattern matches must hold one of that pattern's triggers
(hypothesis draws matches of each pattern)."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from executor.focus.sanitize import _CREDENTIALS, _Redactor
from executor.injection import _INSTRUCTION, _PATTERNS, _matches


@pytest.mark.parametrize("index", range(len(_PATTERNS)))
# Hypothesis draws a match of a `\b` by drawing and filtering, so patterns made of word boundaries filter many draws:
# that is the strategy's cost, not a sign of a narrow domain.
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(data=st.data())
def test_every_match_holds_one_of_its_patterns_triggers(index: int, data: st.DataObject) -> None:
    pattern, triggers = _PATTERNS[index]
    text = data.draw(st.from_regex(re.compile(pattern), alphabet=st.characters(max_codepoint=127)))
    assert any(trigger in text for trigger in triggers), f"{text!r} matches pattern {index} without a trigger"
    assert _matches(text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("abcdefghijklmnopqrstuvwxyz <>|[]/:-'.\"_"), max_size=80))
def test_the_screen_never_changes_the_answer(text: str) -> None:
    """On any text the screened match is the regex's own answer."""
    assert _matches(text) == (_INSTRUCTION.search(text) is not None)


@pytest.mark.parametrize("index", range(len(_CREDENTIALS)))
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_every_credential_match_holds_one_of_its_triggers(index: int, data: st.DataObject) -> None:
    """The credential redactor's screen: an ASCII text a pattern matches holds one of its triggers (casefolded for a
    case-blind pattern), and is redacted."""
    kind, pattern, triggers = _CREDENTIALS[index]
    text = data.draw(st.from_regex(pattern, alphabet=st.characters(max_codepoint=127)))
    seen = text.casefold() if pattern.flags & re.IGNORECASE else text
    assert any(trigger in seen for trigger in triggers), f"{text!r} matches {kind} without a trigger"
    assert "[REDACTED:" in _Redactor().text(text)
