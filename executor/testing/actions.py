"""Builders of actions (bash and write) for tests of the gate, policy and approvals (pure)."""

from __future__ import annotations

import hashlib

from executor.models import BashAction, FileState, WriteAction

__all__ = ["bash", "write"]


def bash(command: str, **fields: object) -> BashAction:
    """A bash action in session s1."""
    values: dict[str, object] = {"session_id": "s1", "command": command, "cwd": "/workspace", "timeout_ms": 5000}
    values.update(fields)
    return BashAction.model_validate(values)


def write(path: str, content: bytes = b"x\n", **fields: object) -> WriteAction:
    """A write action in session s1 creating ``path``."""
    values: dict[str, object] = {
        "session_id": "s1",
        "path": path,
        "content_sha256": hashlib.sha256(content).hexdigest(),
        "size": len(content),
        "reviewed": FileState(kind="missing"),
        "diff": f"--- /dev/null\n+++ {path}\n+{content.decode()}",
    }
    values.update(fields)
    return WriteAction.model_validate(values)
