"""The screens in front of the sanitizer's regexes: the injection detector and the credential redactor search a text
only if it holds a trigger of some pattern, so every text a pattern matches must hold one of that pattern's triggers
(hypothesis draws matches of each pattern). The detector's other readings of a line (look-alike letters, combining
marks, spelled-out words, separators between words) are drawn from the same matches: each still reads as one."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from executor.focus.sanitize import _CREDENTIALS, _Redactor
from executor.injection import (
    _ACROSS_SEPARATORS,
    _INSTRUCTION,
    _LOOK_ALIKES,
    _PATTERNS,
    _collapse,
    _fold,
    _instruction_in,
    _join_spelled,
    _letters,
    _matches,
    _may_match,
)

_ALIKES = {latin: alikes for latin, alikes in _LOOK_ALIKES}
_MARKS = "\u0300\u0301\u0307\u0308\u0323\u0338\u20dd"
"""Combining marks drawn over letters: grave, acute, dot above, diaeresis, dot below, long solidus, enclosing circle."""
_WORD = re.compile("[a-z]+(?:'[a-z]+)?")


@pytest.mark.parametrize("index", range(len(_PATTERNS)))
# Hypothesis draws a match of a `\b` by drawing and filtering, so patterns made of word boundaries filter many draws:
# that is the strategy's cost, not a sign of a narrow domain.
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(data=st.data())
def test_every_match_holds_one_of_its_patterns_triggers(index: int, data: st.DataObject) -> None:
    pattern, triggers, _ = _PATTERNS[index]
    text = data.draw(st.from_regex(re.compile(pattern), alphabet=st.characters(max_codepoint=127)))
    assert any(trigger in text for trigger in triggers), f"{text!r} matches pattern {index} without a trigger"
    assert _matches(text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("abcdefghijklmnopqrstuvwxyz <>|[]/:-'.\"_"), max_size=80))
def test_the_screen_never_changes_the_answer(text: str) -> None:
    """On any text the screened match is the regex's own answer, for every pattern and for those read across
    separators."""
    assert _matches(text) == (_INSTRUCTION.search(text) is not None)
    assert _matches(text, across_separators=True) == (_ACROSS_SEPARATORS.search(text) is not None)


def _disguised(char: str) -> st.SearchStrategy[str]:
    alikes = _ALIKES.get(char.lower(), "")
    letter = st.sampled_from(char + alikes) if char.isascii() and char.isalpha() else st.just(char)
    if not char.isalpha():
        return letter
    return st.tuples(letter, st.text(alphabet=st.sampled_from(_MARKS), max_size=2)).map("".join)


@pytest.mark.parametrize("index", range(len(_PATTERNS)))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(data=st.data())
def test_a_match_in_look_alike_letters_reads_as_the_match(index: int, data: st.DataObject) -> None:
    """A match with letters swapped for look-alikes of other scripts and combining marks drawn over them reads as
    the match itself."""
    pattern, _, _ = _PATTERNS[index]
    text = data.draw(st.from_regex(re.compile(pattern), alphabet=st.characters(max_codepoint=127)))
    disguised = "".join(data.draw(_disguised(char)) for char in text)
    assert _fold(disguised) == _fold(text)
    assert _instruction_in(_letters(disguised))


@pytest.mark.parametrize("index", [index for index, (_, _, across) in enumerate(_PATTERNS) if across])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(data=st.data(), separator=st.sampled_from(["_", "__", "-", ".", "+", "~", "\u00b7"]))
def test_a_match_written_as_one_name_still_matches(index: int, data: st.DataObject, separator: str) -> None:
    """A match of a pattern read across separators, its words joined by a separator into one name, still matches."""
    pattern, _, _ = _PATTERNS[index]
    text = data.draw(st.from_regex(re.compile(pattern), alphabet=st.characters(max_codepoint=127)))
    words = re.sub(r"[^a-z']+", " ", text.lower()).split()
    assume(all(_WORD.fullmatch(word) for word in words) and _matches(" ".join(words)))
    name = separator.join(words)
    assert _instruction_in(_letters(name)), name


_ALONE_AT_END = re.compile(r"(?<![^\W_])[^\W\d_]$")
_ALONE_AT_START = re.compile(r"^[^\W\d_](?![^\W_])")


@pytest.mark.parametrize("index", range(len(_PATTERNS)))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(data=st.data())
def test_a_match_with_a_word_spelled_out_still_matches(index: int, data: st.DataObject) -> None:
    """A match with one of its words spelled out letter by letter (``i g n o r e``) still matches (and passes the
    view's screen), unless a single letter stands next to it, where the word's end cannot be told."""
    pattern, _, _ = _PATTERNS[index]
    tokens = data.draw(st.from_regex(re.compile(pattern), alphabet=st.characters(max_codepoint=127))).split(" ")
    spellable = [
        at
        for at, token in enumerate(tokens)
        if re.fullmatch("[a-z]{2,}", token)
        and (at == 0 or _ALONE_AT_END.search(tokens[at - 1]) is None)
        and (at == len(tokens) - 1 or _ALONE_AT_START.search(tokens[at + 1]) is None)
    ]
    if not spellable:
        return
    at = data.draw(st.sampled_from(spellable))
    spelled = " ".join([*tokens[:at], " ".join(tokens[at]), *tokens[at + 1 :]])
    assert _instruction_in(_letters(spelled)), spelled
    joined = _collapse(_letters(spelled))
    assert _may_match(joined) or _may_match(_join_spelled(joined))


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
