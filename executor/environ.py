"""The ``EXECUTOR_*`` environment: which variables are settings, and the digest of those that decide how commands run,
which a thin CLI compares with its service's (the standard library only: the thin CLI imports this)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

__all__ = ["NOT_SETTINGS", "command_settings", "environment_digest", "is_setting"]

NOT_SETTINGS: Final = frozenset({"EXECUTOR_CONFIG", "EXECUTOR_URL", "EXECUTOR_TOKEN"})
"""``EXECUTOR_`` variables that are not settings: the settings file, and the service a CLI talks to with its token."""


def is_setting(name: str) -> bool:
    """Whether the environment variable ``name`` is a setting (``EXECUTOR_SECTION__FIELD``)."""
    return name.startswith("EXECUTOR_") and name not in NOT_SETTINGS


_PLACES: Final = frozenset({"EXECUTOR_HOME", "EXECUTOR_AGENT__BUILD_DIR"})
"""Settings that only say where files are kept: the home, and the agent's build folder (its binaries are named by
their sources' hash, so any folder holds the same agent)."""


def command_settings(environ: Mapping[str, str]) -> list[str]:
    """The names of the setting variables in ``environ`` that decide how commands run, sorted: every setting but the
    places files are kept (the home, the agent's build folder) and the service's own section (which only says where a
    service is and how it listens)."""
    return sorted(
        name
        for name in environ
        if is_setting(name) and name not in _PLACES and not name.startswith("EXECUTOR_SERVICE__")
    )


def environment_digest(environ: Mapping[str, str]) -> str | None:
    """SHA-256 over :func:`command_settings` and their values; None when there are none."""
    names = command_settings(environ)
    if not names:
        return None
    import hashlib  # only when there are settings to digest: the thin CLI's common path loads no OpenSSL

    digest = hashlib.sha256()
    for name in names:
        digest.update(f"{name}={environ[name]}".encode("utf-8", "surrogateescape") + b"\0")
    return digest.hexdigest()
