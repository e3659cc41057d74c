"""The agent protocol's pure codec: frames, fields, and the models carried in them (see PROTOCOL.md).

A frame is ``u32 length | u8 type | u32 id | payload`` (big-endian); ``length`` counts type, id and payload and
is bounded by ``max_frame`` before anything is sized from it. Control payloads are a list of fields
``u8 tag | u32 length | value``; integers are 8-byte big-endian signed, strings raw UTF-8 bytes.

This module imports neither trio nor docker: the client, the tests and the fuzzers share it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import Final, Literal, cast

from pydantic import BaseModel, ConfigDict

from executor.errors import AgentProtocolError
from executor.models import Cause, ProcInfo, RunResult, RunSpec

__all__ = [
    "FRAME_MAX_MAX",
    "FRAME_MIN_MAX",
    "PROTOCOL_VERSION",
    "AgentInfo",
    "Fields",
    "Frame",
    "FrameDecoder",
    "FrameType",
    "Tag",
    "TaskChunk",
    "TaskInfo",
    "decode_fields",
    "decode_result",
    "encode_fields",
    "encode_frame",
    "encode_run_request",
]

PROTOCOL_VERSION = 1
"""Bumped whenever a frame or field changes meaning; the handshake refuses a mismatch."""
FRAME_MIN_MAX = 4096
"""Smallest ``max_frame`` either side may declare."""
FRAME_MAX_MAX = 16 * 1024 * 1024
"""Largest ``max_frame`` either side may declare."""

_HEADER = struct.Struct(">IBI")
_FIELD = struct.Struct(">BI")
_I64 = struct.Struct(">q")
_MIN_LEN = 5  # type + id


class FrameType(IntEnum):
    """Frame types; host->agent below 0x80, agent->host from 0x80."""

    HELLO = 0x01
    RUN = 0x02
    STDIN = 0x03
    CANCEL = 0x04
    START = 0x05
    READ = 0x06
    STOP = 0x07
    LIST = 0x08
    SWEEP = 0x09
    INFO = 0x0A
    PING = 0x0B
    HELLO_OK = 0x81
    STARTED = 0x82
    OUT = 0x83
    ERR = 0x84
    RESULT = 0x85
    ERROR = 0x86
    TASK = 0x87
    CHUNK = 0x88
    TASKS = 0x89
    PROCS = 0x8A
    INFO_OK = 0x8B
    PONG = 0x8C


class Tag(IntEnum):
    """Field tags of control payloads."""

    CMD = 1
    ARGV = 2
    CWD = 3
    ENV = 4
    STDIN = 5
    TIMEOUT_MS = 6
    GRACE_MS = 7
    DRAIN_MS = 8
    KILL_ORPHANS = 9
    VERSION = 10
    MAX_FRAME = 11
    TASK = 12
    STREAM = 13
    OFFSET = 14
    MAX = 15
    STDIN_DATA = 16
    CAUSE = 20
    EXIT_CODE = 21
    SIGNAL = 22
    DURATION_US = 23
    CPU_US = 24
    MAXRSS_KB = 25
    BYTES_OUT = 26
    BYTES_ERR = 27
    ORPHAN_LEFT = 28
    ORPHAN_KILLED = 29
    DRAIN_CUT = 30
    SHELL = 31
    PIDS_MAX_HITS = 32
    SHMEM_BYTES = 33
    ORPHAN_LEFT_TOTAL = 34
    ORPHAN_KILLED_TOTAL = 35
    DATA = 40
    START = 41
    END = 42
    RUNNING = 43
    TASK_REC = 44
    AGENT_VERSION = 50
    HAS_BASH = 51
    UID = 52
    GID = 53
    PID = 54
    MSG = 55
    CODE = 56
    PROC = 57
    TAG = 58
    IS_INIT = 59


@dataclass(frozen=True, slots=True)
class Frame:
    """One decoded frame."""

    type: int
    id: int
    payload: bytes


def encode_frame(ftype: int, fid: int, payload: bytes = b"", *, max_frame: int) -> bytes:
    """Encode one frame; AgentProtocolError when it would exceed ``max_frame`` (the peer's bound)."""
    length = len(payload) + _MIN_LEN
    if length > max_frame:
        raise AgentProtocolError(f"a {length}-byte frame exceeds the agreed max_frame of {max_frame} bytes")
    if not 0 <= fid <= 0xFFFFFFFF or not 0 <= ftype <= 0xFF:
        raise AgentProtocolError(f"frame type {ftype} / id {fid} out of range")
    return _HEADER.pack(length, ftype, fid) + payload


class FrameDecoder:
    """Incremental frame parser with a bound on every length.

    Never buffers more than one frame plus one read: a length outside ``[5, max_frame]`` raises at once.
    """

    def __init__(self, max_frame: int, *, merge_output: bool = False) -> None:
        self._max = max_frame
        self._merge = merge_output
        self._buf = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray) -> list[Frame]:
        """Add received bytes; return the frames now complete.

        Raises:
            AgentProtocolError: a frame length below 5 or above ``max_frame``.
        """
        self._buf += data
        frames: list[Frame] = []
        pos = 0
        buf = self._buf
        # Payloads are copied once, from a view (a bytearray slice would copy twice). With merge_output, a run of
        # OUT (or ERR) frames of one id in this read comes out as one frame: one copy of the bytes, and one pass
        # through the layers above (dispatch, capture, tees) instead of one per agent read of the pipe.
        run: list[memoryview] = []
        run_key: tuple[int, int] | None = None
        with memoryview(buf) as view:
            while len(buf) - pos >= 4:
                (length,) = struct.unpack_from(">I", buf, pos)
                if length < _MIN_LEN or length > self._max:
                    raise AgentProtocolError(
                        f"frame length {length} outside [5, {self._max}]: the peer is not an agent"
                    )
                if len(buf) - pos - 4 < length:
                    break
                _, ftype, fid = _HEADER.unpack_from(buf, pos)
                payload = view[pos + 9 : pos + 4 + length]
                pos += 4 + length
                if self._merge and ftype in _OUTPUT:
                    if run_key != (ftype, fid):
                        _flush_run(frames, run_key, run)
                        run_key = (ftype, fid)
                    run.append(payload)
                    continue
                _flush_run(frames, run_key, run)
                run_key = None
                frames.append(Frame(ftype, fid, bytes(payload)))
                payload.release()  # no view may outlive the loop: the buffer is resized below
            _flush_run(frames, run_key, run)
        if pos:
            del buf[:pos]
        return frames


