"""The host side of the agent protocol, on trio: many runs multiplexed over one byte stream.

::

    async with open_agent_client(await trio.open_unix_socket(path)) as agent:
        result = await agent.run(spec, sink)

One reader task (in the client's own nursery) decodes frames and hands each to the call waiting for its id
through a bounded memory channel: a slow sink slows the reader, the agent's queue for this connection fills,
and the agent stops reading the command's pipes. Nothing holds a whole stream in memory.

The host keeps its own bound on every call, as a backstop to the agent's deadlines: a run waits at most its
deadline + grace + drain + ``host_margin_s``, every other request ``host_margin_s`` (plus the kill grace for the
calls that kill). Past it the agent is declared unresponsive (a paused container, a frozen agent, a stalled engine):
a run returns with cause ``unresponsive`` and the output received so far, any other call raises
:class:`SessionUnhealthy`, the client is marked broken so every later call raises it at once, and
``on_unhealthy`` is told (the session records it so that other processes refuse the session too). A run without a
deadline (``timeout_ms=None``) has no host bound but its caller's cancellation.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import math
import os
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Literal

import trio

from executor.errors import AgentError, AgentProtocolError, SandboxLost, SessionUnhealthy, SpawnFailed, TaskNotFound
from executor.models import CaptureSink, ProcInfo, RunResult, RunSpec, StdinFile
from executor.sandbox.agent.protocol import (
    FRAME_MAX_MAX,
    FRAME_MIN_MAX,
    PROTOCOL_VERSION,
    AgentInfo,
    Fields,
    Frame,
    FrameDecoder,
    FrameType,
    Tag,
    TaskChunk,
    TaskInfo,
    decode_chunk,
    decode_info,
    decode_procs,
    decode_result,
    decode_task_info,
    encode_fields,
    encode_frame,
    encode_run_request,
)

__all__ = [
    "AgentClient",
    "AgentInfo",
    "TaskChunk",
    "TaskInfo",
    "on_run_started",
    "open_agent_client",
    "open_agent_unix",
]

_RECV_BYTES = 256 * 1024
_STARTED: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar(
    "executor_run_started", default=None
)


@contextlib.contextmanager
def on_run_started(callback: Callable[[], None]) -> Iterator[None]:
    """Call ``callback`` (it must not raise) when a foreground run made in this context (this task) has started: the
    agent spawned it, so its cwd existed. The service waits for this before it answers an exec with a stream, so a
    command that cannot start is a plain error response instead."""
    token = _STARTED.set(callback)
    try:
        yield
    finally:
        _STARTED.reset(token)


_CHANNEL_FRAMES = 64
_ARG_SAFE_BYTES = 100 * 1024
"""Longest command passed as ``bash -c``'s argument; a longer one goes on stdin (see :func:`_long_script`)."""
_CANCEL_SLACK_S = 5.0
"""Beyond grace + drain, how long a cancelled caller waits (shielded) for the agent's result."""


