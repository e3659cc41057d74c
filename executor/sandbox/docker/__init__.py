"""The Docker backend: the only package that imports ``docker``.

Public: :class:`DockerBackend` (and :func:`home_identity`, its home label), the hardening constants and
:func:`container_kwargs`, and the image functions.
"""

from executor.sandbox.docker._engine import DockerEngine
from executor.sandbox.docker.backend import DockerBackend, home_identity
from executor.sandbox.docker.hardening import AGENT_CAPS, container_kwargs, pinned_seccomp
from executor.sandbox.docker.images import (
    ImageBuildResult,
    ImageInfo,
    PruneResult,
    build_image,
    ensure_image,
    folder_tag,
    image_folder,
    list_images,
    prune_images,
    remove_image,
)

__all__ = [
    "AGENT_CAPS",
    "DockerBackend",
    "DockerEngine",
    "ImageBuildResult",
    "ImageInfo",
    "PruneResult",
    "build_image",
    "container_kwargs",
    "ensure_image",
    "folder_tag",
    "home_identity",
    "image_folder",
    "list_images",
    "pinned_seccomp",
    "prune_images",
    "remove_image",
]
