"""Tool results over MCP: a session ``ToolResult`` as content plus structured facts, errors as ``is_error`` results."""

from __future__ import annotations

from typing import Any

from mcp_types import (
    CallToolResult,
    TextContent,
)

from executor.artifacts.hints import MCP_HINTS
from executor.errors import ExecutorError, SessionNotFound
from executor.session import TaskInfo, ToolResult

__all__ = [
    "ARTIFACT_HINT",
    "TASK_HINT",
    "error_hint",
    "error_result",
    "not_found",
    "task_facts",
    "task_result",
    "tool_result",
]

_ERROR_OUTCOMES = frozenset({"blocked", "denied", "error", "unresponsive"})
"""Outcomes where nothing ran (or the executor failed): reported with ``is_error``."""


_NOT_FOR_MODELS = frozenset(
    {"text", "stdout", "stdout_whole", "stdout_dropped", "stderr", "stderr_whole", "stderr_dropped"}
)
"""Fields left out of the structured content: the text is the content, and the raw streams are unsanitized (a
model reads MCP results; it pages the streams, sanitized, with read_output)."""


def tool_result(result: ToolResult) -> CallToolResult:
    structured = result.model_dump(mode="json", exclude=set(_NOT_FOR_MODELS), exclude_none=True)
    return CallToolResult(
        content=[TextContent(type="text", text=result.text)],
        structured_content=structured,
        is_error=result.outcome in _ERROR_OUTCOMES,
    )


def error_result(message: str, *, kind: str) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=message)],
        structured_content={"outcome": "error", "error": kind, "message": message},
        is_error=True,
    )


def _task_text(info: TaskInfo, verb: str) -> str:
    state = "running" if info.running else "ended"
    lines = [f"task {info.task_id} {verb} ({state}): {info.command}"]
    if info.result is not None:
        lines.append(f"exit: {info.result.model_dump(mode='json', exclude_none=True)}")
    output = f"output: {MCP_HINTS.task_read(info.task_id)}"
    if info.artifact_id is not None:
        output += f"; whole streams: {MCP_HINTS.read(info.artifact_id, stream='stdout')}"
    lines.append(output)
    return "\n".join(lines)


def task_facts(info: TaskInfo) -> dict[str, Any]:
    # The owner is the caller's own token hash: not a fact the agent needs.
    return info.model_dump(mode="json", exclude_none=True, exclude={"owner"})


def task_result(info: TaskInfo, verb: str) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=_task_text(info, verb))],
        structured_content={"outcome": "completed", "task": task_facts(info)},
    )


TASK_HINT = "list yours with task_list"
ARTIFACT_HINT = "use an artifact_id returned by a bash, task or write result of this session"


def not_found(kind: str, ident: str, hint: str) -> CallToolResult:
    return error_result(
        f"{kind} {ident!r} not found in this session (ids from other sessions or other clients are never "
        f"visible); {hint}",
        kind="not_found",
    )


def error_hint(exc: ExecutorError) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, SessionNotFound):
        return f"{text}. The session is gone; start over in a new connection (or name a session that exists)."
    return text
