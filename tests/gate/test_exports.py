"""Every gate module exports exactly names it defines."""

from __future__ import annotations

import importlib

import pytest

MODULES = [
    "executor.gate",
    "executor.gate.approvals",
    "executor.gate.cache",
    "executor.gate.decision",
    "executor.gate.gate",
    "executor.gate.identity",
    "executor.gate.policy",
    "executor.gate.shell",
    "executor.gate.judge",
    "executor.gate.judge.base",
    "executor.gate.judge.openai",
    "executor.gate.judge.rules",
    "executor.gate.judge.rules_gate",
    "executor.testing.fake_judge",
]


@pytest.mark.parametrize("name", MODULES)
def test_all_names_exist(name: str) -> None:
    """Each name in __all__ is defined in the module."""
    module = importlib.import_module(name)
    assert module.__all__
    for export in module.__all__:
        assert hasattr(module, export), f"{name}.{export}"
