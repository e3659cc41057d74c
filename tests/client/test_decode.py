"""The client's pure stream decoders: frames and ndjson lines from bytes split anywhere."""

from __future__ import annotations

import random
import struct

import pytest
from pydantic import TypeAdapter, ValidationError

from executor.client._decode import ExecEvents, FrameDecoder, FrameError, LineDecoder
from executor.models import ToolResult
from executor.service.wire import ChunkEvent, ErrorInfo, ExecEvent, PendingEvent, ResultEvent

_EXEC: TypeAdapter[ExecEvent] = TypeAdapter(ExecEvent)


def _frame(kind: int, payload: bytes) -> bytes:
    return struct.pack(">B3xI", kind, len(payload)) + payload


def _splits(data: bytes, rng: random.Random) -> list[bytes]:
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(0, 12))))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


def test_frames_come_out_whole_from_any_split() -> None:
    """Frames split across reads anywhere (headers too) come out whole and in order, empty payloads included."""
    frames = [(1, b"out\0put"), (2, b""), (2, bytes(range(256)) * 40), (3, b'{"kind":"x"}'), (1, b"\xff")]
    wire = b"".join(_frame(kind, payload) for kind, payload in frames)
    rng = random.Random(5)
    for _ in range(200):
        decoder = FrameDecoder()
        got = [frame for part in _splits(wire, rng) for frame in decoder.feed(part)]
        decoder.end()
        assert got == frames and decoder.pending == 0


def test_a_bad_header_or_a_cut_frame_is_an_error() -> None:
    """An unknown kind, non-zero padding, or a stream ending mid-frame raise FrameError naming the problem."""
    with pytest.raises(FrameError, match="not an exec frame header: 09"):
        FrameDecoder().feed(_frame(9, b"x"))
    with pytest.raises(FrameError, match="not an exec frame header: 01000100"):
        FrameDecoder().feed(b"\x01\x00\x01\x00\x00\x00\x00\x00")
    decoder = FrameDecoder()
    assert decoder.feed(_frame(1, b"abcdef")[:-2]) == []
    with pytest.raises(FrameError, match=r"ended inside a frame \(12 bytes of it\)"):
        decoder.end()


def test_exec_events_carry_raw_bytes_and_parse_the_json_ones() -> None:
    """Raw frames become chunk events with the exact bytes; event frames are parsed; the result is the final."""
    pending = PendingEvent(approval_id="a1", summary="rm -rf x")
    result = ResultEvent(result=ToolResult(tool="bash", outcome="completed", text="ok", stdout=b"\x00\x01"))
    wire = (
        _frame(1, b"\x00\xffraw")
        + _frame(3, pending.model_dump_json().encode())
        + _frame(2, b"err")
        + _frame(3, result.model_dump_json().encode())
    )
    events = ExecEvents(_EXEC)
    got = events.feed(wire[:5]) + events.feed(wire[5:])
    events.end()
    assert got == [
        ChunkEvent(stream="stdout", data=b"\x00\xffraw"),
        pending,
        ChunkEvent(stream="stderr", data=b"err"),
        result,
    ]
    assert events.final == result


def test_exec_events_without_a_result_or_with_a_bad_event_fail() -> None:
    """A stream that ends before its result is not taken as whole; an event frame that is no exec event raises."""
    events = ExecEvents(_EXEC)
    events.feed(_frame(1, b"partial"))
    with pytest.raises(FrameError, match="ended without a result"):
        events.end()
    with pytest.raises(ValidationError):
        ExecEvents(_EXEC).feed(_frame(3, b'{"kind":"nope"}'))
    error = ErrorInfo(type="SandboxLost", message="gone")
    done = ExecEvents(_EXEC)
    done.feed(_frame(3, b'{"kind":"error","error":' + error.model_dump_json().encode() + b"}"))
    done.end()
    assert done.final.error == error


def test_lines_split_on_bytes() -> None:
    """Lines split across reads are joined; several lines in one read come out in order."""
    adapter: TypeAdapter[object] = TypeAdapter(object)
    decoder = LineDecoder(adapter)
    got = [event for part in (b'{"a":', b'1}\n{"b":2}\n{', b'"c":3}\n') for event in decoder.feed(part)]
    assert got == [{"a": 1}, {"b": 2}, {"c": 3}]
