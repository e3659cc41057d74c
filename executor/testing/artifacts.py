"""Artifact stores on temporary homes with explicit settings, and a one-call capture, for tests (no engine)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from executor.artifacts import ArtifactStore, SessionArtifacts
from executor.config import ArtifactSettings, load_settings
from executor.ids import new_session_id

__all__ = ["artifact_settings", "open_session", "store_bytes"]


def artifact_settings(**overrides: Any) -> ArtifactSettings:
    """Artifact settings through the real loader (so every override is validated)."""
    return load_settings(overrides={"artifacts": overrides}).artifacts


@contextmanager
def open_session(**overrides: Any) -> Iterator[SessionArtifacts]:
    """A store on a fresh temporary home and one new session on it (usable inside hypothesis examples)."""
    with tempfile.TemporaryDirectory() as tmp, ArtifactStore.open(Path(tmp), artifact_settings(**overrides)) as store:
        yield store.session(new_session_id())


def store_bytes(session: SessionArtifacts, data: bytes, *, chunk: int = 4096, stream: str = "output") -> str:
    """Capture ``data`` as a finished one-stream artifact and return its id."""
    capture = session.begin(kind="test", streams=(stream,))
    for i in range(0, len(data), chunk):
        capture.feed(stream, data[i : i + chunk])
    return capture.finish(status="ok").id
