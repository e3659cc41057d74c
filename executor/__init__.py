"""A sandboxed, container-backed executor for AI agents.

The Python API::

    from executor import load_settings, open_executor

    async with open_executor(load_settings()) as ex:
        async with ex.open_session() as session:
            result = await session.bash("ls -la")
            print(result.text)

Names are imported lazily, so that importing a pure submodule (``executor.focus.sections``) never loads trio or
the Docker SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from executor._lazy import lazy_getattr

if TYPE_CHECKING:
    from executor.config import Settings, load_settings
    from executor.errors import ExecutorError
    from executor.gate.approvals import ApprovalHandler, ApprovalRequest, CallbackApprovalHandler
    from executor.session import Executor, Session, TaskInfo, ToolResult, open_executor

__all__ = [
    "ApprovalHandler",
    "ApprovalRequest",
    "CallbackApprovalHandler",
    "Executor",
    "ExecutorError",
    "Session",
    "Settings",
    "TaskInfo",
    "ToolResult",
    "load_settings",
    "open_executor",
]

_HOMES = {
    "Settings": "executor.config",
    "load_settings": "executor.config",
    "ExecutorError": "executor.errors",
    "ApprovalHandler": "executor.gate.approvals",
    "ApprovalRequest": "executor.gate.approvals",
    "CallbackApprovalHandler": "executor.gate.approvals",
    "Executor": "executor.session",
    "Session": "executor.session",
    "TaskInfo": "executor.session",
    "ToolResult": "executor.session",
    "open_executor": "executor.session",
}


__getattr__ = lazy_getattr(__name__, _HOMES)