_OUTPUT: Final = frozenset({FrameType.OUT, FrameType.ERR})


def _flush_run(frames: list[Frame], key: tuple[int, int] | None, run: list[memoryview]) -> None:
    if key is not None and run:
        frames.append(Frame(key[0], key[1], bytes(run[0]) if len(run) == 1 else b"".join(run)))
        for view in run:
            view.release()
        run.clear()


FieldValue = bytes | str | int | bool


def encode_fields(fields: Iterable[tuple[int, FieldValue]]) -> bytes:
    """Encode ``(tag, value)`` pairs: ints (and bools) as 8-byte signed, str as UTF-8, bytes raw."""
    out = bytearray()
    for tag, value in fields:
        if isinstance(value, bool | int):
            raw = _I64.pack(int(value))
        elif isinstance(value, str):
            raw = value.encode("utf-8", "surrogateescape")
        else:
            raw = bytes(value)
        out += _FIELD.pack(tag, len(raw))
        out += raw
    return bytes(out)


def decode_fields(payload: bytes) -> list[tuple[int, bytes]]:
    """Decode a field list; AgentProtocolError when a length runs past the end."""
    fields: list[tuple[int, bytes]] = []
    pos = 0
    end = len(payload)
    while pos < end:
        if end - pos < _FIELD.size:
            raise AgentProtocolError("truncated field header in an agent frame")
        tag, length = _FIELD.unpack_from(payload, pos)
        pos += _FIELD.size
        if length > end - pos:
            raise AgentProtocolError(f"field {tag} claims {length} bytes, only {end - pos} left")
        fields.append((tag, payload[pos : pos + length]))
        pos += length
    return fields


