"""The pure frame codec (protocol.py): bounds, round trips, and random bytes."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from executor.errors import AgentProtocolError
from executor.models import RunSpec
from executor.sandbox.agent import protocol
from executor.sandbox.agent.protocol import (
    Fields,
    FrameDecoder,
    FrameType,
    Tag,
    decode_fields,
    decode_result,
    encode_fields,
    encode_frame,
    encode_run_request,
)


def test_all_is_exact() -> None:
    """Every public name of the module is listed in __all__ and exists."""
    assert all(hasattr(protocol, name) for name in protocol.__all__)


def test_frames_round_trip_in_any_split() -> None:
    """Frames cut at every byte boundary come out whole and in order."""
    wire = encode_frame(FrameType.OUT, 7, b"\xe2\x82", max_frame=4096) + encode_frame(
        FrameType.ERR, 8, b"\xac", max_frame=4096
    )
    for cut in range(len(wire) + 1):
        decoder = FrameDecoder(4096)
        frames = decoder.feed(wire[:cut]) + decoder.feed(wire[cut:])
        assert [(f.type, f.id, f.payload) for f in frames] == [(0x83, 7, b"\xe2\x82"), (0x84, 8, b"\xac")]
        assert decoder.buffered == 0


def test_merged_output_keeps_every_byte_in_order_in_any_split() -> None:
    """With merge_output, consecutive OUT (or ERR) frames of one id in a read come out as one frame; other frames,
    other ids and stream changes keep their place, and the bytes of each stream are unchanged whatever the split."""
    sent = [
        (FrameType.OUT, 7, b"ab"),
        (FrameType.OUT, 7, b"cd"),
        (FrameType.OUT, 9, b"other"),
        (FrameType.OUT, 7, b"ef"),
        (FrameType.ERR, 7, b"E"),
        (FrameType.ERR, 7, b"F"),
        (FrameType.RESULT, 7, b"\x00"),
        (FrameType.OUT, 7, b"late"),
    ]
    wire = b"".join(encode_frame(t, i, p, max_frame=4096) for t, i, p in sent)
    whole = FrameDecoder(4096, merge_output=True).feed(wire)
    assert [(f.type, f.id, f.payload) for f in whole] == [
        (0x83, 7, b"abcd"),
        (0x83, 9, b"other"),
        (0x83, 7, b"ef"),
        (0x84, 7, b"EF"),
        (FrameType.RESULT, 7, b"\x00"),
        (0x83, 7, b"late"),
    ]
    for cut in range(len(wire) + 1):
        decoder = FrameDecoder(4096, merge_output=True)
        frames = decoder.feed(wire[:cut]) + decoder.feed(wire[cut:])
        for key in {(t, i) for t, i, _ in sent}:
            assert b"".join(f.payload for f in frames if (f.type, f.id) == key) == b"".join(
                p for t, i, p in sent if (t, i) == key
            )
        assert [f.type for f in frames if f.type not in (0x83, 0x84)] == [FrameType.RESULT]
        assert decoder.buffered == 0


@pytest.mark.parametrize("length", [0, 4, 4097, 0xFFFFFFFF])
def test_lengths_out_of_bounds_are_refused(length: int) -> None:
    """A frame length below the header or above max_frame raises before anything is buffered for it."""
    with pytest.raises(AgentProtocolError, match="outside"):
        FrameDecoder(4096).feed(length.to_bytes(4, "big") + b"\x81")


def test_encode_refuses_oversized_frames() -> None:
    """A frame larger than the peer's max_frame is never sent."""
    with pytest.raises(AgentProtocolError, match="exceeds"):
        encode_frame(FrameType.STDIN, 1, b"x" * 4092, max_frame=4096)


def test_fields_round_trip_and_truncation() -> None:
    """Fields round-trip; a field claiming more bytes than remain raises."""
    payload = encode_fields([(Tag.CMD, "echo ü"), (Tag.TIMEOUT_MS, 1500), (Tag.ENV, "A=1"), (Tag.ENV, "B=2")])
    fields = Fields(payload)
    assert fields.text(Tag.CMD) == "echo ü"
    assert fields.integer(Tag.TIMEOUT_MS) == 1500
    assert fields.all(Tag.ENV) == [b"A=1", b"B=2"]
    with pytest.raises(AgentProtocolError, match="claims"):
        decode_fields(payload[:-1])
    with pytest.raises(AgentProtocolError, match="8-byte"):
        Fields(encode_fields([(Tag.TIMEOUT_MS, b"abc")])).integer(Tag.TIMEOUT_MS)


