"""Files through the service without holding them: an upload's body spooled to a private file and streamed to
``tar -x``'s stdin (:func:`spooled_body`), and a download's bytes as ``tar -c`` writes them, on their way to one
HTTP reader (:class:`Spool`).

A capture tee (:func:`executor.artifacts.tee_captures`) must never block the session, and a tar stream must never
lose a byte, so :class:`Spool` keeps what the reader has not taken yet in memory up to a bound and past it in an
unlinked temporary file under the home (a slow reader costs disk, bounded by the download's own size limit, never
memory and never the session's time). The whole stream is bounded too: past ``limit`` the spool says so and the
download is cancelled (the agent kills ``tar``'s process group).
"""

from __future__ import annotations

import os
import tempfile
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Final

import trio

from executor.models import StdinFile

__all__ = ["BodySpool", "Spool", "clear_spools", "spooled_body", "unlinked_file"]

_READ_MAX: Final = 1024 * 1024
_BODY_PREFIX: Final = "upload-"


class Spool:
    """One stream's bytes between a producer (a capture tee: never blocks, never raises) and one async reader.

    Args:
        limit: most bytes the stream may carry; past it :attr:`overflow` is set and ``on_overflow`` called once.
        memory: bytes held in memory for a reader that falls behind; past it they go to a temporary file.
        directory: where that file is made (it is unlinked at once).
        stream: the captured stream that is spooled (others are ignored).
    """

    def __init__(
        self,
        *,
        limit: int,
        memory: int,
        directory: Path,
        stream: str = "stdout",
        on_overflow: Callable[[], None] | None = None,
    ) -> None:
        self._limit = limit
        self._memory = memory
        self._directory = directory
        self._stream = stream
        self.on_overflow = on_overflow
        self._chunks: deque[bytes] = deque()
        self._held = 0
        self._file: int | None = None
        self._file_w = 0
        self._file_r = 0
        self._wake = trio.Event()
        self.total = 0
        """Bytes the producer gave (and the spool kept)."""
        self.peak_held = 0
        """Most bytes ever held in memory at once (the flat-memory check reads it)."""
        self.spilled = 0
        """Bytes that went through the temporary file."""
        self.overflow = False
        self.closed = False

    # -- producer ----------------------------------------------------------------------------------------------

    def add(self, stream: str, data: bytes) -> None:
        """Take bytes of ``stream`` (the tee); past the limit, keep what fits (the reader gets exactly ``limit``
        bytes, so a client can tell a cut at the bound from another) and report the overflow once."""
        if stream != self._stream or self.closed or self.overflow or not data:
            return
        if self.total + len(data) > self._limit:
            self.overflow = True
            fits = data[: self._limit - self.total]
            if fits:
                self._keep(fits)
            self._wake.set()
            if self.on_overflow is not None:
                self.on_overflow()
            return
        self._keep(data)

    def _keep(self, data: bytes) -> None:
        self.total += len(data)
        if self._file is None and self._held + len(data) <= self._memory:
            self._chunks.append(data)
            self._held += len(data)
            self.peak_held = max(self.peak_held, self._held)
        else:
            if self._file is None:
                self._file = unlinked_file(self._directory, prefix="download-")
                self._file_w = self._file_r = 0
            view = memoryview(data)
            while view:
                written = os.pwrite(self._file, view, self._file_w)
                self._file_w += written
                view = view[written:]
            self.spilled += len(data)
        self._wake.set()

    def close(self) -> None:
        """No more bytes will come."""
        self.closed = True
        self._wake.set()

    # -- reader ------------------------------------------------------------------------------------------------

    async def wait_for(self, nbytes: int) -> None:
        """Wait until ``nbytes`` have come, or the stream ended (closed or over its limit)."""
        while not (self.closed or self.overflow or self.total >= nbytes):
            await self._next()

    async def wait_closed(self) -> None:
        """Wait until the producer is done (what it gave stays readable)."""
        while not self.closed:
            await self._next()

    async def _next(self) -> None:
        self._wake = trio.Event()
        await self._wake.wait()

    def _take(self) -> bytes | None:
        if self._chunks:
            # Small chunks queued behind the reader go out together: fewer, larger writes to the client.
            parts = [self._chunks.popleft()]
            size = len(parts[0])
            while self._chunks and size + len(self._chunks[0]) <= _READ_MAX:
                parts.append(self._chunks.popleft())
                size += len(parts[-1])
            self._held -= size
            return parts[0] if len(parts) == 1 else b"".join(parts)
        if self._file is not None:
            if self._file_r < self._file_w:
                data = os.pread(self._file, min(_READ_MAX, self._file_w - self._file_r), self._file_r)
                self._file_r += len(data)
                return data
            # The reader caught up: back to memory.
            os.close(self._file)
            self._file = None
        return None

    async def chunks(self) -> AsyncIterator[bytes]:
        """The bytes in order as they come, until the stream is closed (or over its limit)."""
        try:
            while True:
                data = self._take()
                if data is not None:
                    yield data
                    continue
                if self.closed or self.overflow:
                    return
                await self._next()
        finally:
            self.discard()

    def discard(self) -> None:
        """Drop what is held (the reader is done or gone)."""
        self._chunks.clear()
        self._held = 0
        if self._file is not None:
            os.close(self._file)
            self._file = None


class BodySpool:
    """A request body on its way to a command's stdin: written to a private file as it arrives, bounded."""

    def __init__(self, fd: int, path: Path, limit: int) -> None:
        self._fd = fd
        self._path = path
        self._limit = limit
        self.size = 0

    def write(self, data: bytes) -> bool:
        """Append ``data``; False (and nothing kept) once the body would pass the limit."""
        if self.size + len(data) > self._limit:
            return False
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        self.size += len(data)
        return True

    @property
    def path(self) -> Path:
        """The private file (removed when :func:`spooled_body` exits)."""
        return self._path

    def stdin(self) -> StdinFile:
        """The body as a run's stdin (streamed from the file)."""
        return StdinFile(path=str(self._path), size=self.size)


@contextmanager
def spooled_body(directory: Path, limit: int) -> Iterator[BodySpool]:
    """A private (0600) file under ``directory`` for one request body, removed on exit."""
    directory.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=_BODY_PREFIX, dir=directory)
    try:
        yield BodySpool(fd, Path(name), limit)
    finally:
        os.close(fd)
        Path(name).unlink(missing_ok=True)


def clear_spools(directory: Path) -> int:
    """Remove the request bodies a killed service left spooled under ``directory`` (:func:`spooled_body`'s files;
    the other spools are unlinked from the start); returns how many were removed."""
    removed = 0
    with suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            if entry.name.startswith(_BODY_PREFIX) and entry.is_file(follow_symlinks=False):
                with suppress(OSError):
                    Path(entry.path).unlink()
                    removed += 1
    return removed


def unlinked_file(directory: Path, *, prefix: str) -> int:
    """A private temporary file under ``directory``, already unlinked (it goes when its descriptor closes)."""
    directory.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=prefix, dir=directory)
    Path(name).unlink()
    return fd