class Fields:
    """Read access to a decoded field list, with type checks that raise AgentProtocolError."""

    def __init__(self, payload: bytes) -> None:
        self._items = decode_fields(payload)

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        return iter(self._items)

    def raw(self, tag: int) -> bytes | None:
        """The last value of ``tag``, or None."""
        found = None
        for t, v in self._items:
            if t == tag:
                found = v
        return found

    def all(self, tag: int) -> list[bytes]:
        """Every value of ``tag``, in order."""
        return [v for t, v in self._items if t == tag]

    def integer(self, tag: int, default: int | None = None) -> int | None:
        """The integer value of ``tag`` (8 bytes), or ``default`` when absent."""
        value = self.raw(tag)
        if value is None:
            return default
        if len(value) != 8:
            raise AgentProtocolError(f"field {tag} should be an 8-byte integer, got {len(value)} bytes")
        return cast(int, _I64.unpack(value)[0])

    def need_int(self, tag: int) -> int:
        """The integer value of ``tag``; AgentProtocolError when absent."""
        value = self.integer(tag)
        if value is None:
            raise AgentProtocolError(f"agent frame lacks field {_tag_name(tag)}")
        return value

    def text(self, tag: int, default: str = "") -> str:
        """The UTF-8 value of ``tag`` (undecodable bytes replaced), or ``default``."""
        value = self.raw(tag)
        return default if value is None else value.decode("utf-8", "replace")


def _tag_name(tag: int) -> str:
    try:
        return Tag(tag).name
    except ValueError:
        return str(tag)


def _proc(value: bytes) -> ProcInfo:
    if len(value) < 8:
        raise AgentProtocolError("a process entry needs an 8-byte pid")
    return ProcInfo(pid=_I64.unpack_from(value)[0], cmd=value[8:].decode("utf-8", "replace"))


def decode_procs(fields: Fields, tag: int) -> tuple[ProcInfo, ...]:
    """The process list carried under ``tag`` (pid + command line per entry)."""
    return tuple(_proc(v) for v in fields.all(tag))


_CAUSES = ("exited", "signaled", "timeout", "cancelled", "oom", "sandbox_lost")


def decode_result(fields: Fields) -> RunResult:
    """A RESULT payload (or the result part of a CHUNK) as a RunResult."""
    cause = fields.text(Tag.CAUSE)
    if cause not in _CAUSES:
        raise AgentProtocolError(f"unknown cause of death {cause!r} from the agent")
    left, killed = decode_procs(fields, Tag.ORPHAN_LEFT), decode_procs(fields, Tag.ORPHAN_KILLED)
    return RunResult(
        cause=cast(Cause, cause),
        exit_code=fields.integer(Tag.EXIT_CODE),
        signal=fields.integer(Tag.SIGNAL),
        duration_ms=fields.need_int(Tag.DURATION_US) / 1000.0,
        cpu_ms=fields.need_int(Tag.CPU_US) / 1000.0,
        max_rss_kb=fields.need_int(Tag.MAXRSS_KB),
        stream_bytes={"stdout": fields.need_int(Tag.BYTES_OUT), "stderr": fields.need_int(Tag.BYTES_ERR)},
        orphans_left=left,
        orphans_killed=killed,
        orphans_left_total=max(fields.integer(Tag.ORPHAN_LEFT_TOTAL, 0) or 0, len(left)),
        orphans_killed_total=max(fields.integer(Tag.ORPHAN_KILLED_TOTAL, 0) or 0, len(killed)),
        drain_cut=bool(fields.integer(Tag.DRAIN_CUT, 0)),
        pids_limit_hits=fields.integer(Tag.PIDS_MAX_HITS, 0) or 0,
        tmpfs_bytes=fields.integer(Tag.SHMEM_BYTES),
    )


