"""When a session was last used, kept on the host: the mtime of ``<home>/run/<session id>.used``.

Every executed action (a command, a raw exec, a file write) holds a shared ``flock`` on that file while it runs and
sets its mtime when it ends (one ``utime``, no fsync: a power cut may lose the last touch, which only makes the
session look idle a little earlier). A reader (the service, ``session gc``) takes the mtime as the last use and
tries an exclusive lock to tell a session with a command running from an idle one; a process killed mid-command
drops its lock with it. The file sits beside the session's run folder, not in it: the run folder is mounted into
the container, and nothing in the sandbox may make its own session look busy or idle.

Pure host-side file work (no trio, no docker).
"""

from __future__ import annotations

import fcntl
import os
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

from executor.ids import validate_session_id

__all__ = ["Usage", "UsageMark", "read_usage", "usage_path"]


def usage_path(home: Path, session_id: str) -> Path:
    """The usage file of ``session_id`` under ``home``.

    Raises:
        SessionNotFound: ``session_id`` is malformed.
    """
    return home / "run" / f"{validate_session_id(session_id)}.used"


class UsageMark:
    """Marks one call on a session: busy while inside, last used when it leaves. Never raises on I/O errors (the
    mark is bookkeeping; a call never fails for it)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._fd: int | None = None

    def __enter__(self) -> UsageMark:
        flags = os.O_CREAT | os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            try:
                fd = os.open(self._path, flags, 0o600)
            except FileNotFoundError:
                self._path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                fd = os.open(self._path, flags, 0o600)
        except OSError:
            return self
        # Non-blocking: a reader holds its exclusive lock only while it stops an idle session, and a call that
        # starts then finds the session gone (SandboxLost) whether or not it waited.
        with suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        self._fd = fd
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.utime(fd)
        except OSError:
            pass
        finally:
            os.close(fd)


class Usage:
    """What a usage file says: when the session was last used, and whether a call runs now."""

    __slots__ = ("busy", "last_used_at")

    def __init__(self, last_used_at: datetime | None, busy: bool) -> None:
        self.last_used_at = last_used_at
        """When the last call ended (UTC); None when no call has ended since the session was (re)created."""
        self.busy = busy
        """A call holds the session now."""


def read_usage(path: Path, *, hold: bool = False) -> tuple[Usage, int | None]:
    """Read a usage file. With ``hold``, an idle session's exclusive lock is kept and its descriptor returned (the
    caller closes it once it has stopped the session), so no call starts unseen meanwhile; otherwise None.
    A missing or unreadable file reads as never used and not busy."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return Usage(None, False), None
    try:
        last = datetime.fromtimestamp(os.fstat(fd).st_mtime, UTC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return Usage(last, True), None
    except BaseException:
        os.close(fd)
        raise
    if hold:
        return Usage(last, False), fd
    os.close(fd)
    return Usage(last, False), None