class AgentClient:
    """A connection to one agent. Build it with :func:`open_agent_client`; it lives as long as that block.

    Every method raises :class:`SandboxLost` when the connection dies under it and
    :class:`AgentProtocolError` when the agent sends something that is not the protocol.
    """

    def __init__(
        self,
        stream: trio.abc.Stream,
        *,
        max_frame: int,
        host_margin_s: float = 10.0,
        kill_grace_ms: int = 3_000,
        on_unhealthy: Callable[[str], None] | None = None,
    ) -> None:
        self._stream = stream
        self._margin_s = host_margin_s
        self._kill_grace_s = kill_grace_ms / 1000.0
        self._on_unhealthy = on_unhealthy
        self._max_frame = max_frame
        self._send_max = FRAME_MIN_MAX
        self._decoder = FrameDecoder(max_frame, merge_output=True)
        self._send_lock = trio.Lock()
        self._ids = itertools.count(1)
        self._waiters: dict[int, trio.MemorySendChannel[Frame]] = {}
        self._broken: Exception | None = None
        self._agent_pid = 0
        self._nursery: trio.Nursery | None = None
        self._closed = trio.Event()

    @property
    def agent_pid(self) -> int:
        """The agent's pid as the handshake reported it."""
        return self._agent_pid

    @property
    def send_max(self) -> int:
        """The largest frame this client sends (the agent's bound)."""
        return self._send_max

    # ------------------------------------------------------------------ plumbing

    async def _send(self, ftype: int, fid: int, payload: bytes = b"") -> None:
        try:
            frame = encode_frame(ftype, fid, payload, max_frame=self._send_max)
        except AgentProtocolError as exc:
            # Refused here, before a byte went out: the connection is as good as before (not a protocol failure).
            raise AgentError(f"the request is too large for the agent: {exc}") from None
        self._check()
        async with self._send_lock:
            try:
                # A frame goes out whole or the connection is given up: a send cut by a cancellation (a run that
                # ended while its stdin was still being sent) would leave half a frame, and the agent would read the
                # next frame as its rest, answering nothing on this connection again. Shielded, bounded.
                with trio.CancelScope(shield=True, deadline=trio.current_time() + self._margin_s) as whole:
                    await self._stream.send_all(frame)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                self._fail(SandboxLost(f"the connection to the agent broke while sending: {exc}"))
                raise self._lost() from exc
            if whole.cancelled_caught:
                raise self._unresponsive("a frame of ours", self._margin_s)

    def _check(self) -> None:
        if self._broken is not None:
            raise self._lost()

    def _lost(self) -> Exception:
        err = self._broken
        if isinstance(err, AgentProtocolError):
            return AgentProtocolError(str(err))
        if isinstance(err, SessionUnhealthy):
            return SessionUnhealthy(str(err))
        return SandboxLost(str(err) if err else "the connection to the agent is closed")

    def _unresponsive(self, what: str, waited_s: float) -> SessionUnhealthy:
        """Declare the agent unresponsive: break the client, tell ``on_unhealthy``, return the error to raise."""
        reason = (
            f"the agent did not answer {what} within {waited_s:.1f}s (the host's bound, agent.host_margin_s="
            f"{self._margin_s:g}s past the agent's own); the container may be paused or frozen or the engine stalled"
        )
        err = SessionUnhealthy(
            f"the session is unhealthy: {reason}; stop it (`executor session stop ID`) and start a new one"
        )
        first = self._broken is None
        self._fail(err)
        if first and self._on_unhealthy is not None:
            self._on_unhealthy(reason)
        return err

    async def wait_closed(self) -> None:
        """Return once the connection is unusable: the agent went away, the stream broke, or the client closed."""
        await self._closed.wait()

    def _fail(self, err: Exception) -> None:
        if self._broken is None:
            self._broken = err
        self._closed.set()
        for send in self._waiters.values():
            send.close()
        self._waiters.clear()

    async def _handshake(self) -> None:
        hello = encode_fields([(Tag.VERSION, PROTOCOL_VERSION), (Tag.MAX_FRAME, self._max_frame)])
        await self._stream.send_all(encode_frame(FrameType.HELLO, 0, hello, max_frame=FRAME_MIN_MAX))
        while True:
            data = await self._stream.receive_some(_RECV_BYTES)
            if not data:
                raise SandboxLost("the agent closed the connection during the handshake")
            frames = self._decoder.feed(data)
            if frames:
                break
        first = frames[0]
        fields = Fields(first.payload)
        if first.type == FrameType.ERROR:
            raise AgentProtocolError(f"the agent refused the handshake: {fields.text(Tag.MSG)}")
        if first.type != FrameType.HELLO_OK:
            raise AgentProtocolError(f"expected HELLO_OK from the agent, got frame type {first.type:#x}")
        version = fields.need_int(Tag.VERSION)
        if version != PROTOCOL_VERSION:
            raise AgentProtocolError(
                f"the agent speaks protocol {version}, this host {PROTOCOL_VERSION}; rebuild the agent"
            )
        self._send_max = min(self._max_frame, max(FRAME_MIN_MAX, fields.need_int(Tag.MAX_FRAME)))
        self._agent_pid = fields.need_int(Tag.PID)
        for extra in frames[1:]:  # nothing is in flight yet; keep the order anyway
            await self._dispatch(extra)

    async def _dispatch(self, frame: Frame) -> None:
        send = self._waiters.get(frame.id)
        if send is None:
            return  # a late frame for a call that already gave up
        try:
            await send.send(frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._waiters.pop(frame.id, None)

    async def _reader(self) -> None:
        try:
            while True:
                data = await self._stream.receive_some(_RECV_BYTES)
                if not data:
                    self._fail(SandboxLost("the agent closed the connection (the container may be gone)"))
                    return
                for frame in self._decoder.feed(data):
                    await self._dispatch(frame)
        except AgentProtocolError as exc:
            self._fail(exc)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._fail(SandboxLost(f"the connection to the agent broke: {exc}"))

    def _register(self, capacity: int) -> tuple[int, trio.MemoryReceiveChannel[Frame]]:
        self._check()
        fid = next(self._ids)
        send, receive = trio.open_memory_channel[Frame](capacity)
        self._waiters[fid] = send
        return fid, receive

    def _unregister(self, fid: int) -> None:
        send = self._waiters.pop(fid, None)
        if send is not None:
            send.close()

    async def _receive(self, receive: trio.MemoryReceiveChannel[Frame]) -> Frame:
        try:
            return await receive.receive()
        except trio.EndOfChannel:
            raise self._lost() from None

    async def _request(self, ftype: int, payload: bytes, reply: FrameType, *, extra_s: float = 0.0) -> Frame:
        fid, receive = self._register(1)
        bound = self._margin_s + extra_s
        frame: Frame | None = None
        try:
            with trio.move_on_after(bound):
                await self._send(ftype, fid, payload)
                frame = await self._receive(receive)
        finally:
            self._unregister(fid)
        if frame is None:
            raise self._unresponsive(f"a {FrameType(ftype).name} request", bound)
        if frame.type == FrameType.ERROR:
            _raise_error(frame)
        if frame.type != reply:
            raise AgentProtocolError(f"expected frame {reply.name}, got {frame.type:#x}")
        return frame

    # ------------------------------------------------------------------ operations

    async def run(self, spec: RunSpec, sink: CaptureSink, *, argv: list[str] | None = None) -> RunResult:
        """Run one foreground command to its end and return how it ended.

        Output goes to ``sink`` (streams ``stdout``/``stderr``) as it arrives. The agent enforces
        ``spec.timeout_ms`` itself. If the caller is cancelled, the agent is told to kill the run and the call
        waits (shielded, bounded by grace + drain + a few seconds) for the agent's result, then re-raises.
        When no result arrives within deadline + grace + drain + ``host_margin_s`` the run returns with cause
        ``unresponsive`` (what reached ``sink`` is kept) and the client is broken for good (see the module).

        Args:
            spec: what to run; ``argv`` (argv[0] absolute) replaces ``bash -c spec.command``.
            sink: receives the output.

        Raises:
            AgentError: the agent could not start the command (bad cwd, fork failed at the pids limit...).
            SandboxLost: the connection died before the result arrived.
            SessionUnhealthy: an earlier call found the agent unresponsive.
            AgentProtocolError: the agent broke the protocol.
        """
        if argv is None:
            spec, argv = _long_script(spec)
        payload = encode_run_request(spec, argv=argv)
        counted = _CountingSink(sink)
        started = trio.current_time()
        bound = math.inf
        if spec.timeout_ms is not None:
            bound = (spec.timeout_ms + spec.grace_ms + spec.drain_ms) / 1000.0 + self._margin_s
        fid, receive = self._register(_CHANNEL_FRAMES)
        stdin_scope = trio.CancelScope()
        try:
            with trio.move_on_after(bound):
                await self._send(FrameType.RUN, fid, payload)
            if spec.stdin is not None:
                # Sent from the client's nursery, concurrently with reading output: a command that writes before
                # it reads must not deadlock against a host that is still writing its stdin.
                assert self._nursery is not None, "use open_agent_client()"
                self._nursery.start_soon(self._send_stdin, fid, spec.stdin, stdin_scope)
            try:
                with trio.move_on_after(max(0.0, started + bound - trio.current_time())):
                    return await self._collect(receive, counted)
            except trio.Cancelled:
                budget = (spec.grace_ms + spec.drain_ms) / 1000.0 + _CANCEL_SLACK_S
                answered = False
                with trio.CancelScope(shield=True), trio.move_on_after(budget):
                    await self._send(FrameType.CANCEL, fid)
                    await self._collect(receive, counted)
                    answered = True
                if not answered and self._broken is None:
                    self._unresponsive("a cancelled run's kill", budget)
                raise
            except Exception as exc:
                if isinstance(exc, AgentError | SandboxLost):
                    raise
                # The sink refused the output (a full disk): the command must not run on unobserved; the agent
                # kills its group. Its result is not awaited: it could only be fed to the same broken sink.
                # A connection already gone cannot carry it; the agent's own deadline still bounds the run then.
                with (
                    trio.CancelScope(shield=True),
                    trio.move_on_after(_CANCEL_SLACK_S),
                    contextlib.suppress(AgentError, SandboxLost),
                ):
                    await self._send(FrameType.CANCEL, fid)
                raise
        finally:
            stdin_scope.cancel()
            self._unregister(fid)
        self._unresponsive("a run", bound)
        return RunResult(
            cause="unresponsive",
            exit_code=None,
            signal=None,
            duration_ms=(trio.current_time() - started) * 1000.0,
            cpu_ms=0.0,
            max_rss_kb=0,
            stream_bytes=dict(counted.counts),
        )

    async def _send_stdin(self, fid: int, data: bytes | StdinFile, scope: trio.CancelScope) -> None:
        step = self._send_max - 64
        with scope:
            try:
                if isinstance(data, StdinFile):
                    await self._send_stdin_file(fid, data, step)
                else:
                    for pos in range(0, len(data), step):
                        await self._send(FrameType.STDIN, fid, data[pos : pos + step])
                await self._send(FrameType.STDIN, fid, b"")
            except (SandboxLost, AgentProtocolError):
                pass  # the reader reports the broken connection to the run itself

    async def _send_stdin_file(self, fid: int, source: StdinFile, step: int) -> None:
        """A host file's first ``source.size`` bytes, a frame at a time: never more than a frame in memory."""
        try:
            fd = os.open(source.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return  # stdin closes empty; the command sees EOF (the caller owns the file)
        try:
            pos = 0
            while pos < source.size:
                data = os.pread(fd, min(step, source.size - pos), pos)
                if not data:
                    break
                await self._send(FrameType.STDIN, fid, data)
                pos += len(data)
        finally:
            os.close(fd)

    async def _collect(self, receive: trio.MemoryReceiveChannel[Frame], sink: CaptureSink) -> RunResult:
        while True:
            frame = await self._receive(receive)
            if frame.type == FrameType.OUT:
                sink.feed("stdout", frame.payload)
            elif frame.type == FrameType.ERR:
                sink.feed("stderr", frame.payload)
            elif frame.type == FrameType.RESULT:
                return decode_result(Fields(frame.payload))
            elif frame.type == FrameType.ERROR:
                _raise_error(frame)
            elif frame.type == FrameType.STARTED:
                started = _STARTED.get()
                if started is not None:
                    started()
            else:
                raise AgentProtocolError(f"unexpected frame {frame.type:#x} during a run")

    async def start_task(self, spec: RunSpec, *, argv: list[str] | None = None) -> str:
        """Start a background task and return its id at once; no timeout applies.

        Its output is kept by the agent (a ring of ``--detached-buffer`` bytes per stream) and read with
        :meth:`read_task`; it survives this connection. ``spec.stdin`` travels inline and must fit one frame.
        """
        if argv is None:
            spec, argv = _long_script(spec)
        frame = await self._request(FrameType.START, encode_run_request(spec, argv=argv, detached=True), FrameType.TASK)
        return Fields(frame.payload).text(Tag.TASK)

    async def read_task(
        self, task_id: str, stream: Literal["stdout", "stderr"], offset: int, max_bytes: int | None = None
    ) -> TaskChunk:
        """Read a task's stream from whole-stream byte ``offset`` (at most ``max_bytes``, and one frame).

        Raises:
            TaskNotFound: the agent knows no such task.
        """
        fields = [(Tag.TASK, task_id), (Tag.STREAM, 1 if stream == "stdout" else 2), (Tag.OFFSET, max(0, offset))]
        if max_bytes is not None:
            fields.append((Tag.MAX, max(0, max_bytes)))
        frame = await self._request(FrameType.READ, encode_fields(fields), FrameType.CHUNK)
        return decode_chunk(frame.payload)

    async def stop_task(self, task_id: str) -> RunResult:
        """Kill a task's group (TERM, grace, KILL) and return how it ended (at once if it already had).

        Raises:
            TaskNotFound: the agent knows no such task.
        """
        frame = await self._request(
            FrameType.STOP, encode_fields([(Tag.TASK, task_id)]), FrameType.RESULT, extra_s=self._kill_grace_s
        )
        return decode_result(Fields(frame.payload))

    async def list_tasks(self) -> list[TaskInfo]:
        """Every task the agent remembers (bounded by one frame)."""
        frame = await self._request(FrameType.LIST, b"", FrameType.TASKS)
        return [decode_task_info(v) for v in Fields(frame.payload).all(Tag.TASK_REC)]

    async def sweep(self) -> list[ProcInfo]:
        """Kill every process the session started (everything descending from the agent); return them."""
        frame = await self._request(FrameType.SWEEP, b"", FrameType.PROCS, extra_s=self._kill_grace_s)
        return list(decode_procs(Fields(frame.payload), Tag.PROC))

    async def info(self) -> AgentInfo:
        """The agent's version, uid/gid, pid and whether it has bash."""
        frame = await self._request(FrameType.INFO, b"", FrameType.INFO_OK)
        return decode_info(frame.payload)

    async def ping(self, payload: bytes = b"") -> bytes:
        """Round trip one frame; returns the echoed payload."""
        frame = await self._request(FrameType.PING, payload, FrameType.PONG)
        return frame.payload


class _CountingSink:
    """Passes output on and counts it per stream (what an unresponsive run's result reports)."""

    def __init__(self, sink: CaptureSink) -> None:
        self._sink = sink
        self.counts: dict[str, int] = {}

    def feed(self, stream: str, data: bytes) -> None:
        self.counts[stream] = self.counts.get(stream, 0) + len(data)
        self._sink.feed(stream, data)


def _long_script(spec: RunSpec) -> tuple[RunSpec, list[str] | None]:
    """A command too long for one argument travels ahead of its stdin on the stdin pipe.

    Linux caps one argument (and one environment string) at 128 KiB (``MAX_ARG_STRLEN``), so ``bash -c CMD`` cannot
    start past it. Then the run is ``bash -c -- 'eval -- "$(head -c N)"'`` with stdin = the N script bytes followed
    by the caller's stdin: ``head -c N`` reads exactly N bytes (GNU head never reads past its count), so the
    command's own stdin starts where the caller's bytes do (at EOF when the caller gave none). ``$0``, positional
    parameters and the exit status behave as under ``bash -c``.
    """
    script = spec.command.encode("utf-8", "surrogateescape")
    if len(script) <= _ARG_SAFE_BYTES:
        return spec, None
    loader = f'eval -- "$(head -c {len(script)})"'
    if isinstance(spec.stdin, StdinFile):
        raise AgentError("a command this long cannot take its stdin from a file; shorten the command")
    stdin = script + (spec.stdin or b"")
    return spec.model_copy(update={"stdin": stdin}), ["/bin/bash", "-c", "--", loader]


def _raise_error(frame: Frame) -> None:
    fields = Fields(frame.payload)
    code = fields.text(Tag.CODE)
    message = fields.text(Tag.MSG)
    if code == "no_task":
        raise TaskNotFound(f"{message}; list_tasks() shows the ones the agent knows")
    if code == "spawn_failed":
        raise SpawnFailed(f"the agent refused the request ({code}): {message}")
    raise AgentError(f"the agent refused the request ({code}): {message}")


@asynccontextmanager
async def open_agent_client(
    stream: trio.abc.Stream,
    *,
    max_frame: int = 1024 * 1024,
    handshake_timeout_s: float = 10.0,
    host_margin_s: float = 10.0,
    kill_grace_ms: int = 3_000,
    on_unhealthy: Callable[[str], None] | None = None,
) -> AsyncIterator[AgentClient]:
    """Handshake over ``stream`` and yield a client; the stream is closed when the block exits.

    ``host_margin_s`` is the host's own bound beyond the agent's (``agent.host_margin_s``), ``kill_grace_ms`` what
    a task stop or a sweep may add to it (``bash.grace_ms``), and ``on_unhealthy(reason)`` is called once when
    the agent is found unresponsive (see the module docstring).

    Raises:
        AgentProtocolError: a version mismatch or a peer that is not an agent.
        SandboxLost: the agent closed the stream during the handshake.
        AgentError: no answer to the handshake within ``handshake_timeout_s``.
    """
    if not FRAME_MIN_MAX <= max_frame <= FRAME_MAX_MAX:
        raise ValueError(f"max_frame must be in [{FRAME_MIN_MAX}, {FRAME_MAX_MAX}], got {max_frame}")
    client = AgentClient(
        stream,
        max_frame=max_frame,
        host_margin_s=host_margin_s,
        kill_grace_ms=kill_grace_ms,
        on_unhealthy=on_unhealthy,
    )
    try:
        try:
            with trio.fail_after(handshake_timeout_s):
                await client._handshake()
        except trio.TooSlowError:
            raise AgentError(
                f"the agent did not answer the handshake within {handshake_timeout_s}s; is it running?"
            ) from None
        async with trio.open_nursery() as nursery:
            client._nursery = nursery
            nursery.start_soon(client._reader)
            try:
                yield client
            finally:
                nursery.cancel_scope.cancel()
    finally:
        client._fail(SandboxLost("the agent client is closed"))
        with trio.CancelScope(shield=True), trio.move_on_after(1):
            await stream.aclose()


@asynccontextmanager
async def open_agent_unix(
    path: str, *, max_frame: int = 1024 * 1024, timeout_s: float = 10.0
) -> AsyncIterator[AgentClient]:
    """Connect to an agent's unix socket and handshake, each within ``timeout_s``; see :func:`open_agent_client`.

    Raises:
        AgentError: nothing listens at ``path`` (or it does not answer in time).
    """
    try:
        with trio.fail_after(timeout_s):
            stream = await trio.open_unix_socket(path)
    except (OSError, trio.TooSlowError) as exc:
        raise AgentError(f"cannot connect to the agent at {path}: {exc}; is the session running?") from exc
    async with open_agent_client(stream, max_frame=max_frame, handshake_timeout_s=timeout_s) as client:
        yield client