def encode_run_request(spec: RunSpec, *, argv: list[str] | None = None, detached: bool = False) -> bytes:
    """The payload of a RUN (foreground) or START (``detached``) request.

    ``argv`` replaces ``bash -c spec.command`` (argv[0] absolute). Foreground stdin is streamed in STDIN frames
    (the request says so); a task's stdin travels inline and must fit one frame.
    """
    fields: list[tuple[int, FieldValue]] = []
    if argv is not None:
        if not argv or not argv[0].startswith("/"):
            raise AgentProtocolError("argv needs an absolute argv[0]")
        fields.extend((Tag.ARGV, a) for a in argv)
    else:
        fields.append((Tag.CMD, spec.command))
    fields.append((Tag.CWD, spec.cwd))
    fields.extend((Tag.ENV, f"{k}={v}") for k, v in spec.env.items())
    if not detached and spec.timeout_ms:
        fields.append((Tag.TIMEOUT_MS, spec.timeout_ms))
    fields += [(Tag.GRACE_MS, spec.grace_ms), (Tag.DRAIN_MS, spec.drain_ms), (Tag.KILL_ORPHANS, spec.kill_orphans)]
    if spec.stdin is not None and not detached:
        fields.append((Tag.STDIN, 1))
    elif spec.stdin is not None:
        if not isinstance(spec.stdin, bytes):
            raise AgentProtocolError("a task's stdin travels inline: bytes, not a file")
        fields.append((Tag.STDIN_DATA, spec.stdin))
    return encode_fields(fields)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class TaskChunk(_Model):
    """One READ of a background task's stream, by whole-stream byte offsets."""

    task_id: str
    """The task."""
    stream: Literal["stdout", "stderr"]
    """Which stream."""
    offset: int
    """Whole-stream offset of ``data`` (moved up to ``start`` when the asked offset was dropped)."""
    data: bytes
    """The bytes from ``offset``; empty at the current end."""
    start: int
    """Earliest offset still held; everything before it was dropped (ring full) and is gone."""
    end: int
    """Bytes the stream has produced so far; ``offset + len(data) == end`` means caught up."""
    running: bool
    """The task's shell has not finished yet."""
    result: RunResult | None = None
    """How the task ended, once it has."""

    @property
    def dropped(self) -> int:
        """Bytes lost to the ring before ``start``."""
        return self.start


class TaskInfo(_Model):
    """A background task as LIST reports it."""

    task_id: str
    """The task."""
    pid: int
    """Its shell's pid (also its process group)."""
    running: bool
    """Still running."""
    command: str
    """The command (bounded)."""
    stream_bytes: dict[str, int]
    """Bytes produced per stream."""
    cause: Cause | None = None
    """Why it ended, once it has."""
    exit_code: int | None = None
    """Its exit code, if it exited."""
    signal: int | None = None
    """The signal that ended it, if any."""


class AgentInfo(_Model):
    """What the agent says about itself."""

    agent_version: str
    """The agent's own version."""
    protocol: int
    """The protocol version it speaks."""
    has_bash: bool
    """``/bin/bash`` exists; without it commands run under ``/bin/sh``."""
    uid: int
    """The uid commands run as."""
    gid: int
    """The gid commands run as."""
    pid: int
    """The agent's pid (1 in a container)."""
    is_init: bool
    """It runs as PID 1."""
    max_frame: int
    """The largest frame it accepts."""


def decode_task_info(payload: bytes) -> TaskInfo:
    """One nested task record of a TASKS frame."""
    f = Fields(payload)
    cause = f.text(Tag.CAUSE) or None
    if cause is not None and cause not in _CAUSES:
        raise AgentProtocolError(f"unknown cause {cause!r}")
    return TaskInfo(
        task_id=f.text(Tag.TASK),
        pid=f.need_int(Tag.PID),
        running=bool(f.need_int(Tag.RUNNING)),
        command=f.text(Tag.CMD),
        stream_bytes={"stdout": f.need_int(Tag.BYTES_OUT), "stderr": f.need_int(Tag.BYTES_ERR)},
        cause=cast(Cause | None, cause),
        exit_code=f.integer(Tag.EXIT_CODE),
        signal=f.integer(Tag.SIGNAL),
    )


def decode_chunk(payload: bytes) -> TaskChunk:
    """A CHUNK frame (reply to READ)."""
    f = Fields(payload)
    running = bool(f.need_int(Tag.RUNNING))
    stream = f.need_int(Tag.STREAM)
    if stream not in (1, 2):
        raise AgentProtocolError(f"unknown stream {stream}")
    return TaskChunk(
        task_id=f.text(Tag.TASK),
        stream="stdout" if stream == 1 else "stderr",
        offset=f.need_int(Tag.OFFSET),
        data=f.raw(Tag.DATA) or b"",
        start=f.need_int(Tag.START),
        end=f.need_int(Tag.END),
        running=running,
        result=None if running else decode_result(f),
    )


def decode_info(payload: bytes) -> AgentInfo:
    """An INFO_OK frame."""
    f = Fields(payload)
    return AgentInfo(
        agent_version=f.text(Tag.AGENT_VERSION),
        protocol=f.need_int(Tag.VERSION),
        has_bash=bool(f.need_int(Tag.HAS_BASH)),
        uid=f.need_int(Tag.UID),
        gid=f.need_int(Tag.GID),
        pid=f.need_int(Tag.PID),
        is_init=bool(f.need_int(Tag.IS_INIT)),
        max_frame=f.need_int(Tag.MAX_FRAME),
    )
