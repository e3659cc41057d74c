"""The capture writer: streams bytes to disk as they arrive, under a per-stream cap that keeps head and tail.

Per stream, the file ``<stream>.part`` holds the head (the first ``cap - cap // 2`` bytes) followed by a ring
region of ``cap // 2`` bytes for the tail. Until the ring wraps, the file is simply the stream. Once it wraps,
the oldest ring bytes are overwritten; each overwritten byte is counted as dropped (with its newlines and the
last newline's position, so the tail keeps its true line numbers). Memory never holds more than one fed chunk.

At finish the ring is rotated into place as ``<stream>`` (a plain copy; never more than the cap), the sparse line
index ``<stream>.idx`` is completed, and the index row is updated. :class:`StreamState` is what the index row
keeps; :func:`layout_of` turns it into a :class:`~executor.artifacts.paging.Layout`. Files are made lazily: a
stream's ``.part`` on its first byte, its ``.idx`` on its first checkpoint (streams shorter than
:data:`~executor.artifacts.paging.CHECKPOINT_INTERVAL` never have one), the artifact folder with the first file. A
stream that stays empty therefore has no file; its index row (0 bytes stored) is all a reader needs.

While a store has captures, its process holds an exclusive ``flock`` on an owner file
``$EXECUTOR_HOME/owners/<token>`` (which records its pid and the cap), and each ``running`` artifact names that
token in its index row. The kernel drops the lock when the process ends, however it ends (``kill -9`` included),
so "the owner is gone" is decidable without trusting pids: :func:`owner_gone` takes the lock without waiting.
:func:`recover_stream` then rebuilds a stream's state from what is on disk, for an artifact finished as
``interrupted``. (Artifacts begun before owner tokens existed hold ``<artifact folder>/owner`` instead.)
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from executor.artifacts.models import ArtifactRecord, StreamInfo
from executor.artifacts.paging import CheckpointTracker, Layout, Segment
from executor.errors import ArtifactError, StreamNotFound

__all__ = [
    "OWNER_FILE",
    "OWNER_TOKEN_RE",
    "Capture",
    "CaptureTee",
    "StreamState",
    "claim_owner",
    "layout_of",
    "owner_gone",
    "read_checkpoints",
    "recover_stream",
    "release_owner",
    "stream_info",
    "tee_captures",
    "tees_for",
]

_CP = struct.Struct("<QQ")
_COPY_CHUNK = 1024 * 1024
OWNER_FILE = "owner"
"""The owner file inside an artifact folder, as captures before process owner files made them."""


CaptureTee = Callable[[str, bytes], None]
"""Receives ``(stream, chunk)`` as a capture is fed; it must neither block nor raise (it runs inside the feed)."""

_TEES: ContextVar[tuple[tuple[str, CaptureTee, Callable[[str], None] | None], ...]] = ContextVar(
    "executor_capture_tees", default=()
)


@contextmanager
def tee_captures(tee: CaptureTee, *, kind: str, on_begin: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hand every chunk of each capture of ``kind`` begun in this context (and tasks it starts) to ``tee`` too.

    This is how a live surface (the service's exec stream) sees output as it arrives while the artifact still gets
    every byte: the tee is called after the bytes are on disk, and a tee that falls behind drops chunks itself.
    ``on_begin`` is told each such capture's artifact id when it begins.
    """
    token = _TEES.set((*_TEES.get(), (kind, tee, on_begin)))
    try:
        yield
    finally:
        _TEES.reset(token)


def tees_for(kind: str, artifact_id: str) -> tuple[CaptureTee, ...]:
    """The tees registered for ``kind`` in the current context (see :func:`tee_captures`), told of ``artifact_id``."""
    tees: list[CaptureTee] = []
    for wanted, tee, on_begin in _TEES.get():
        if wanted == kind:
            if on_begin is not None:
                on_begin(artifact_id)
            tees.append(tee)
    return tuple(tees)


