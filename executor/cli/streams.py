"""Byte-stream helpers both CLI paths share (the thin client and the in-process commands): standard library only."""

from __future__ import annotations

import errno
import os
from typing import BinaryIO

from executor.cli.shapes import EXIT_FAILURE, EXIT_PIPE

__all__ = ["OutputFailed", "read_capped", "silence"]


class OutputFailed(Exception):
    """The command's output could not be written to our stdout: its reader went away (``| head``: exit 141, quietly,
    as a pipeline's writer) or the write failed (a full disk: exit 125, said). Either way the CLI stops there, as
    ``docker exec`` does, instead of running on with nowhere to write."""

    def __init__(self, cause: OSError | ValueError) -> None:
        super().__init__(str(cause))
        self.cause = cause

    @property
    def code(self) -> int:
        """The exit status."""
        return EXIT_PIPE if self.quiet else EXIT_FAILURE

    @property
    def quiet(self) -> bool:
        """The reader went away: nothing to say (a shell says nothing of a writer's SIGPIPE)."""
        return isinstance(self.cause, OSError) and self.cause.errno == errno.EPIPE

    @property
    def message(self) -> str:
        """What to say when not quiet."""
        why = self.cause.strerror if isinstance(self.cause, OSError) and self.cause.strerror else str(self.cause)
        return f"cannot write the command's output to stdout: {why}"


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
