"""The session API's shared vocabulary: what a tool call returns and how it ended.

Every surface (the Python API, the MCP server, the CLI) returns these models; nothing here does IO.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import BaseModel, ConfigDict

from executor.models import RunResult

__all__ = ["USE_DEFAULT", "FocusMode", "Outcome", "TaskInfo", "ToolResult"]

Outcome = Literal["completed", "failed", "timeout", "cancelled", "blocked", "denied", "error"]
"""How a tool call ended, from the caller's point of view.

``completed``: it ran and exited 0 (or the write/read succeeded); ``failed``: it ran and exited nonzero, was killed
by a signal we did not send, or by the OOM killer; ``timeout``/``cancelled``: we killed its process group;
``blocked``: it needs an approval nobody can give; ``denied``: policy, judge or a person said no, or the approval
was invalidated; ``error``: the executor or the sandbox failed (``sandbox_lost``, a refused write)."""

FocusMode = Literal["off", "shadow", "on"]
"""Focus rollout mode (see ``FocusSettings.mode``)."""

USE_DEFAULT: Final = object()
"""Sentinel for "the executor's approval handler" (distinct from None: nobody answers)."""


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
    """The gated action's id (bash, write_file and task starts)."""
    artifact_id: str | None = None
    """The artifact holding every captured stream whole (recover with read_output / search_output)."""
    run: RunResult | None = None
    """Exit code, cause, duration, CPU, max RSS and orphans of a bash run."""
    exit_code: int | None = None
    """The command's shell-style status (128+N for signal N), when it ran."""
    data: dict[str, object] | None = None
    """Tool-specific structured data (write result, page receipts, task chunk)."""


class TaskInfo(BaseModel):
    """A background task as the executor tracks it."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    task_id: str
    """Identifier given by the session's agent."""
    command: str
    """The command it runs."""
    running: bool
    """Still running."""
    owner: str | None = None
    """The opaque owner token given at start (never interpreted by the executor)."""
    artifact_id: str | None = None
    """Artifact whose streams mirror the task's output (grows while the task runs)."""
    result: RunResult | None = None
    """How it ended, once it has."""