class StreamState(BaseModel):
    """The index row of one stream: enough to rebuild its layout without reading it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    file: str
    """File name inside the artifact folder (``<stream>.part`` while running, ``<stream>`` once finished)."""
    head_len: int = 0
    """Bytes in the head region."""
    ring_cap: int = 0
    """Size of the ring region."""
    ring_len: int = 0
    """Bytes in the ring region."""
    ring_w: int = 0
    """Ring position of the oldest byte (= the next write position) once wrapped."""
    wrapped: bool = False
    """The ring overwrote bytes: a middle part was dropped."""
    rotated: bool = False
    """The file is laid out linearly (finished); no ring mapping is needed."""
    total: int = 0
    """Bytes fed."""
    newlines: int = 0
    """Newlines fed."""
    head_newlines: int = 0
    """Newlines in the head region."""
    head_ends_nl: bool = False
    """The head's last byte is a newline."""
    last_nl: bool = False
    """The last byte fed is a newline."""
    dropped_bytes: int = 0
    """Bytes overwritten in the ring."""
    dropped_newlines: int = 0
    """Newlines among the dropped bytes."""
    last_nl_before_tail: int = -1
    """True position of the last newline before the tail's first byte (-1: none)."""
    idx_valid_below: int = 0
    """Checkpoints at stored offsets below this are valid."""
    growing: bool = True
    """Still being written."""


def layout_of(state: StreamState, checkpoints: tuple[tuple[int, int], ...]) -> Layout:
    """The paging layout of a stream in ``state``."""
    stored = state.head_len + state.ring_len
    valid = tuple(cp for cp in checkpoints if cp[0] < state.idx_valid_below)
    if stored == 0:
        return Layout(segments=(), checkpoints=(), growing=state.growing)
    if not state.wrapped:
        seg = Segment(0, stored, 1, 0, state.newlines, state.last_nl)
        return Layout(segments=(seg,), checkpoints=valid, growing=state.growing)
    h, r = state.head_len, state.ring_len
    tail_start = state.total - r
    head = Segment(0, h, 1, 0, state.head_newlines, state.head_ends_nl)
    tail = Segment(
        h,
        h + r,
        1 + state.head_newlines + state.dropped_newlines,
        tail_start - (state.last_nl_before_tail + 1),
        state.newlines - state.head_newlines - state.dropped_newlines,
        state.last_nl,
    )
    return Layout(segments=(head, tail), checkpoints=valid, growing=state.growing, truncated=True)


def stream_info(name: str, state: StreamState) -> StreamInfo:
    """The public description of a stream in ``state``."""
    lines = state.newlines + (1 if state.total and not state.last_nl else 0)
    dropped = state.dropped_bytes > 0
    return StreamInfo(
        name=name,
        bytes_total=state.total,
        bytes_stored=state.head_len + state.ring_len,
        lines=lines,
        truncated=dropped,
        dropped_bytes=state.dropped_bytes,
        dropped_at=state.head_len if dropped else None,
        dropped_from_line=1 + state.head_newlines if dropped else None,
        resumes_at_line=1 + state.head_newlines + state.dropped_newlines if dropped else None,
        growing=state.growing,
    )


def read_checkpoints(path: Path | str) -> tuple[tuple[int, int], ...]:
    """The checkpoints of a ``.idx`` file (a trailing partial record, from a concurrent append, is ignored; a
    missing file, as a short stream has, holds none)."""
    try:
        with open(path, "rb") as stream:
            raw = stream.read()
    except FileNotFoundError:
        return ()
    usable = len(raw) - len(raw) % _CP.size
    return tuple(_CP.iter_unpack(raw[:usable]))


OWNER_TOKEN_RE = re.compile(r"[0-9]{1,10}-[0-9a-f]{12}")
"""The shape of an owner token (``<pid>-<12 hex digits>``), checked before a path is derived from one."""


def claim_owner(owners: Path | str, cap: int) -> tuple[str, int]:
    """Create an owner file in ``owners`` and hold its lock for the life of this store; returns (token, descriptor).

    The file is made and locked under a temporary name and only then renamed to its token, so a process sweeping
    ``owners`` never finds an unlocked owner file of a live process.
    """
    token = f"{os.getpid()}-{secrets.token_hex(6)}"
    final = os.path.join(owners, token)
    tmp = os.path.join(owners, f".{token}.tmp")
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, json.dumps({"pid": os.getpid(), "cap": cap}).encode("ascii"))
        os.rename(tmp, final)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return token, fd


