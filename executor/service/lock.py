"""A home's service lock: one ``executor serve`` per ``EXECUTOR_HOME``, and what is left when none runs.

The service holds an exclusive ``flock`` on ``<home>/run/service.lock`` while it serves; a holder that dies drops it
with it. Without a holder, what a service spools under the home (upload bodies) belongs to nobody and is removed.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from executor.errors import ExecutorError
from executor.service.files import clear_spools

__all__ = ["clear_unserved_spools", "service_lock"]


def _open(home: Path) -> int:
    path = home / "run" / "service.lock"
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    return os.open(path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)


@contextmanager
def service_lock(home: Path) -> Iterator[None]:
    """Hold ``home``'s service lock for the block (a service's whole life).

    Raises:
        ExecutorError: another service holds it.
    """
    fd = _open(home)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ExecutorError(
                f"a service already runs for {home}; stop it first (one service per EXECUTOR_HOME)"
            ) from None
        yield
    finally:
        os.close(fd)


def clear_unserved_spools(home: Path) -> int:
    """Remove the upload bodies a killed service left under ``home`` when no service runs for it; returns how many
    were removed (none while a service holds the lock: its spools are in use)."""
    if not (home / "run").is_dir():
        return 0  # no service ever ran here
    try:
        with service_lock(home):
            return clear_spools(home / "tmp")
    except ExecutorError:
        return 0
