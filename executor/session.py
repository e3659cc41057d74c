"""The session pipeline: prepare -> gate -> execute -> capture -> present -> journal.

This module is the one place where the services meet. Surfaces (the CLI, the MCP server and the Python API)
call :func:`open_executor` and then :meth:`Executor.open_session` or :meth:`Executor.attach_session`; every
tool call returns a :class:`ToolResult` whose ``text`` is the exact, sanitized view the model sees.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from executor.models import RunResult

__all__ = ["Outcome", "TaskInfo", "ToolResult"]

Outcome = Literal["completed", "failed", "timeout", "cancelled", "blocked", "denied", "error"]
"""How a tool call ended, from the caller's point of view.

``completed``: it ran and exited 0 (or the write/read succeeded); ``failed``: it ran and exited nonzero (or was
killed by a signal we did not send); ``timeout``/``cancelled``: we killed its process group; ``blocked``: it needs an
approval nobody can give; ``denied``: policy, judge or a person said no; ``error``: the executor failed."""


class ToolResult(BaseModel):
    """What one tool call returns: the presented text plus the structured facts behind it."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    tool: Literal["bash", "write_file", "read_output", "search_output", "task"]
    """Which tool produced it."""
    outcome: Outcome
    """How the call ended."""
    text: str
    """The exact, bounded, sanitized view presented to the model."""
    action_id: str | None = None
    """The gated action's id (bash and write_file)."""
    artifact_id: str | None = None
    """The artifact holding every captured stream whole (recover with read_output / search_output)."""
    run: RunResult | None = None
    """Exit code, cause, duration, CPU, max RSS and orphans of a bash run."""
    exit_code: int | None = None
    """The command's shell-style status (128+N for signal N), when it ran."""
    data: dict[str, object] | None = None
    """Tool-specific structured data (write result, page receipts, task info)."""


class TaskInfo(BaseModel):
    """A background task as the executor tracks it."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    task_id: str
    """Identifier, stamped with the owning session."""
    command: str
    """The command it runs."""
    running: bool
    """Still running."""
    artifact_id: str
    """Artifact whose streams grow as the task writes."""
    result: RunResult | None = None
    """How it ended, once it has."""
