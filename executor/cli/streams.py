"""Byte-stream helpers both CLI paths share (the thin client and the in-process commands): standard library only."""

from __future__ import annotations

import os
from typing import BinaryIO

__all__ = ["read_capped", "silence"]


def read_capped(file: BinaryIO, limit: int) -> bytes:
    """Read at most ``limit + 1`` bytes: one byte past the cap tells "exactly at the cap" from "over it", and an
    endless source (``/dev/zero``, a pipe never closed) cannot exhaust memory."""
    parts: list[bytes] = []
    left = limit + 1
    while left > 0:
        chunk = file.read(min(left, 1 << 20))
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def silence(out: BinaryIO) -> None:
    """Point a stream whose reader is gone at /dev/null, so the interpreter's last flush does not complain."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, out.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
