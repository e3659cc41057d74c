"""Fixtures for the gate tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from executor.gate.policy import Policy, load_policy

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def default_policy() -> Policy:
    """The shipped default policy."""
    return load_policy(REPO / "policy" / "default.toml")
