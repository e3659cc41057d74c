"""A conservative reading of a bash command string, for policy rules and the rules judge (pure).

This is not a shell parser. It answers two questions safely:

* :func:`is_simple` — is the command one simple command with no shell metacharacter at all? Only such a
  command may be *allowed* by a rule; anything compound, redirected, substituted or escaped is not simple.
* :func:`parse_command` — which simple commands might run? The reading over-approximates: it splits on every
  control operator, also inside quotes, descends into ``$(...)``, backticks, ``bash -c``/``eval`` strings,
  and strips wrappers (``sudo``, ``env``, ``nohup``, ``xargs`` ...), so that deny and ask rules see every
  command a hostile string could hide. Seeing too many segments only makes a verdict stricter.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

__all__ = ["ParsedCommand", "is_simple", "parse_command"]

_PUNCTUATION = "();<>|&`\n"
_MAX_DEPTH = 4
# Past this many simple commands the reading stops and reports the command as not understood: a hostile
# string of 100k tiny commands must not make the gate slow, and "not understood" is never allowed.
_MAX_SEGMENTS = 512
_MAX_WORDS = 4096
# Characters that make a command more than one plain simple command (or hide one): control operators,
# redirections, substitutions, escapes, grouping, and every control character.
_NOT_SIMPLE = re.compile(r"[;&|<>()$`\\{}\x00-\x08\x0a-\x1f\x7f]")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\+?=")
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "busybox"})
_RESERVED = frozenset({"!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "time"})
# Wrapper -> how many non-option arguments it takes before the wrapped command.
_WRAPPERS: dict[str, int] = {
    "sudo": 0,
    "doas": 0,
    "env": 0,
    "nohup": 0,
    "nice": 0,
    "ionice": 0,
    "stdbuf": 0,
    "command": 0,
    "builtin": 0,
    "exec": 0,
    "xargs": 0,
    "setsid": 0,
    "unbuffer": 0,
    "chroot": 1,
    "timeout": 1,
    "watch": 0,
    "strace": 0,
    "busybox": 0,
    "flock": 1,
    "su": 0,
}
# Options of wrappers that consume the next word.
_OPTION_ARGS = frozenset({"-u", "-g", "-n", "-c", "-C", "-s", "-k", "-p", "-I", "-L", "-P", "-d", "-E", "-U"})


@dataclass(frozen=True)
class ParsedCommand:
    """What a command string might run."""

    parsed: bool
    """False when the string does not tokenize (unbalanced quotes) or nests too deep; then ``segments`` is
    incomplete and the command must not be treated as understood."""
    simple: bool
    """True when the command is one simple command with no shell metacharacter (see :func:`is_simple`)."""
    segments: tuple[tuple[str, ...], ...]
    """Argv of every simple command found, with argv[0] as written (quotes removed)."""
    candidates: tuple[tuple[str, ...], ...]
    """Every argv a rule should be matched against: each segment, its argv[0] reduced to a basename, and the
    command each wrapper (``sudo``, ``env``, ``xargs`` ...) would run."""
    redirect_targets: tuple[str, ...]
    """Words that follow an output redirection (``>``, ``>>``, ``>|``, ``&>``, ``<>``): files the command may write.
    Input redirections (``<``, here-documents and here-strings) only read, so their words are not listed."""


def is_simple(command: str) -> bool:
    """True when ``command`` is one simple command without any shell metacharacter or control character."""
    if not command.strip() or _NOT_SIMPLE.search(command):
        return False
    return parse_command(command).simple


def parse_command(command: str) -> ParsedCommand:
    """Split ``command`` into every simple command it might run (see the module docstring)."""
    segments: list[tuple[str, ...]] = []
    redirects: list[str] = []
    ok = _collect(command, 0, segments, redirects)
    candidates: dict[tuple[str, ...], None] = {}
    for segment in segments:
        for candidate in _unwrap(segment):
            candidates[candidate] = None
    simple = ok and len(segments) == 1 and bool(command.strip()) and not _NOT_SIMPLE.search(command)
    return ParsedCommand(
        parsed=ok,
        simple=simple,
        segments=tuple(segments),
        candidates=tuple(candidates),
        redirect_targets=tuple(redirects),
    )


def _tokens(command: str) -> list[tuple[str, bool]]:
    """POSIX-style words and operator runs: ``[(text, is_operator)]``. Linear time (``shlex`` is quadratic
    on long words). Quoted text never forms an operator. '#' is an ordinary character: bash only starts a
    comment at a word start, and treating it as a comment could hide '; rm -rf /' after 'a#b'.

    Raises:
        ValueError: an unterminated quote.
    """
    tokens: list[tuple[str, bool]] = []
    word: list[str] = []
    in_word = False
    index, length = 0, len(command)
    while index < length:
        char = command[index]
        if char in " \t\r":
            if in_word:
                tokens.append(("".join(word), False))
                word, in_word = [], False
            index += 1
        elif char in _PUNCTUATION:
            if in_word:
                tokens.append(("".join(word), False))
                word, in_word = [], False
            end = index
            while end < length and command[end] in _PUNCTUATION and command[end] != "\n":
                end += 1
            end = max(end, index + 1)
            tokens.append((command[index:end], True))
            index = end
        elif char == "\\":
            in_word = True
            if index + 1 < length and command[index + 1] != "\n":
                word.append(command[index + 1])
            index += 2
        elif char == "'":
            end = command.find("'", index + 1)
            if end == -1:
                raise ValueError("no closing single quote")
            word.append(command[index + 1 : end])
            in_word = True
            index = end + 1
        elif char == '"':
            in_word = True
            index += 1
            while True:
                if index >= length:
                    raise ValueError("no closing double quote")
                char = command[index]
                if char == '"':
                    index += 1
                    break
                if char == "\\" and index + 1 < length and command[index + 1] in '"\\$`\n':
                    if command[index + 1] != "\n":
                        word.append(command[index + 1])
                    index += 2
                    continue
                word.append(char)
                index += 1
        else:
            word.append(char)
            in_word = True
            index += 1
    if in_word:
        tokens.append(("".join(word), False))
    return tokens


def _collect(command: str, depth: int, segments: list[tuple[str, ...]], redirects: list[str]) -> bool:
    if depth > _MAX_DEPTH:
        return False
    try:
        tokens = _tokens(command)
    except ValueError:
        return False
    ok = True
    current: list[str] = []
    expect_target = False
    target_written = False
    for token, operator in tokens:
        if operator:
            if "<" in token or ">" in token:
                expect_target = True
                target_written = ">" in token
                if current and current[-1].isdigit():
                    current.pop()  # an fd number such as the 2 in 2>&1
                if token.endswith("("):  # process substitution <( ... )
                    expect_target = False
                    ok &= _flush(current, depth, segments, redirects)
                    current = []
                continue
            ok &= _flush(current, depth, segments, redirects)
            current = []
            expect_target = False
            continue
        if expect_target:
            expect_target = False
            if target_written and not token.lstrip("&-").isdigit():
                redirects.append(token)
            continue
        current.append(token)
    ok &= _flush(current, depth, segments, redirects)
    return ok


def _flush(words: list[str], depth: int, segments: list[tuple[str, ...]], redirects: list[str]) -> bool:
    ok = True
    # A substitution kept inside one word (double quotes) still runs: read what it contains.
    for word in words:
        for inner in _substitutions(word):
            ok &= _collect(inner, depth + 1, segments, redirects)
    while words and (words[0] in _RESERVED or _ASSIGNMENT.match(words[0])):
        words = words[1:]
    if not words:
        return ok
    if len(segments) >= _MAX_SEGMENTS or sum(map(len, segments)) + len(words) > _MAX_WORDS:
        return False
    segment = tuple(words)
    segments.append(segment)
    for candidate in _unwrap(segment):
        name = candidate[0]
        if name == "eval" and len(candidate) > 1:
            ok &= _collect(" ".join(candidate[1:]), depth + 1, segments, redirects)
            continue
        if name not in _SHELLS and name != "su":
            continue
        # 'bash -c CMD', 'bash -lc CMD', 'su -c CMD user': the string after the option holding 'c' runs.
        for index, word in enumerate(candidate[1:], start=1):
            if word.startswith("-") and not word.startswith("--") and "c" in word and index + 1 < len(candidate):
                ok &= _collect(candidate[index + 1], depth + 1, segments, redirects)
                break
    return ok


def _substitutions(word: str) -> list[str]:
    found: list[str] = []
    start = 0
    while (index := word.find("$(", start)) != -1:
        level, end = 0, index + 1
        while end < len(word):
            if word[end] == "(":
                level += 1
            elif word[end] == ")":
                level -= 1
                if level == 0:
                    break
            end += 1
        found.append(word[index + 2 : end])
        start = end + 1
    parts = word.split("`")
    found.extend(parts[1::2])
    return found


def _unwrap(segment: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The segment, its basename form, and every command a chain of wrappers would run."""
    out: list[tuple[str, ...]] = []
    current = segment
    for _ in range(8):
        if not current:
            break
        base = (posixpath.basename(current[0]) or current[0], *current[1:])
        for form in (current, base):
            if form not in out:
                out.append(form)
        name = base[0]
        if name not in _WRAPPERS:
            break
        rest = list(base[1:])
        while rest and (rest[0].startswith("-") or _ASSIGNMENT.match(rest[0])):
            option = rest.pop(0)
            if option in _OPTION_ARGS and rest:
                rest.pop(0)
        if name in ("timeout", "chroot", "flock") and rest:
            rest = rest[_WRAPPERS[name] :]
        current = tuple(rest)
    return out
