"""The one prompt-injection detector: which lines of tool output address the agent with instructions. Pure.

Two users share it, so they cannot drift: the sanitizer's built-in floor (:func:`executor.focus.sanitize.
instruction_lines`, which marks lines even when no judge answers: the fail-closed fallback) and the embedded
``rules`` judge's sanitize answers (:mod:`executor.gate.judge.rules_sanitize`). On the same view both flag the same
lines; a test runs both over one corpus.

Lines are matched as a reader would take them (:func:`reads_as`): escape notation the sanitizer wrote
(``<U+200B>``, ``\\x1b``, ``\\r``, ``{×N}``) and the untrusted marker are dropped, compatibility forms folded
(NFKC: fullwidth and styled letters read plain), whitespace is collapsed and case folded, so ``ig<U+200B>nore`` and
``Ｉｇｎｏｒｅ`` still read ``ignore``. A line with notation is also read with the notation as a break between words
(``ok<U+200B>Ignore`` reads ``ok ignore``) and from its last carriage return (what a terminal shows over the line's
start), words run together where something invisible stood (``okIgnore``) are read apart, and a line shown after
its number (``12: SYSTEM: ...``) is read without it too. A phrase split over two consecutive non-blank lines flags
both.
"""

from __future__ import annotations

import functools
import itertools
import re
import unicodedata
from collections.abc import Sequence
from typing import Final

__all__ = ["INSTRUCTION_PATTERNS", "UNTRUSTED_MARKER", "flagged_indexes", "reads_as"]

UNTRUSTED_MARKER: Final = "[untrusted tool output] "
"""Prefix the sanitizer puts on a flagged line; it is not part of what the line says."""

_PATTERNS: Final[tuple[tuple[str, tuple[str, ...]], ...]] = (
    # (pattern, triggers): every text the pattern matches contains one of its triggers (a test draws matches of
    # each pattern and checks), so a line holding none of them is not searched at all.
    # Attempts to replace the agent's instructions.
    (
        r"\b(ignore|disregard|forget|override|bypass)\b.{0,40}?\b(previous|prior|above|earlier|preceding|all|your|"
        r"the|any|system|safety)\b.{0,20}?\b(instructions?|prompts?|directions|rules|guidelines|messages|context|"
        r"policy|policies|restrictions)\b",
        ("ignore", "disregard", "forget", "override", "bypass"),
    ),
    # Role claims and chat-template tokens.
    (
        r"^\W{0,8}(system|assistant|developer|human)(\s+(prompt|message|note|override))?\s*:",
        ("system", "assistant", "developer", "human"),
    ),
    (
        r"<\|?(im_start|im_end|system|endoftext|assistant|user)\|?>|\[/?inst\]|<</?sys>>|</?(system|instructions?)>",
        ("im_start", "im_end", "system", "endoftext", "assistant", "user", "inst]", "sys>>", "instruction"),
    ),
    (
        r"\byou are now\b|\bfrom now on,? you\b|\bnew (system )?instructions\b|\byour new (task|goal|role)\b",
        ("you are now", "from now on", "instructions", "your new"),
    ),
    # Claims of approval aimed at the gate.
    (
        r"\bpre-?approved\b|\b(command|action|request)s? (is|are|has been|have been) (approved|authori[sz]ed|safe)\b",
        ("approved", "authori", "safe"),
    ),
    (
        r"\b(answer|respond|reply|output|say)\s+(with\s+)?[\"']?allow\b|\bauto-?approve",
        ("allow", "approve"),
    ),
    # Direct address.
    (
        r"\b(note|message|attention|instructions?|notice) (to|for) (the |any |all )?(ai|agent|assistant|llm|model)s?\b",
        ("note", "message", "attention", "instruction", "notice"),
    ),
    (
        r"\b(ai|llm|language model) (agents?|assistants?|models?)\b.{0,30}?\b(must|should|need to|are required to)\b",
        ("must", "should", "need to", "required to"),
    ),
    (
        r"\b(dear|hey|hello) (ai|agent|assistant|claude|chatgpt|gpt|copilot)\b",
        ("dear", "hey", "hello"),
    ),
    # Requests to act.
    (
        r"\b(now|please|you must|you should|immediately) (run|execute|write|append|send|upload|delete|curl)\b",
        ("now ", "please ", "you must ", "you should ", "immediately "),
    ),
    (
        r"\b(curl|wget)\b[^|]{0,200}\|\s*(sudo\s+)?(ba|z)?sh\b",
        ("curl", "wget"),
    ),
    (
        r"\b(write|append|add)\b.{0,40}?(authorized_keys|\.bashrc|\.ssh/|/etc/sudoers|crontab)",
        ("authorized_keys", ".bashrc", ".ssh/", "/etc/sudoers", "crontab"),
    ),
    (
        r"\b(do not|don't|never) (tell|inform|mention|show|report)\b.{0,30}?\b(user|human|operator)\b",
        ("do not", "don't", "never"),
    ),
)

INSTRUCTION_PATTERNS: Final[tuple[str, ...]] = tuple(pattern for pattern, _ in _PATTERNS)
"""Instruction-like phrases, matched on :func:`reads_as` of a line (lowercase). Bounded repeats only (no
backtracking blow-up on hostile text)."""

