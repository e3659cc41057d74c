"""Swapping two file names in one step, for sealing a journal's head without making a file each time."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path
from typing import Any

__all__ = ["exchange_paths"]

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_UNSUPPORTED = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP})
"""What ``renameat2`` answers where the kernel or the file system cannot swap names."""

_lock = threading.Lock()
_renameat2: Any = None
_usable = True


def _load() -> Any:
    """libc's ``renameat2``, or None where the C library has none (loaded once, on first use)."""
    global _renameat2, _usable
    with _lock:
        if _renameat2 is None and _usable:
            import ctypes  # here: most users of the journal package never seal a head

            function = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
            if function is None:
                _usable = False
            else:
                function.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
                function.restype = ctypes.c_int
                _renameat2 = function
        return _renameat2


def exchange_paths(first: Path, second: Path) -> bool:
    """Swap the names ``first`` and ``second`` atomically (``renameat2(RENAME_EXCHANGE)``).

    Returns:
        True when swapped; False when it cannot be done here (no ``renameat2``, a kernel or file system without
        ``RENAME_EXCHANGE``, or ``second`` does not exist): the caller falls back to a rename.

    Raises:
        OSError: any other failure (``first`` missing, no permission...).
    """
    function = _load()
    if function is None:
        return False
    import ctypes

    if function(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in _UNSUPPORTED:
        return False
    if code == errno.ENOENT and os.path.lexists(first):
        return False  # the second name does not exist yet
    raise OSError(code, os.strerror(code), str(first))
