"""The one prompt-injection detector: which lines of tool output address the agent with instructions. Pure.

Two users share it, so they cannot drift: the sanitizer's built-in floor (:func:`executor.focus.sanitize.
instruction_lines`, which marks lines even when no judge answers: the fail-closed fallback) and the embedded
``rules`` judge's sanitize answers (:mod:`executor.gate.judge.rules_sanitize`). On the same view both flag the same
lines; a test runs both over one corpus.

Lines are matched as a reader would take them (:func:`reads_as`): escape notation the sanitizer wrote
(``<U+200B>``, ``\\x1b``, ``\\r``, ``{×N}``) and the untrusted marker are dropped, compatibility forms folded
(NFKD: fullwidth and styled letters read plain), whitespace is collapsed and case folded, so ``ig<U+200B>nore`` and
``Ｉｇｎｏｒｅ`` still read ``ignore``. A line with notation is also read with the notation as a break between words
(``ok<U+200B>Ignore`` reads ``ok ignore``) and from its last carriage return (what a terminal shows over the line's
start), words run together where something invisible stood (``okIgnore``) are read apart, and a line shown after
its number (``12: SYSTEM: ...``) is read without it too. A phrase split over two consecutive non-blank lines flags
both.

Letters are read as a reader sees them, not by their code points: a look-alike from another script reads as the
Latin letter it passes for (Cyrillic ``Іgnore``, Greek ``ΙGΝΟRΕ``, small capitals ``ɪɢɴᴏʀᴇ``: a compact table after
Unicode TR39's confusables, :data:`_LOOK_ALIKES`), and combining marks are dropped (``i̇gnore``, i and a combining
dot, reads ``ignore``). A word spelled out letter by letter (``I g n o r e all ...``) is read as the word, and,
for the phrases that read as an instruction even written as an identifier (:data:`_PATTERNS`' third field),
separators between words read as spaces (``ignore_all_previous_instructions``, ``you-are-now``). The other patterns
are not read across separators: identifiers and paths such as ``system_prompt:``, ``request_is_approved`` or
``add_authorized_keys`` are ordinary in code and logs.
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

_PATTERNS: Final[tuple[tuple[str, tuple[str, ...], bool], ...]] = (
    # (pattern, triggers, across separators): every text the pattern matches contains one of its triggers (a test
    # draws matches of each pattern and checks), so a line holding none of them is not searched at all. A pattern
    # read across separators also matches with ``_``, ``-``, ``.`` ... between its words (``you_are_now``): only
    # phrases no ordinary identifier spells.
    # Attempts to replace the agent's instructions.
    (
        r"\b(ignore|disregard|forget|override|bypass)\b.{0,40}?\b(previous|prior|above|earlier|preceding|all|your|"
        r"the|any|system|safety)\b.{0,20}?\b(instructions?|prompts?|directions|rules|guidelines|messages|context|"
        r"policy|policies|restrictions)\b",
        ("ignore", "disregard", "forget", "override", "bypass"),
        True,
    ),
    # Role claims and chat-template tokens.
    (
        r"^\W{0,8}(system|assistant|developer|human)(\s+(prompt|message|note|override))?\s*:",
        ("system", "assistant", "developer", "human"),
        False,
    ),
    (
        r"<\|?(im_start|im_end|system|endoftext|assistant|user)\|?>|\[/?inst\]|<</?sys>>|</?(system|instructions?)>",
        ("im_start", "im_end", "system", "endoftext", "assistant", "user", "inst]", "sys>>", "instruction"),
        False,
    ),
    (
        r"\byou are now\b|\bfrom now on,? you\b|\byour new (task|goal|role)\b",
        ("you are now", "from now on", "your new"),
        True,
    ),
    # Not read across separators: ``new_instructions`` is an ordinary name.
    (r"\bnew (system )?instructions\b", ("instructions",), False),
    # Claims of approval aimed at the gate.
    (
        r"\bpre-?approved\b|\b(command|action|request)s? (is|are|has been|have been) (approved|authori[sz]ed|safe)\b",
        ("approved", "authori", "safe"),
        False,
    ),
    (
        r"\b(answer|respond|reply|output|say)\s+(with\s+)?[\"']?allow\b|\bauto-?approve",
        ("allow", "approve"),
        False,
    ),
    # Direct address.
    (
        r"\b(note|message|attention|instructions?|notice) (to|for) (the |any |all )?(ai|agent|assistant|llm|model)s?\b",
        ("note", "message", "attention", "instruction", "notice"),
        False,
    ),
    (
        r"\b(ai|llm|language model) (agents?|assistants?|models?)\b.{0,30}?\b(must|should|need to|are required to)\b",
        ("must", "should", "need to", "required to"),
        False,
    ),
    (
        r"\b(dear|hey|hello) (ai|agent|assistant|claude|chatgpt|gpt|copilot)\b",
        ("dear", "hey", "hello"),
        False,
    ),
    # Requests to act.
    (
        r"\b(now|please|you must|you should|immediately) (run|execute|write|append|send|upload|delete|curl)\b",
        ("now ", "please ", "you must ", "you should ", "immediately "),
        True,
    ),
    (
        r"\b(curl|wget)\b[^|]{0,200}\|\s*(sudo\s+)?(ba|z)?sh\b",
        ("curl", "wget"),
        False,
    ),
    (
        r"\b(write|append|add)\b.{0,40}?(authorized_keys|\.bashrc|\.ssh/|/etc/sudoers|crontab)",
        ("authorized_keys", ".bashrc", ".ssh/", "/etc/sudoers", "crontab"),
        False,
    ),
    (
        r"\b(do not|don't|never) (tell|inform|mention|show|report)\b.{0,30}?\b(user|human|operator)\b",
        ("do not", "don't", "never"),
        True,
    ),
)

INSTRUCTION_PATTERNS: Final[tuple[str, ...]] = tuple(pattern for pattern, _, _ in _PATTERNS)
"""Instruction-like phrases, matched on :func:`reads_as` of a line (lowercase). Bounded repeats only (no
backtracking blow-up on hostile text)."""

_INSTRUCTION: Final = re.compile("|".join(f"(?:{pattern})" for pattern in INSTRUCTION_PATTERNS))
_TRIGGERS: Final[tuple[str, ...]] = tuple(sorted({trigger for _, triggers, _ in _PATTERNS for trigger in triggers}))
"""What any match contains: a text without one of these is not searched (substring tests are far cheaper than the
search, which tries every alternative at every position)."""
_ACROSS_SEPARATORS: Final = re.compile("|".join(f"(?:{pattern})" for pattern, _, across in _PATTERNS if across))
_ACROSS_TRIGGERS: Final[tuple[str, ...]] = tuple(
    sorted({trigger for _, triggers, across in _PATTERNS if across for trigger in triggers})
)
_NOTATION: Final = re.compile(
    # A terminal control sequence (CSI: ESC [ parameters final byte) is notation whole: a terminal shows none of it.
    r"\\x1b\[[0-9;?]*[ -/]*[@-~]|"
    r"<U\+[0-9A-F]{4,6}>(?:\{×\d+\})?|\\x[0-9a-f]{2}(?:\{×\d+\})?|\\r(?:\{×\d+\})?|" + re.escape(UNTRUSTED_MARKER)
)
_SPACES: Final = re.compile(r"\s+")

_LOOK_ALIKES: Final[tuple[tuple[str, str], ...]] = (
    # (Latin letter, the letters of other scripts and the Latin small capitals a reader takes for it), after Unicode
    # TR39's confusables (Cyrillic, Greek, Armenian, Coptic, Cherokee), both cases, only what the NFKD before it
    # leaves as it is. Cyrillic letters that look like Latin small capitals only (т, м, н, к, в) are left out: TR39
    # gives them no Latin letter, and they are most of every Russian word.
    ("a", "\u0251\u03b1\u0430\u1d00\u0391\u0410\u13aa"),
    ("b", "\u0184\u042c\u0299\u0392\u0412\u13f4"),
    ("c", "\u1d04\u0441\u2ca5\u0421\u2ca4\u13df"),
    ("d", "\u0501\u1d05\u13a0"),
    ("e", "\u0435\u04bd\u1d07\u0395\u0415\u13ac"),
    ("f", "\u0584\u03dc"),
    ("g", "\u0261\u0581\u0262\u050c\u13c0"),
    ("h", "\u04bb\u0570\u029c\u0397\u041d\u2c8e\u13bb"),
    ("i", "\u0131\u026a\u0269\u03b9\u0456\ua647\u04cf\u0399\u0406\u04c0\u0196\u2c92"),
    ("j", "\u03f3\u0458\u1d0a\u037f\u0408\u13ab"),
    ("k", "\u1d0b\u039a\u041a\u2c94\u13e6"),
    ("l", "\u029f\u01c0\u2cd0\u13de"),
    ("m", "\u1d0d\u039c\u03fa\u041c\u2c98\u13b7"),
    ("n", "\u0578\u0274\u039d\u2c9a"),
    ("o", "\u1d0f\u03bf\u03c3\u043e\u0585\u2c9f\u039f\u041e\u0555\u2c9e"),
    ("p", "\u03c1\u0440\u2ca3\u1d18\u03a1\u0420\u2ca2\u13e2"),
    ("q", "\u051b\u0563"),
    ("r", "\u0433\u2c85\u0280\u01a6\u13a1\u13d2"),
    ("s", "\ua731\u0455\u0405\u054f\u13da\u13d5"),
    ("t", "\u1d1b\u03a4\u0422\u2ca6\u13a2"),
    ("u", "\u1d1c\u028b\u03c5\u057d\u054d"),
    ("v", "\u1d20\u03bd\u0475\u0474\u13d9"),
    ("w", "\u1d21\u0461\u051d\u0561\u051c\u13b3"),
    ("x", "\u0445\u03a7\u0425\u2cac"),
    ("y", "\u028f\u03b3\u0443\u04af\u0263\u03a5\u0423\u04ae\u2ca8"),
    ("z", "\u1d22\u0396\u13c3"),
)
_MARKS: Final = frozenset({"Mn", "Me"})
"""Combining marks (nonspacing and enclosing): drawn over or around a letter, which still reads as itself."""
_SKELETON_CACHE: Final = 65_536
"""How many code points :class:`_Skeleton` remembers (a hostile text can hold every code point there is)."""


class _Skeleton(dict[int, str | None]):
    """A :meth:`str.translate` table to the Latin skeleton: look-alikes to their Latin letter, combining marks
    dropped, every other code point kept (decided on first sight, by its Unicode category)."""

    def __missing__(self, code: int) -> str | None:
        char = chr(code)
        kept = None if unicodedata.category(char) in _MARKS else char
        if len(self) < _SKELETON_CACHE:
            self[code] = kept
        return kept


_SKELETON: Final = _Skeleton({ord(alike): latin for latin, alikes in _LOOK_ALIKES for alike in alikes})
_SPELLED_OUT: Final = re.compile(r"(?<!\w)[^\W\d_](?: [^\W\d_])+(?!\w)")
"""A word spelled out letter by letter, one space between letters (``i g n o r e``); words apart by two spaces or
more stay apart."""
_SEPARATORS: Final = re.compile(r"_+|(?<=[^\W\d_])[-.+~\u00b7]+(?=[^\W\d_])")
"""What may stand for a space between two words: underscores, and a run of ``-``, ``.``, ``+``, ``~`` or ``·``
between letters."""
_SEPARATED_NAME: Final = re.compile(
    # From a word's start only, and possessive: a long word with no separator is passed over once, not once per letter.
    r"(?<![^\W\d_'])[^\W\d_]++(?:'[^\W\d_]++)?+(?:(?:_++|[-.+~\u00b7]++)[^\W\d_]++(?:'[^\W\d_]++)?+)++"
)
"""Words joined by separators into one name (``ignore_all_previous_instructions``, ``you-are-now``)."""


def reads_as(escaped: str) -> str:
    """An escaped line as a reader would take it: notation and marker gone, compatibility forms folded (NFKD:
    fullwidth ``Ｉｇｎｏｒｅ`` reads ``Ignore``, ligatures and styled letters read plain), combining marks dropped,
    look-alike letters of other scripts read as Latin (Cyrillic ``Іgnore`` reads ``ignore``), spaces collapsed,
    casefolded."""
    return _collapse(_letters(_NOTATION.sub("", escaped)))


def _letters(text: str) -> str:
    """``text`` folded letter by letter, casefolded, its spaces as they are (where a spelled-out word shows)."""
    if not text.isascii():
        # Look-alikes are mapped before casefolding: their capitals pass for Latin capitals (Cyrillic Н for H),
        # while their small letters look like nothing Latin (н).
        text = unicodedata.normalize("NFKD", text).translate(_SKELETON)
    return text.casefold()


def _collapse(letters: str) -> str:
    return _SPACES.sub(" ", letters).strip()


def _fold(text: str) -> str:
    return _collapse(_letters(text))


def _instruction_in(letters: str) -> bool:
    """Whether a reading (:func:`_letters`, spaces not collapsed) matches: as it is, with its spelled-out words read
    as words, or, for the patterns read across separators, a name in it with its separators read as spaces."""
    text = _collapse(letters)
    return _plain_or_spelled(text, letters) or any(
        # Name by name, not the whole line: ``rmtree(p, ignore_errors=True)  # the context`` is no phrase.
        _matches(_SEPARATORS.sub(" ", name.group()), across_separators=True)
        for name in _SEPARATED_NAME.finditer(text)
    )


def _plain_or_spelled(text: str, letters: str) -> bool:
    """Whether ``text`` (``letters`` collapsed) matches as it is or with its spelled-out words read as words."""
    if _matches(text):
        return True
    return _SPELLED_OUT.search(letters) is not None and _matches(_collapse(_join_spelled(letters)))


def _join_spelled(text: str) -> str:
    return _SPELLED_OUT.sub(lambda spelled: spelled.group().replace(" ", ""), text)


_CAMEL: Final = re.compile(r"([a-z])([A-Z])")
_MARKED: Final = re.compile("^(?:" + re.escape(UNTRUSTED_MARKER) + ")+")
_LINE_NUMBER: Final = re.compile(r"\s*[0-9]+(?:[:-][0-9]+)?[:\t-]\s?(?:\[preview from char [0-9]+;[^\]]*\] )?")
"""A line number before a line (a search hit ``12: ``, ``grep -n``'s ``12:``, ``nl``'s tab, a preview's note)."""
_CR: Final = re.compile(r"\\r(?:\{×\d+\})?")


def _other_readings(escaped: str) -> tuple[str, ...]:
    """The other ways a reader may take a line holding escape notation (as :func:`_letters`): as a break between
    words (``ok<U+200B>Ignore``, ``err\\rIgnore`` read ``ok ignore``: dropped, it would glue them into one word no
    pattern sees), and what follows its last carriage return alone (a terminal shows it over the line's start)."""
    readings = [_letters(_NOTATION.sub(" ", escaped))]
    ends = [match.end() for match in _CR.finditer(escaped)]
    if ends:
        readings.append(_letters(_NOTATION.sub("", escaped[ends[-1] :])))
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
    letters = _letters(_NOTATION.sub("", line))
    text = _collapse(letters)
    if _instruction_in(letters):
        return text, True
    others: list[str] = []
    bare = _MARKED.sub("", line, count=1)
    numbered = _LINE_NUMBER.match(bare)
    if numbered is not None:
        # A line shown after its number ('12: SYSTEM: ...' in a search page, `grep -n`, `nl`): read without it too,
        # so a pattern anchored at the line's start (a role claim) still sees it there.
        rest = bare[numbered.end() :]
        others.append(_letters(_NOTATION.sub("", rest)))
        if _NOTATION.search(rest) is not None:
            others += _other_readings(rest)
    if _NOTATION.search(line) is not None:
        others += _other_readings(line)
    if _may_match(text) and _CAMEL.search(line) is not None:
        # Words run together where something invisible stood between them (a colour code the sanitizer removed):
        # ``okIgnore all previous instructions`` reads ``ok ignore ...``.
        others.append(_letters(_CAMEL.sub(r"\1 \2", _NOTATION.sub(" ", line))))
    return text, any(_instruction_in(other) for other in others)


def _may_match(text: str, *, across_separators: bool = False) -> bool:
    return any(trigger in text for trigger in (_ACROSS_TRIGGERS if across_separators else _TRIGGERS))


def _matches(text: str, *, across_separators: bool = False) -> bool:
    """Whether ``text`` (a collapsed reading) holds a match of any pattern, or with ``across_separators`` of any
    pattern read across separators (``text`` then has its separators read as spaces already)."""
    if not _may_match(text, across_separators=across_separators):
        return False
    if len(text) <= 2 * _CACHED_LINE_CHARS + 1:  # one short line, or two joined
        return _matches_short(text, across_separators)
    return (_ACROSS_SEPARATORS if across_separators else _INSTRUCTION).search(text) is not None


@functools.lru_cache(maxsize=4096)
def _matches_short(text: str, across_separators: bool) -> bool:
    return (_ACROSS_SEPARATORS if across_separators else _INSTRUCTION).search(text) is not None


def flagged_indexes(escaped_lines: Sequence[str]) -> set[int]:
    """The 0-based indexes of the lines (escaped as the sanitizer shows them) that address the agent.

    A line is flagged when it matches alone, or when it and the next non-blank line match only together (a
    phrase split over the break; blank lines in between are skipped, so they do not hide it).
    """
    read = [(index, *_read(line)) for index, line in enumerate(escaped_lines)]
    read = [entry for entry in read if entry[1]]
    alone = {index for index, _, matched in read if matched}
    # Every joined pair below is a substring of the whole joined: without a trigger in it, as it is or with its
    # spelled-out words read as words, none can match (one screen instead of one per pair). A pair is not read
    # across separators: a name holds no space, so a name that matches is on one line, which matches alone.
    joined = " ".join(text for _, text, _ in read)
    if not (_may_match(joined) or _may_match(_join_spelled(joined))):
        return alone
    flagged = set(alone)
    for (first, first_text, _), (second, second_text, _) in itertools.pairwise(read):
        if first in alone or second in alone:
            continue
        pair = f"{first_text} {second_text}"
        if _plain_or_spelled(pair, pair):
            flagged.update((first, second))
    return flagged
