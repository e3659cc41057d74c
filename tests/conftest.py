"""Fixtures shared by the whole suite."""

from __future__ import annotations

from pathlib import Path

import pytest

from executor.config import Settings, load_settings


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A private $EXECUTOR_HOME for one test."""
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def settings(home: Path) -> Settings:
    """Default settings rooted in a private home."""
    return load_settings(overrides={"home": str(home)})
