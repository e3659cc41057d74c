"""The session pipeline: prepare -> gate -> execute -> capture -> present -> journal.

This package is the one place where the services meet. Surfaces (the CLI, the MCP server and the Python API)
call :func:`open_executor`, then :meth:`Executor.open_session` (a new session container, removed on exit) or
:meth:`Executor.attach_session` (an existing one, left running). Every tool call returns a :class:`ToolResult`
whose ``text`` is the exact, bounded, sanitized view the model sees; every stream is stored whole as an artifact
first, and every decision is journaled.

Input the executor refuses before doing anything (a malformed path, an oversized command, an unknown artifact id)
raises the matching :class:`~executor.errors.ExecutorError`; outcomes of gated actions (blocked, denied) are results,
because the agent must read them.

Parts: :mod:`~executor.session.api` (the result models), :mod:`~executor.session.gating` (gate, journal and the
execution bracket), :mod:`~executor.session.presentation` (views and sanitizing), :mod:`~executor.session.tools`
(the :class:`Session` and its tools), :mod:`~executor.session.tasks` (background tasks),
:mod:`~executor.session.executor` (:class:`Executor`, :func:`open_executor`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from executor.session.api import (
    USE_DEFAULT,
    ArtifactBytes,
    ExecutorAPI,
    FileContent,
    FocusMode,
    HandlerChoice,
    Outcome,
    SessionAPI,
    TaskBytes,
    TaskInfo,
    ToolResult,
)
from executor.session.executor import Executor, open_executor, open_output_reader
from executor.session.tools import Session

if TYPE_CHECKING:
    # The classes implement the one API: a drifted signature fails mypy here.
    _session_api: type[SessionAPI] = Session
    _executor_api: type[ExecutorAPI] = Executor

__all__ = [
    "USE_DEFAULT",
    "ArtifactBytes",
    "Executor",
    "ExecutorAPI",
    "FileContent",
    "FocusMode",
    "HandlerChoice",
    "Outcome",
    "Session",
    "SessionAPI",
    "TaskBytes",
    "TaskInfo",
    "ToolResult",
    "open_executor",
    "open_output_reader",
]
