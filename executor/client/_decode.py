"""The client's stream decoders: bytes as they arrive in, complete events out. Pure (no IO, no event loop), so the
blocking and the async client share them and tests drive them with any split of the bytes.

- :class:`FrameDecoder`: the binary exec stream (:data:`executor.service.wire.EXEC_FRAMES`) into ``(kind, payload)``
  frames; :class:`ExecEvents` on top of it gives the exec events (raw chunks as :class:`ChunkEvent`, the rest parsed).
- :class:`LineDecoder`: an ndjson stream (a followed task) into its events.

Each ``feed`` returns only what is complete and keeps the rest: at most one partial frame (or line) is held, so a
reader that takes events slowly holds the HTTP read back instead of buffering ahead.
"""

from __future__ import annotations

import struct
from typing import Any, Final, Literal

from pydantic import TypeAdapter

from executor.service.wire import ChunkEvent

__all__ = ["FRAME_EVENT", "FRAME_STDERR", "FRAME_STDOUT", "ExecEvents", "FrameDecoder", "FrameError", "LineDecoder"]

FRAME_STDOUT: Final = 1
FRAME_STDERR: Final = 2
FRAME_EVENT: Final = 3
_KINDS: Final = frozenset({FRAME_STDOUT, FRAME_STDERR, FRAME_EVENT})
_HEADER: Final = struct.Struct(">II")
"""A frame's header as two words: the kind in the first word's top byte (its other three bytes are zero), then the
payload's length."""
_STREAMS: Final[dict[int, Literal["stdout", "stderr"]]] = {FRAME_STDOUT: "stdout", FRAME_STDERR: "stderr"}


class FrameError(ValueError):
    """The bytes are not a framed exec stream (a bad header), or it ended inside a frame."""


class FrameDecoder:
    """Frames of the binary exec stream, from bytes split anywhere.

    A payload is copied once: the pieces of it that each read brings are kept as views of the (immutable) bytes read
    and joined when the frame is complete, so a 1 MiB frame arriving in 64 KiB reads costs no re-buffering.
    """

    def __init__(self) -> None:
        self._head = bytearray()
        self._kind = 0
        self._need = -1
        """Payload bytes still to come of the current frame; -1: between frames (reading a header)."""
        self._parts: list[memoryview] = []
        self._held = 0

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """The frames ``data`` completes, in order, as ``(kind, payload)``.

        Raises:
            FrameError: a header with an unknown kind or non-zero padding.
        """
        frames: list[tuple[int, bytes]] = []
        view = memoryview(data)
        at, end = 0, len(view)
        while at < end or self._need == 0:
            if self._need < 0:
                if not self._head and end - at >= _HEADER.size:
                    word, size = _HEADER.unpack_from(view, at)
                    at += _HEADER.size
                else:
                    take = min(_HEADER.size - len(self._head), end - at)
                    self._head += view[at : at + take]
                    at += take
                    if len(self._head) < _HEADER.size:
                        break
                    word, size = _HEADER.unpack_from(self._head)
                    self._head.clear()
                kind = word >> 24
                if word & 0xFFFFFF or kind not in _KINDS:
                    raise FrameError(f"not an exec frame header: {_HEADER.pack(word, size).hex()}")
                self._kind, self._need = kind, size
                continue
            take = min(self._need, end - at)
            if take == self._need and not self._parts:
                frames.append((self._kind, bytes(view[at : at + take])))
            else:
                self._parts.append(view[at : at + take])
                self._held += take
                if take == self._need:
                    frames.append((self._kind, b"".join(self._parts)))
                    self._parts.clear()
                    self._held = 0
            at += take
            self._need -= take
            if self._need == 0:
                self._need = -1
        return frames

    @property
    def pending(self) -> int:
        """Bytes held of a frame not complete yet."""
        return len(self._head) + self._held + (_HEADER.size if self._need >= 0 else 0)

    def end(self) -> None:
        """The stream ended.

        Raises:
            FrameError: it ended inside a frame.
        """
        if self.pending:
            raise FrameError(f"the stream ended inside a frame ({self.pending} bytes of it)")


class ExecEvents:
    """Exec events from the framed stream: a :class:`ChunkEvent` per raw frame (its bytes exactly as the command
    wrote them, no copy beyond the frame's own), and the JSON events parsed with ``adapter`` (``ExecEvent``)."""

    def __init__(self, adapter: TypeAdapter[Any]) -> None:
        self._frames = FrameDecoder()
        self._adapter = adapter
        self.final: Any = None
        """The ``result`` or ``error`` event, once it came."""

    def feed(self, data: bytes) -> list[Any]:
        """The events ``data`` completes, in order.

        Raises:
            FrameError: see :meth:`FrameDecoder.feed`.
            pydantic.ValidationError: an event frame that is not an exec event.
        """
        events: list[Any] = []
        for kind, payload in self._frames.feed(data):
            if kind == FRAME_EVENT:
                event = self._adapter.validate_json(payload)
                if event.kind in ("result", "error"):
                    self.final = event
                events.append(event)
            else:
                # Built without validation: the two fields are known good, and this is the hot path.
                events.append(ChunkEvent.model_construct(stream=_STREAMS[kind], data=payload))
        return events

    def end(self) -> None:
        """The stream ended.

        Raises:
            FrameError: it ended inside a frame, or before its result.
        """
        self._frames.end()
        if self.final is None:
            raise FrameError("the exec stream ended without a result")


class LineDecoder:
    """Events of an ndjson stream, split on bytes (no text decoding of large lines; only the fresh bytes of each
    read are searched for the line end), each parsed with ``adapter``."""

    def __init__(self, adapter: TypeAdapter[Any]) -> None:
        self._buffer = bytearray()
        self._adapter = adapter

    def feed(self, data: bytes) -> list[Any]:
        """The events ``data`` completes, in order."""
        buffer = self._buffer
        buffer += data
        end = buffer.rfind(b"\n", max(0, len(buffer) - len(data)))
        if end < 0:
            return []
        lines = [line for line in bytes(buffer[:end]).split(b"\n") if line]
        del buffer[: end + 1]
        return [self._adapter.validate_json(line) for line in lines]

    def end(self) -> None:
        """The stream ended (an unterminated last line is ignored, as before)."""
