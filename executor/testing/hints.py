"""Find the recovery calls a result's text prints, in each surface's words, so that a test can make them."""

from __future__ import annotations

import ast
import re
import shlex

__all__ = ["cli_calls", "tool_calls"]

_TOOL_CALL = re.compile(r"\b(read_output|search_output|task_read|read_task)\(")
_CLI_CALL = re.compile(r"\bexecutor (?:output|bg) ")


def tool_calls(text: str) -> list[tuple[str, dict[str, object]]]:
    """Every ``tool(name=literal, ...)`` call in ``text``, as (tool, arguments); a call that does not parse fails."""
    calls: list[tuple[str, dict[str, object]]] = []
    for match in _TOOL_CALL.finditer(text):
        start = match.start()
        for end in (i + 1 for i, char in enumerate(text) if i >= match.end() - 1 and char == ")"):
            try:
                node = ast.parse(text[start:end], mode="eval").body
            except SyntaxError:
                continue
            assert isinstance(node, ast.Call) and not node.args, text[start:end]
            arguments = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg is not None}
            calls.append((match.group(1), arguments))
            break
        else:
            raise AssertionError(f"a hint does not parse as a call: {text[start : start + 200]!r}")
    return calls


def cli_calls(text: str) -> list[list[str]]:
    """Every ``executor output|bg ...`` command line in ``text`` (it ends at a newline, ``]`` or ``;``), as argv."""
    calls: list[list[str]] = []
    for match in _CLI_CALL.finditer(text):
        line = text[match.start() :].split("\n", 1)[0]
        lexer = shlex.shlex(line, posix=True, punctuation_chars="];")
        lexer.whitespace_split = True
        words: list[str] = []
        for token in lexer:
            if token and set(token) <= {"]", ";"}:
                break
            words.append(token)
        calls.append(words)
    return calls
