"""Recovery hints, rendered per surface: every hint a result prints is a call its reader can make as written.

A result tells its reader how to get what the view left out (the next page, a search, a task's output). The
reader is a model calling MCP tools, a program calling the Python API, or a person at a shell, and each needs the
call in its own words: ``read_output(artifact_id="s-….a1", stream="stdout", start_line=11)`` with the MCP tools'
parameter names (the Python API's keyword arguments are the same names), or
``executor output read s-….a1 --stream stdout --start-line 11`` in the CLI. This module is the one place that
writes them; it is pure.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Literal

__all__ = ["CLIENT_HINTS", "CLI_HINTS", "MCP_HINTS", "PYTHON_HINTS", "Hints", "Surface", "hints_for"]

Surface = Literal["python", "mcp", "cli", "client"]
"""Who reads a result: the Python API, an MCP client (a model), a person at the CLI, or a program using the service
client (``executor.client``, whose calls name the session first)."""


def _py(value: object) -> str:
    # JSON strings and integers are valid Python literals too: a model or a person can paste them as they are.
    return json.dumps(value)


@dataclass(frozen=True)
class Hints:
    """Renders recovery calls for one surface."""

    surface: Surface
    """Whose words the calls are in."""

    def _session_of(self, artifact_id: str) -> list[tuple[str, object]]:
        # The service client's calls name the session first; an artifact id starts with its session's.
        return [("session", artifact_id.split(".", 1)[0])] if self.surface == "client" else []

    def _call(self, tool: str, args: list[tuple[str, object]]) -> str:
        return f"{tool}({', '.join(f'{name}={_py(value)}' for name, value in args)})"

    def read(self, artifact_id: str, *, stream: str, start_line: int = 1, start_byte_in_line: int | None = None) -> str:
        """A call that reads a stored stream from ``start_line`` (and byte ``start_byte_in_line`` within it)."""
        if self.surface == "cli":
            words = ["executor", "output", "read", artifact_id, "--stream", stream, "--start-line", str(start_line)]
            if start_byte_in_line is not None:
                words += ["--start-byte-in-line", str(start_byte_in_line)]
            return shlex.join(words)
        args: list[tuple[str, object]] = [
            *self._session_of(artifact_id),
            ("artifact_id", artifact_id),
            ("stream", stream),
            ("start_line", start_line),
        ]
        if start_byte_in_line is not None:
            args.append(("start_byte_in_line", start_byte_in_line))
        return self._call("read_output", args)

    def search(self, artifact_id: str, *, stream: str, pattern: str, start_line: int = 1) -> str:
        """A call that searches a stored stream for ``pattern`` from ``start_line``."""
        if self.surface == "cli":
            words = ["executor", "output", "search", artifact_id, "--stream", stream]
            if start_line != 1:
                words += ["--start-line", str(start_line)]
            # The pattern last: a credential redactor reading 'password= --start-line 2' took the flag for the
            # value and redacted it away, so the hint could not be run.
            return shlex.join([*words, "--pattern", pattern])
        args: list[tuple[str, object]] = [
            *self._session_of(artifact_id),
            ("artifact_id", artifact_id),
            ("stream", stream),
            ("pattern", pattern),
        ]
        if start_line != 1:
            args.append(("start_line", start_line))
        return self._call("search_output", args)

    def task_read(self, task_id: str, *, session_id: str | None = None, stream: str = "stdout", offset: int = 0) -> str:
        """A call that reads a background task's ``stream`` from byte ``offset`` (the CLI names the session)."""
        if self.surface == "cli":
            words = ["executor", "bg", "read", task_id]
            if session_id is not None:
                words += ["--session", session_id]
            return shlex.join([*words, "--stream", stream, "--offset", str(offset)])
        if self.surface == "python":
            return self._call("read_task", [("task_id", task_id), ("stream", stream), ("offset", offset)])
        if self.surface == "client" and session_id is not None:
            args = [("session", session_id), ("task_id", task_id), ("stream", stream), ("offset", offset)]
            return self._call("read_task", args)
        return self._call("task_read", [("task_id", task_id), ("stream", stream), ("offset", offset)])

    def task_stop(self, *, session_id: str | None = None) -> str:
        """How to stop a background task (a template: the reader picks which)."""
        if self.surface == "cli":
            return shlex.join(["executor", "bg", "stop", "TASK_ID"] + (["--session", session_id] if session_id else []))
        if self.surface == "mcp":
            return "task_stop(task_id=...)"
        if self.surface == "client" and session_id is not None:
            return f"stop_task(session={_py(session_id)}, task_id=...)"
        return "stop_task(task_id=...)"


PYTHON_HINTS = Hints("python")
"""Calls on a :class:`~executor.session.Session` (keyword names as the MCP tools')."""
MCP_HINTS = Hints("mcp")
"""Calls of the MCP tools."""
CLI_HINTS = Hints("cli")
"""``executor`` command lines."""
CLIENT_HINTS = Hints("client")
"""Calls on an ``executor.client`` ``Client``/``AsyncClient`` (the session first, then the Python API's names)."""


def hints_for(surface: Surface) -> Hints:
    """The hint renderer of ``surface``."""
    return {"python": PYTHON_HINTS, "mcp": MCP_HINTS, "cli": CLI_HINTS, "client": CLIENT_HINTS}[surface]
