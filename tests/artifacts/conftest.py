"""Fixtures of the artifact tests: stores on private homes with small, explicit settings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from executor.artifacts import ArtifactStore, SessionArtifacts
from executor.ids import new_session_id
from executor.testing.artifacts import artifact_settings


@pytest.fixture
def session(home: Path) -> Iterator[SessionArtifacts]:
    """A session on a store with default settings in the test's private home."""
    with ArtifactStore.open(home, artifact_settings()) as store:
        yield store.session(new_session_id())
