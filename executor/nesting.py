"""Nesting bounds checked on the text before a recursive parser sees it: one helper for every surface.

``json.loads`` and ``tomllib`` recurse once per nesting level; a line of 200,000 ``[`` ends them with a
``RecursionError`` (or, where that is not caught, the process). Every parser of text from outside the executor's own
memory (MCP lines, the service's JSON bodies, settings and policy files, journals, what the in-container agent or a
judge sends back) first measures the text's nesting here, with C-speed byte operations and no recursion, and refuses
what is deeper than its limit with :class:`NestingTooDeep`, a ``ValueError`` with a message that names the limit.

Pure and standard library only: the thin CLI imports it too.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any, Final

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "NestingTooDeep",
    "check_json_depth",
    "check_toml_depth",
    "json_depth",
    "loads_json",
    "toml_depth",
]

DEFAULT_MAX_DEPTH: Final = 64
"""The nesting limit where no setting names one (settings and policy files: the settings cannot bound their own
parse), and the default of the settings that do (``service.max_json_depth``)."""

_JSON_STRING: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET: Final = bytes(b for b in range(256) if b not in b"[]{}")
_TOML_SKIPPED: Final = re.compile(
    rb'"""(?:[^"\\]|\\.|"(?!""))*"""'  # multi-line basic string
    rb"|'''.*?'''"  # multi-line literal string
    rb'|"[^"\\\n]*(?:\\.[^"\\\n]*)*"'  # basic string
    rb"|'[^'\n]*'"  # literal string
    rb"|#[^\n]*",  # comment
    re.DOTALL,
)
_NOT_TOML_NESTING: Final = bytes(b for b in range(256) if b not in b"[]{}.")


class NestingTooDeep(ValueError):
    """Text nests deeper than the limit its reader allows (a ``ValueError``: every parse failure already is)."""


def _as_bytes(text: str | bytes) -> bytes:
    return text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")


def _bracket_depth(brackets: bytes) -> int:
    return max(accumulate(1 if byte in b"[{" else -1 for byte in brackets), default=0)


def json_depth(text: str | bytes) -> int:
    """The deepest nesting of arrays and objects in JSON ``text`` (brackets inside strings do not count).

    Text that is not JSON gets a number too (its unbalanced brackets are counted the same way).
    """
    return _bracket_depth(_JSON_STRING.sub(b'""', _as_bytes(text)).translate(None, _NOT_BRACKET))


def check_json_depth(text: str | bytes, *, max_depth: int, setting: str | None = None) -> None:
    """Refuse JSON ``text`` nested deeper than ``max_depth``.

    Args:
        text: the JSON text (not yet parsed).
        max_depth: the deepest nesting allowed.
        setting: the setting that holds ``max_depth``, named in the message.

    Raises:
        NestingTooDeep: ``text`` nests deeper.
    """
    raw = _as_bytes(text)
    if raw.count(b"[") + raw.count(b"{") <= max_depth:
        return  # the common case, decided by two C scans
    depth = json_depth(raw)
    if depth > max_depth:
        named = f" ({setting})" if setting else ""
        raise NestingTooDeep(f"JSON nested {depth} levels deep; at most {max_depth}{named} are accepted")


def loads_json(text: str | bytes, *, max_depth: int, setting: str | None = None, **options: Any) -> Any:
    """``json.loads(text, **options)`` after :func:`check_json_depth`.

    Raises:
        NestingTooDeep: ``text`` nests deeper than ``max_depth``.
        ValueError: ``text`` is not JSON (``json.JSONDecodeError``), or an option's hook refused it.
    """
    check_json_depth(text, max_depth=max_depth, setting=setting)
    try:
        return json.loads(text, **options)
    except RecursionError:  # only when max_depth is set past the interpreter's own stack
        raise NestingTooDeep(f"JSON nested too deeply for the parser (limit {max_depth})") from None


def toml_depth(text: str | bytes) -> int:
    """An upper bound of the nesting of the tables and arrays TOML ``text`` builds.

    Arrays and inline tables nest by brackets; dotted keys (``a.b.c = 1``) and table headers (``[a.b.c]``) nest by
    dots, and a dotted key nests under its table's header: a line counts its brackets, its dots and those of the
    header above it. Strings and comments are skipped. A number's decimal point counts as a level too (an
    overestimate by one, never an underestimate).
    """
    kept = _TOML_SKIPPED.sub(b'""', _as_bytes(text))
    deepest = header = depth = 0
    for full in kept.split(b"\n"):
        line = full.translate(None, _NOT_TOML_NESTING)
        dots = line.count(b".")
        if depth == 0 and full.lstrip().startswith(b"["):
            header = dots + 1  # a table header: its own brackets are not nesting
            deepest = max(deepest, header)
            continue
        running = peak = depth
        for byte in line.translate(None, b"."):
            running += 1 if byte in b"[{" else -1
            peak = max(peak, running)
        depth = max(running, 0)
        deepest = max(deepest, header + dots + peak + 1)
    return deepest


def check_toml_depth(text: str | bytes, *, max_depth: int = DEFAULT_MAX_DEPTH) -> None:
    """Refuse TOML ``text`` that may nest deeper than ``max_depth`` (see :func:`toml_depth`).

    Raises:
        NestingTooDeep: it may.
    """
    raw = _as_bytes(text)
    if raw.count(b"[") + raw.count(b"{") + raw.count(b".") < max_depth:
        return
    depth = toml_depth(raw)
    if depth > max_depth:
        raise NestingTooDeep(f"arrays, tables or dotted keys nested too deeply ({depth} levels; at most {max_depth})")
