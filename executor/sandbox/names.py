"""A home's lock on a session name, shared by every process of the home (CLI calls, a service, an MCP server).

A session is found, started (or recreated on its kept workspace) and stopped by name while this lock is held, and
clean-up (``gc``) leaves alone a named session whose lock someone holds: nobody sees a session half made, starts it
twice, or removes what another process is recreating under the same id. The lock is an ``flock`` on
``<home>/run/name-<digest>.lock``; a holder that dies drops it with it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

__all__ = ["name_lock"]

_POLL_S: Final = 0.02
"""How often a caller waiting for a name's lock tries it again."""


def _path(home: Path, name: str) -> Path:
    return home / "run" / f"name-{hashlib.sha256(name.encode()).hexdigest()[:32]}.lock"


def _open(path: Path) -> int:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return os.open(path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)


@asynccontextmanager
async def name_lock(home: Path, name: str | None, *, wait: bool = True) -> AsyncIterator[bool]:
    """Hold ``home``'s lock on session name ``name`` for the block (nothing for None: yields True).

    Yields:
        True when held; with ``wait`` False, False at once when another holder has it (the block then runs
        without it, and should leave the name alone).
    """
    if name is None:
        yield True
        return
    import trio  # here: the module stays importable without trio

    fd = await trio.to_thread.run_sync(_open, _path(home, name))
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not wait:
                    yield False
                    return
                await trio.sleep(_POLL_S)
        yield True
    finally:
        os.close(fd)
