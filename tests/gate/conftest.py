"""Fixtures for the gate tests."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from executor.gate.policy import Policy, load_policy
from executor.models import BashAction, FileState, WriteAction

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def default_policy() -> Policy:
    """The shipped default policy."""
    return load_policy(REPO / "policy" / "default.toml")


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