_INSTRUCTION: Final = re.compile("|".join(f"(?:{pattern})" for pattern in INSTRUCTION_PATTERNS))
_TRIGGERS: Final[tuple[str, ...]] = tuple(sorted({trigger for _, triggers in _PATTERNS for trigger in triggers}))
"""What any match contains: a text without one of these is not searched (substring tests are far cheaper than the
search, which tries every alternative at every position)."""
_NOTATION: Final = re.compile(
    # A terminal control sequence (CSI: ESC [ parameters final byte) is notation whole: a terminal shows none of it.
    r"\\x1b\[[0-9;?]*[ -/]*[@-~]|"
    r"<U\+[0-9A-F]{4,6}>(?:\{×\d+\})?|\\x[0-9a-f]{2}(?:\{×\d+\})?|\\r(?:\{×\d+\})?|" + re.escape(UNTRUSTED_MARKER)
)
_SPACES: Final = re.compile(r"\s+")


def reads_as(escaped: str) -> str:
    """An escaped line as a reader would take it: notation and marker gone, compatibility forms folded (NFKC:
    fullwidth ``Ｉｇｎｏｒｅ`` reads ``Ignore``, ligatures and styled letters read plain), spaces collapsed,
    casefolded."""
    return _fold(_NOTATION.sub("", escaped))


def _fold(text: str) -> str:
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
    return _SPACES.sub(" ", text).casefold().strip()


_CAMEL: Final = re.compile(r"([a-z])([A-Z])")
_MARKED: Final = re.compile("^(?:" + re.escape(UNTRUSTED_MARKER) + ")+")
_LINE_NUMBER: Final = re.compile(r"\s*[0-9]+(?:[:-][0-9]+)?[:\t-]\s?(?:\[preview from char [0-9]+;[^\]]*\] )?")
"""A line number before a line (a search hit ``12: ``, ``grep -n``'s ``12:``, ``nl``'s tab, a preview's note)."""
_CR: Final = re.compile(r"\\r(?:\{×\d+\})?")


def _other_readings(escaped: str) -> tuple[str, ...]:
    """The other ways a reader may take a line holding escape notation: as a break between words
    (``ok<U+200B>Ignore``, ``err\\rIgnore`` read ``ok ignore``: dropped, it would glue them into one word no
    pattern sees), and what follows its last carriage return alone (a terminal shows it over the line's start)."""
    readings = [_fold(_NOTATION.sub(" ", escaped))]
    ends = [match.end() for match in _CR.finditer(escaped)]
    if ends:
        readings.append(reads_as(escaped[ends[-1] :]))
    return tuple(readings)


_CACHED_LINE_CHARS: Final = 512
"""Lines up to this long have their reading and match remembered (results repeat the same short lines)."""


@functools.lru_cache(maxsize=4096)
def _read_short(line: str) -> tuple[str, bool]:
    return _read_long(line)


def _read(line: str) -> tuple[str, bool]:
    if len(line) <= _CACHED_LINE_CHARS:
        return _read_short(line)
    return _read_long(line)


def _read_long(line: str) -> tuple[str, bool]:
    """The line's reading (notation dropped) and whether it, or another reading a person may make of its notation,
    matches."""
    text = reads_as(line)
    if _matches(text):
        return text, True
    others: list[str] = []
    bare = _MARKED.sub("", line, count=1)
    numbered = _LINE_NUMBER.match(bare)
    if numbered is not None:
        # A line shown after its number ('12: SYSTEM: ...' in a search page, `grep -n`, `nl`): read without it too,
        # so a pattern anchored at the line's start (a role claim) still sees it there.
        rest = bare[numbered.end() :]
        others.append(reads_as(rest))
        if _NOTATION.search(rest) is not None:
            others += _other_readings(rest)
    if _NOTATION.search(line) is not None:
        others += _other_readings(line)
    if _may_match(text) and _CAMEL.search(line) is not None:
        # Words run together where something invisible stood between them (a colour code the sanitizer removed):
        # ``okIgnore all previous instructions`` reads ``ok ignore ...``.
        others.append(_fold(_CAMEL.sub(r"\1 \2", _NOTATION.sub(" ", line))))
    return text, any(_matches(other) for other in others)


def _may_match(text: str) -> bool:
    return any(trigger in text for trigger in _TRIGGERS)


def _matches(text: str) -> bool:
    if not _may_match(text):
        return False
    if len(text) <= 2 * _CACHED_LINE_CHARS + 1:  # one short line, or two joined
        return _matches_short(text)
    return _INSTRUCTION.search(text) is not None


@functools.lru_cache(maxsize=4096)
def _matches_short(text: str) -> bool:
    return _INSTRUCTION.search(text) is not None


def flagged_indexes(escaped_lines: Sequence[str]) -> set[int]:
    """The 0-based indexes of the lines (escaped as the sanitizer shows them) that address the agent.

    A line is flagged when it matches alone, or when it and the next non-blank line match only together (a
    phrase split over the break; blank lines in between are skipped, so they do not hide it).
    """
    read = [(index, *_read(line)) for index, line in enumerate(escaped_lines)]
    read = [entry for entry in read if entry[1]]
    # Every line and every joined pair below is a substring of the whole joined: without a trigger in it, none
    # can match (one screen instead of one per line and pair).
    if not _may_match(" ".join(text for _, text, _ in read)):
        return set()
    alone = {index for index, _, matched in read if matched}
    flagged = set(alone)
    for (first, first_text, _), (second, second_text, _) in itertools.pairwise(read):
        if first in alone or second in alone:
            continue
        if _matches(f"{first_text} {second_text}"):
            flagged.update((first, second))
    return flagged