def owner_gone(path: Path | str) -> tuple[int, dict[str, int]] | None:
    """If the process that holds the owner file ``path`` is gone, hold its lock and return (descriptor, record).

    None: a live process still holds the lock. A missing owner file (a capture begun before owner files existed,
    or an owner already recovered and removed) counts as gone. The caller releases with :func:`release_owner`.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return -1, {}
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    try:
        raw = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except ValueError:
        raw = {}
    record = {k: v for k, v in raw.items() if isinstance(v, int)} if isinstance(raw, dict) else {}
    return fd, record


def release_owner(path: Path | str, fd: int) -> None:
    """Remove the owner file ``path`` and drop its lock (its captures are finished, or recovered)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    if fd >= 0:
        os.close(fd)


def recover_stream(folder: Path | str, name: str, published: StreamState, cap: int) -> StreamState:
    """The state of a stream whose capture ended without finishing, rebuilt from the bytes on disk.

    A stream that never reached its cap is linear on disk and is recovered exactly (every byte written before the
    end, lines counted from the file). One that reached its cap keeps its head exactly and its tail as of the last
    published state (bytes written after that publish may show in the tail ring, mixed with older ones).
    """
    final = Path(folder, name)
    part = Path(folder, f"{name}.part")
    if not part.exists() and final.exists():
        return published.model_copy(update={"file": name, "growing": False})  # finished on disk, not in the index
    if not part.exists():
        return StreamState(file=name, growing=False)
    size = part.stat().st_size
    if published.wrapped:
        return published.model_copy(update={"growing": False})
    head_cap = cap - cap // 2
    newlines = head_newlines = 0
    head_ends_nl = last_nl = False
    with part.open("rb") as stream:
        offset = 0
        while chunk := stream.read(_COPY_CHUNK):
            newlines += chunk.count(b"\n")
            if offset < head_cap:
                head_part = chunk[: head_cap - offset]
                head_newlines += head_part.count(b"\n")
                head_ends_nl = head_part[-1:] == b"\n"
            last_nl = chunk[-1:] == b"\n"
            offset += len(chunk)
    part.replace(final)
    head_len = min(size, head_cap)
    return StreamState(
        file=name,
        head_len=head_len,
        ring_cap=cap // 2,
        ring_len=size - head_len,
        rotated=True,
        total=size,
        newlines=newlines,
        head_newlines=head_newlines,
        head_ends_nl=head_ends_nl,
        last_nl=last_nl,
        idx_valid_below=size,
        growing=False,
    )


