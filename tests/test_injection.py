"""The injection detector's screen: a line is searched only if it holds a trigger of some pattern, so every text a
pattern matches must hold one of that pattern's triggers (drawn from each pattern by hypothesis)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from executor.injection import _INSTRUCTION, _PATTERNS, _matches


@pytest.mark.parametrize("index", range(len(_PATTERNS)))
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_every_match_holds_one_of_its_patterns_triggers(index: int, data: st.DataObject) -> None:
    pattern, triggers = _PATTERNS[index]
    text = data.draw(st.from_regex(re.compile(pattern)))
    assert any(trigger in text for trigger in triggers), f"{text!r} matches pattern {index} without a trigger"
    assert _matches(text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("abcdefghijklmnopqrstuvwxyz <>|[]/:-'.\"_"), max_size=80))
def test_the_screen_never_changes_the_answer(text: str) -> None:
    """On any text the screened match is the regex's own answer."""
    assert _matches(text) == (_INSTRUCTION.search(text) is not None)
