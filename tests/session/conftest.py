"""Fixtures of the session package's tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from executor.config import Settings, load_settings


@pytest.fixture(scope="session")
def session_agent_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One agent build for the whole run (it is keyed by its sources' hash)."""
    return tmp_path_factory.mktemp("agent-build")


@pytest.fixture
def engine_settings(base_image: str, home: Path, session_agent_dir: Path) -> Settings:
    """Settings rooted in a private home, for tests on the real engine (the session image exists)."""
    return load_settings(overrides={"home": str(home), "agent": {"build_dir": str(session_agent_dir)}})