def test_run_request_encodes_the_spec() -> None:
    """A RunSpec becomes cmd, cwd, env, deadlines; a task carries stdin inline and no deadline."""
    spec = RunSpec(command="ls", cwd="/w", env={"X": "1"}, stdin=b"in", timeout_ms=900, grace_ms=10, drain_ms=20)
    fg = Fields(encode_run_request(spec))
    assert (fg.text(Tag.CMD), fg.text(Tag.CWD), fg.all(Tag.ENV)) == ("ls", "/w", [b"X=1"])
    assert (fg.integer(Tag.TIMEOUT_MS), fg.integer(Tag.STDIN), fg.raw(Tag.STDIN_DATA)) == (900, 1, None)
    task = Fields(encode_run_request(spec, detached=True))
    assert (task.integer(Tag.TIMEOUT_MS), task.raw(Tag.STDIN_DATA)) == (None, b"in")
    argv = Fields(encode_run_request(spec, argv=["/bin/echo", "x"]))
    assert (argv.all(Tag.ARGV), argv.raw(Tag.CMD)) == ([b"/bin/echo", b"x"], None)
    with pytest.raises(AgentProtocolError, match="absolute"):
        encode_run_request(spec, argv=["echo"])


def test_result_decoding() -> None:
    """A RESULT payload becomes a RunResult; an unknown cause is a protocol error."""
    base: list[tuple[int, protocol.FieldValue]] = [
        (Tag.DURATION_US, 1500),
        (Tag.CPU_US, 250),
        (Tag.MAXRSS_KB, 3000),
        (Tag.BYTES_OUT, 4),
        (Tag.BYTES_ERR, 0),
        (Tag.ORPHAN_KILLED, (12).to_bytes(8, "big") + b"sleep 30"),
    ]
    result = decode_result(Fields(encode_fields([(Tag.CAUSE, "signaled"), (Tag.SIGNAL, 9), *base])))
    assert (result.cause, result.signal, result.exit_code, result.duration_ms) == ("signaled", 9, None, 1.5)
    assert [(p.pid, p.cmd) for p in result.orphans_killed] == [(12, "sleep 30")]
    with pytest.raises(AgentProtocolError, match="cause"):
        decode_result(Fields(encode_fields([(Tag.CAUSE, "bored"), *base])))


def test_result_totals_count_past_the_listing() -> None:
    """The true counts of leftovers come from their own fields; without them the listed ones are counted."""
    base: list[tuple[int, protocol.FieldValue]] = [
        (Tag.CAUSE, "exited"),
        (Tag.EXIT_CODE, 0),
        (Tag.DURATION_US, 1),
        (Tag.CPU_US, 1),
        (Tag.MAXRSS_KB, 1),
        (Tag.BYTES_OUT, 0),
        (Tag.BYTES_ERR, 0),
        (Tag.ORPHAN_LEFT, (12).to_bytes(8, "big") + b"sleep 30"),
        (Tag.ORPHAN_KILLED, (12).to_bytes(8, "big") + b"sleep 30"),
    ]
    counted = decode_result(
        Fields(encode_fields([*base, (Tag.ORPHAN_LEFT_TOTAL, 450), (Tag.ORPHAN_KILLED_TOTAL, 449)]))
    )
    assert (counted.orphans_left_total, counted.orphans_killed_total, len(counted.orphans_left)) == (450, 449, 1)
    listed = decode_result(Fields(encode_fields(base)))
    assert (listed.orphans_left_total, listed.orphans_killed_total) == (1, 1)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000))
def test_random_bytes_raise_only_protocol_errors(data: bytes) -> None:
    """Random bytes fed to the decoder and the field parser raise nothing but AgentProtocolError."""
    with contextlib.suppress(AgentProtocolError):
        for frame in FrameDecoder(4096).feed(data):
            Fields(frame.payload)
    with contextlib.suppress(AgentProtocolError):
        decode_result(Fields(data))
