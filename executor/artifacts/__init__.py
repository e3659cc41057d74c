"""The artifact store and the recovery tools: every stream kept whole on the host, bounded views, and exact paging.

Entry points: :meth:`ArtifactStore.open`, :meth:`ArtifactStore.session`, then on :class:`SessionArtifacts`
``begin`` (a :class:`Capture`, the bash tool's capture sink), ``record``, ``read_output``, ``search_output``;
:mod:`executor.artifacts.view` renders what the model sees through one ``present`` seam.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from executor._lazy import lazy_getattr

if TYPE_CHECKING:
    from executor.artifacts.capture import Capture, CaptureTee, tee_captures
    from executor.artifacts.models import (
        ArtifactRecord,
        ReadPage,
        SearchMatch,
        SearchPage,
        StreamInfo,
        TaskRecord,
        UnscannableLine,
    )
    from executor.artifacts.store import ArtifactStore, SessionArtifacts
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
    "CaptureTee",
    "Presenter",
    "ReadPage",
    "SearchMatch",
    "SearchPage",
    "SessionArtifacts",
    "StreamInfo",
    "TaskRecord",
    "UnscannableLine",
    "bounded_view",
    "present",
    "render_bounded_view",
    "render_read_page",
    "render_search_page",
    "tee_captures",
]

_HOMES = {
    "Capture": "executor.artifacts.capture",
    "CaptureTee": "executor.artifacts.capture",
    "tee_captures": "executor.artifacts.capture",
    "ArtifactRecord": "executor.artifacts.models",
    "ReadPage": "executor.artifacts.models",
    "SearchMatch": "executor.artifacts.models",
    "SearchPage": "executor.artifacts.models",
    "StreamInfo": "executor.artifacts.models",
    "TaskRecord": "executor.artifacts.models",
    "UnscannableLine": "executor.artifacts.models",
    "ArtifactStore": "executor.artifacts.store",
    "SessionArtifacts": "executor.artifacts.store",
    "NO_OUTPUT": "executor.artifacts.view",
    "Presenter": "executor.artifacts.view",
    "bounded_view": "executor.artifacts.view",
    "present": "executor.artifacts.view",
    "render_bounded_view": "executor.artifacts.view",
    "render_read_page": "executor.artifacts.view",
    "render_search_page": "executor.artifacts.view",
}

__getattr__ = lazy_getattr(__name__, _HOMES)
