"""The artifact store and the recovery tools: every stream kept whole on the host, bounded views, and exact paging.

Entry points: :meth:`ArtifactStore.open`, :meth:`ArtifactStore.session`, then on :class:`SessionArtifacts`
``begin`` (a :class:`Capture`, the bash tool's capture sink), ``record``, ``read_output``, ``search_output``;
:mod:`executor.artifacts.view` renders what the model sees through one ``present`` seam.
"""

from __future__ import annotations

from executor.artifacts.capture import Capture
from executor.artifacts.models import ArtifactRecord, ReadPage, SearchMatch, SearchPage, StreamInfo, UnscannableLine
from executor.artifacts.store import ArtifactStore, SessionArtifacts, new_session_id, validate_session_id
from executor.artifacts.view import (
    NO_OUTPUT,
    Presenter,
    bounded_view,
    present,
    render_bounded_view,
    render_read_page,
    render_search_page,
)

__all__ = [
    "NO_OUTPUT",
    "ArtifactRecord",
    "ArtifactStore",
    "Capture",
    "Presenter",
    "ReadPage",
    "SearchMatch",
    "SearchPage",
    "SessionArtifacts",
    "StreamInfo",
    "UnscannableLine",
    "bounded_view",
    "new_session_id",
    "present",
    "render_bounded_view",
    "render_read_page",
    "render_search_page",
    "validate_session_id",
]