def _pwrite_all(fd: int, data: bytes | memoryview, offset: int) -> None:
    """Write all of ``data`` at ``offset``; a short write (a disk filling up) is continued until it fails outright,
    so the bytes accounted for are exactly the bytes on disk."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


class _StreamWriter:
    """One stream's files, made on its first byte: a stream that never receives one has no file at all."""

    def __init__(
        self, folder: str, name: str, cap: int, make_folder: Callable[[], None], *, sync: bool = False
    ) -> None:
        self.folder = folder
        self.sync = sync
        """Fsync the stream's file before it is finished (the index's ``full`` level: a finished row never points
        at bytes a power cut, or a file system that reports a full disk only on sync, could still lose)."""
        self.name = name
        self.head_cap = cap - cap // 2
        self.ring_cap = cap // 2
        self.part_name = f"{name}.part"
        self.part = self.final = self.idx = ""  # the paths, set when the file is made
        self._make_folder = make_folder
        self.fd = -1
        self.idx_fd = -1
        self.opened = False
        """The stream's file was made (it received a byte)."""
        self.tracker = CheckpointTracker(base=0, first_line=1)
        self.head_len = 0
        self.ring_len = 0
        self.ring_w = 0
        self.wrapped = False
        self.total = 0
        self.newlines = 0
        self.head_newlines = 0
        self.head_ends_nl = False
        self.last_nl = False
        self.dropped_bytes = 0
        self.dropped_newlines = 0
        self.last_nl_pos = -1  # true position of the last newline fed (only needed until the ring wraps)
        self.last_nl_before_tail = -1
        self.idx_broken = False
        self.closed = False

    def feed(self, data: bytes) -> None:
        # Every count is advanced only after its bytes are written: when a write fails (a full disk), the state
        # describes exactly the bytes on disk.
        if not data:
            return
        if self.fd < 0:
            self._make_folder()
            self.part = os.path.join(self.folder, self.part_name)
            self.final = os.path.join(self.folder, self.name)
            self.idx = os.path.join(self.folder, f"{self.name}.idx")
            self.fd = os.open(self.part, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            self.opened = True
        # The rest of a chunk is passed on as a view: a slice of bytes is a copy, and one per ring step of a
        # frame-sized chunk made the capture's peak memory a few chunks deep.
        view = memoryview(data)
        if self.head_len < self.head_cap:
            take = min(len(data), self.head_cap - self.head_len)
            part = data[:take]
            _pwrite_all(self.fd, part, self.head_len)
            self._linear(part)
            self.head_len += take
            self.head_newlines += part.count(b"\n")
            self.head_ends_nl = part[-1:] == b"\n"
            view = view[take:]
        while view:
            view = self._ring(view)

    def _written(self, part: bytes) -> None:
        self.newlines += part.count(b"\n")
        self.last_nl = part[-1:] == b"\n"

    def _linear(self, part: bytes) -> None:
        """Account bytes written at the end of the still-linear file."""
        self._written(part)
        self.tracker.feed(part)
        j = part.rfind(b"\n")
        if j >= 0:
            self.last_nl_pos = self.total + j
        self.total += len(part)
        if self.tracker.found:
            records = b"".join(_CP.pack(*cp) for cp in self.tracker.found)
            self.tracker.found.clear()
            if not self.idx_broken:
                try:
                    if self.idx_fd < 0:  # made with the first checkpoint: a short stream has no line index
                        self.idx_fd = os.open(self.idx, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
                    os.write(self.idx_fd, records)
                except OSError:
                    # Checkpoints only speed up seeks; after a failed (full disk) or short write, keep the whole
                    # records and add none, so the index never holds a misaligned one.
                    self.idx_broken = True
                    if self.idx_fd >= 0:
                        size = os.fstat(self.idx_fd).st_size
                        os.ftruncate(self.idx_fd, size - size % _CP.size)

    def _ring(self, data: memoryview) -> memoryview:
        base = self.head_cap
        if self.ring_len < self.ring_cap:
            take = min(len(data), self.ring_cap - self.ring_len)
            part = bytes(data[:take])
            _pwrite_all(self.fd, part, base + self.ring_len)
            self._linear(part)
            self.ring_len += take
            return data[take:]
        if not self.wrapped:
            self.wrapped = True
            tail_start = self.total - self.ring_cap
            if self.last_nl_pos < tail_start:
                self.last_nl_before_tail = self.last_nl_pos
            else:
                self.last_nl_before_tail = self._last_nl_below(tail_start)
        take = min(len(data), self.ring_cap - self.ring_w)
        old = os.pread(self.fd, take, base + self.ring_w)
        part = bytes(data[:take])
        _pwrite_all(self.fd, part, base + self.ring_w)
        self._written(part)
        # The overwritten bytes are true positions [total - ring_cap, total - ring_cap + take).
        oldest = self.total - self.ring_cap
        self.dropped_bytes += take
        self.dropped_newlines += old.count(b"\n")
        j = old.rfind(b"\n")
        if j >= 0:
            self.last_nl_before_tail = oldest + j
        self.ring_w = (self.ring_w + take) % self.ring_cap
        self.total += take
        return data[take:]

    def _last_nl_below(self, true_pos: int) -> int:
        """Last newline at a true position below ``true_pos``, searched in the still-linear file."""
        end = true_pos
        while end > 0:
            start = max(0, end - _COPY_CHUNK)
            chunk = os.pread(self.fd, end - start, start)
            j = chunk.rfind(b"\n")
            if j >= 0:
                return start + j
            end = start
        return -1

    def state(self, *, growing: bool, rotated: bool = False, file: str | None = None) -> StreamState:
        return StreamState(
            file=file or self.part_name,
            head_len=self.head_len,
            ring_cap=self.ring_cap,
            ring_len=self.ring_len,
            ring_w=self.ring_w,
            wrapped=self.wrapped,
            rotated=rotated or not self.wrapped,
            total=self.total,
            newlines=self.newlines,
            head_newlines=self.head_newlines,
            head_ends_nl=self.head_ends_nl,
            last_nl=self.last_nl,
            dropped_bytes=self.dropped_bytes,
            dropped_newlines=self.dropped_newlines,
            last_nl_before_tail=self.last_nl_before_tail,
            idx_valid_below=(self.head_len if self.wrapped and not rotated else self.head_len + self.ring_len),
            growing=growing,
        )

    def close(self) -> None:
        """Close the stream's files (its bytes stay on disk)."""
        self._close()

    def _close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
        if self.idx_fd >= 0:
            os.close(self.idx_fd)
        self.fd = self.idx_fd = -1
        self.closed = True

    def finish(self) -> StreamState:
        """Lay the stream out linearly as ``<name>`` and complete its index."""
        if not self.wrapped:
            if self.sync and self.fd >= 0:
                os.fsync(self.fd)
            self._close()
            if self.opened:
                os.replace(self.part, self.final)
            return self.state(growing=False, file=self.name)
        final = self.final
        tmp = os.path.join(self.folder, f"{self.name}.tmp")
        idx_tmp = f"{self.idx}.tmp"
        try:
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                self._copy(out, 0, self.head_len, None)
                base = self.head_cap
                first_line = 1 + self.head_newlines + self.dropped_newlines
                tracker = CheckpointTracker(base=self.head_len, first_line=first_line)
                self._copy(out, base + self.ring_w, base + self.ring_cap, tracker)
                self._copy(out, base, base + self.ring_w, tracker)
                if self.sync:
                    os.fsync(out)
            finally:
                os.close(out)
            head_cps = [cp for cp in read_checkpoints(self.idx) if cp[0] < self.head_len]
            with open(idx_tmp, "wb") as out_idx:
                out_idx.write(b"".join(_CP.pack(*cp) for cp in [*head_cps, *tracker.found]))
        except OSError:
            # No room to lay the stream out linearly (a full disk): keep the ring file as it is, with every byte
            # it holds; readers map a wrapped ring to its logical order, so the output stays readable.
            for path in (tmp, idx_tmp):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            self._close()
            return self.state(growing=False)
        os.replace(idx_tmp, self.idx)
        os.replace(tmp, final)
        self._close()
        return self.state(growing=False, rotated=True, file=self.name)

    def _copy(self, out: int, start: int, end: int, tracker: CheckpointTracker | None) -> None:
        pos = start
        while pos < end:
            chunk = os.pread(self.fd, min(_COPY_CHUNK, end - pos), pos)
            if not chunk:
                raise OSError(f"capture file {self.part} shrank while finishing")
            os.write(out, chunk)
            if tracker is not None:
                tracker.feed(chunk)
            pos += len(chunk)

    def discard_part(self) -> None:
        if not self.closed:
            self._close()
        if self.opened:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.part)


class Capture:
    """Receives one tool result's streams as they arrive (a :class:`~executor.models.CaptureSink`).

    Made by ``SessionArtifacts.begin``; finish it exactly once with :meth:`finish`. Until then the artifact reads
    as ``growing``: :meth:`flush` publishes what arrived so far (``read_output``/``search_output`` in the same
    process flush a live capture themselves). Used as a context manager, an exception finishes it as ``error``.

    Nothing is made on disk until a stream's first byte: the artifact folder and a stream's file appear then, so a
    stream that stays empty has no file (its index row alone describes it), and neither has an artifact whose
    streams all stay empty.
    """

    def __init__(
        self,
        *,
        artifact_id: str,
        folder: Path | str,
        streams: tuple[str, ...],
        cap: int,
        publish: Callable[[str, dict[str, StreamState], str | None, dict[str, str]], ArtifactRecord | None],
        tees: tuple[CaptureTee, ...] = (),
        sync: bool = False,
    ) -> None:
        self.artifact_id = artifact_id
        """The artifact this capture fills."""
        self._publish = publish
        self._folder = os.fspath(folder)
        self._folder_made = False
        self._tees = tees
        self._writers = {name: _StreamWriter(self._folder, name, cap, self._make_folder, sync=sync) for name in streams}
        self._finished: ArtifactRecord | None = None
        self._dirty = True
        self._noted: dict[str, str] = {}

    def _make_folder(self) -> None:
        if not self._folder_made:
            os.makedirs(self._folder, mode=0o700, exist_ok=True)
            self._folder_made = True

    def feed(self, stream: str, data: bytes) -> None:
        """Append ``data`` to ``stream``; written to disk at once, never held.

        Raises:
            StreamNotFound: ``stream`` was not declared when the capture began.
            ArtifactError: the capture is already finished, or the disk refused the bytes (a full disk: every byte
                stored before is kept and accounted for).
        """
        if self._finished is not None:
            raise ArtifactError(f"artifact {self.artifact_id} is finished; start a new capture for more output")
        writer = self._writers.get(stream)
        if writer is None:
            raise StreamNotFound(
                f"artifact {self.artifact_id} has no stream {stream!r}; declared: {', '.join(self._writers)}"
            )
        self._dirty = True
        try:
            writer.feed(data)
        except OSError as exc:
            raise ArtifactError(
                f"artifact {self.artifact_id} stream {stream}: cannot store more output ({exc.strerror or exc}); "
                f"the artifact keeps {self.kept()}, not the whole output; free space under the executor's home and "
                "retry"
            ) from exc
        for tee in self._tees:
            tee(stream, data)

    def kept(self) -> str:
        """What is on disk so far, per stream: ``stdout 4096 bytes, stderr 0 bytes``."""
        return ", ".join(f"{name} {w.head_len + w.ring_len} bytes" for name, w in self._writers.items())

    def flush(self) -> None:
        """Publish the bytes fed so far, so readers (in any process) see them; cheap when nothing changed."""
        if self._finished is not None or not self._dirty:
            return
        self._dirty = False
        self._publish(self.artifact_id, {n: w.state(growing=True) for n, w in self._writers.items()}, None, {})

    def note(self, key: str, value: str) -> None:
        """Add ``key`` to the record's metadata when it finishes (what the producer learnt while capturing)."""
        self._noted[key] = value

    def finish(self, *, status: str) -> ArtifactRecord:
        """Lay every stream out for good, record ``status`` (``ok``, ``error``, ...) and apply retention.

        Returns:
            The finished record. Finishing twice returns the first record.
        """
        if self._finished is not None:
            return self._finished
        states: dict[str, StreamState] = {}
        try:
            for name, writer in self._writers.items():
                states[name] = writer.finish()
            record = self._publish(self.artifact_id, states, status, self._noted)
        except BaseException as exc:
            # The index could not record the finish (a full disk): put each linear file back where the index still
            # points, so its bytes stay with the unfinished artifact for whoever finalises it later.
            for name, writer in self._writers.items():
                done = states.get(name)
                if done is not None and writer.opened and not writer.wrapped and done.file != writer.part_name:
                    with contextlib.suppress(OSError):
                        os.replace(os.path.join(writer.folder, done.file), writer.part)
            for writer in self._writers.values():
                if not writer.closed:
                    writer.close()
            if isinstance(exc, OSError):  # laying a stream out (a rename, a sync) failed: the disk, not a bug
                raise ArtifactError(
                    f"artifact {self.artifact_id}: cannot finalise its output ({exc.strerror or exc}); the artifact "
                    f"keeps {self.kept()}, finalised when the home is next opened; free space under the executor's "
                    "home and retry"
                ) from exc
            if isinstance(exc, ArtifactError):  # the index refused the finish (a full disk)
                raise ArtifactError(
                    f"{exc}; artifact {self.artifact_id} keeps {self.kept()} on disk, not recorded as finished"
                ) from exc
            raise
        if record is None:
            raise ArtifactError(f"artifact {self.artifact_id}: the index did not record the finish")
        self._finished = record
        for name, writer in self._writers.items():
            # A rotated ring leaves its ring file behind; one kept in place (full disk) is the stream itself, and a
            # linear stream's file was renamed.
            if writer.wrapped and states[name].file != writer.part_name:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(writer.part)
        return self._finished

    @property
    def finished(self) -> bool:
        """Whether :meth:`finish` ran."""
        return self._finished is not None

    def __enter__(self) -> Capture:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if self._finished is None:
            self.finish(status="ok" if exc_type is None else "error")
