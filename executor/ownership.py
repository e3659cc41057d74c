"""Whether a service socket is the caller's own, checked before a client sends it anything.

A request carries the command's text, its environment and file contents. A socket at the expected path that another
user made (in a home folder others can write, or swapped in through a folder above it) would receive all of that.
So before connecting, every client (the thin CLI, :mod:`executor.client`) checks, like the journal key's reader
does for the key: the socket and the folder holding it belong to the caller (or root), and neither they nor any
folder above them can be written by others (a folder with the sticky bit, like ``/tmp``, only lets others remove
what is theirs; group-writable folders above the one holding the socket are allowed, as private user groups make
them common). After connecting, where the platform says who listens (``SO_PEERCRED``), the listener's uid must be
the caller's or root's too, which also closes the gap between the check and the connect.

Pure and standard library only: the thin CLI imports it.
"""

from __future__ import annotations

import os
import socket
import stat
import struct

__all__ = ["peer_refusal", "socket_refusal"]

_FIX = "nothing was sent; point EXECUTOR_HOME (or service.socket) at a folder only you can write"


def _owner_ok(uid: int, me: int) -> bool:
    return uid in (me, 0)


def socket_refusal(path: str) -> str | None:
    """Why the socket at ``path`` may not be the caller's service, in one line; None when it is safe to connect
    (or when nothing is there: connecting then fails on its own).

    Refused: a socket owned by another user, or writable by group or others; the folder holding it owned by another
    user (not root) or writable by group or others; a folder above owned by another user, or writable by everyone
    without the sticky bit (a group-writable folder above is left to the operator: private user groups make those
    common).
    """
    try:
        info = os.lstat(path)
    except OSError:
        return None
    me = os.geteuid()
    if not _owner_ok(info.st_uid, me):
        return f"the service socket {path} belongs to uid {info.st_uid}, not to you (uid {me}); {_FIX}"
    if stat.S_ISSOCK(info.st_mode) and info.st_mode & 0o022:
        mode = stat.S_IMODE(info.st_mode)
        return f"the service socket {path} is writable by others (mode {mode:04o}); {_FIX}"
    folder = os.path.dirname(os.path.abspath(path))
    holder = True
    while True:
        try:
            info = os.stat(folder)
        except OSError as exc:
            return f"cannot check {folder}, which holds the service socket {path}: {exc.strerror or exc}"
        mode = stat.S_IMODE(info.st_mode)
        if not _owner_ok(info.st_uid, me):
            return f"{folder} (holding the service socket {path}) belongs to uid {info.st_uid}, not to you; {_FIX}"
        if (holder and mode & 0o022) or (not holder and mode & 0o002 and not mode & stat.S_ISVTX):
            return (
                f"{folder} (holding the service socket {path}) is writable by others (mode {mode:04o}), so another "
                f"user could put a socket there; {_FIX} (or run: chmod go-w {folder})"
            )
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder, holder = parent, False


def peer_refusal(sock: socket.socket, label: str) -> str | None:
    """Why the process listening on connected unix socket ``sock`` may not be the caller's service (its uid is
    neither the caller's nor root's); None when it may be, or where the platform does not say."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    try:
        _, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i")))
    except OSError:
        return None
    me = os.geteuid()
    if _owner_ok(uid, me):
        return None
    return f"the service at {label} runs as uid {uid}, not as you (uid {me}); {_FIX}"
