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
    """Frames of the binary exec stream, from bytes split anywhere."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """The frames ``data`` completes, in order, as ``(kind, payload)``.

        Raises:
            FrameError: a header with an unknown kind or non-zero padding.
        """
        buffer = self._buffer
        buffer += data
        frames: list[tuple[int, bytes]] = []
        at, end = 0, len(buffer)
        with memoryview(buffer) as view:
            while end - at >= _HEADER.size:
                word, size = _HEADER.unpack_from(buffer, at)
                kind = word >> 24
                if word & 0xFFFFFF or kind not in _KINDS:
                    raise FrameError(f"not an exec frame header: {bytes(view[at : at + _HEADER.size]).hex()}")
                stop = at + _HEADER.size + size
                if stop > end:
                    break
                frames.append((kind, bytes(view[at + _HEADER.size : stop])))
                at = stop
        del buffer[:at]
        return frames

    @property
    def pending(self) -> int:
        """Bytes held of a frame not complete yet."""
        return len(self._buffer)

    def end(self) -> None:
        """The stream ended.

        Raises:
            FrameError: it ended inside a frame.
        """
        if self._buffer:
            raise FrameError(f"the stream ended inside a frame ({len(self._buffer)} bytes of it)")


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
