"""A byte stream to the agent through an exec bridge, spoken in pure trio (research/feasibility.md section 2, b2).

``POST /exec/{id}/start`` with ``Upgrade: tcp`` hijacks the HTTP connection; after the response header the engine
sends the exec's output in frames (8-byte header: stream 1 stdout / 2 stderr, 3 zero bytes, big-endian length) and
passes our raw writes to its stdin. Nothing is read through a thread, so no byte after the header is lost.

The engine does not always end the hijacked stream when the container dies: under gVisor (runsc), when the host's
OOM killer takes the sandbox, the exec is reported dead but its stream stays open. So a bridge may also hold a
``POST /containers/{id}/wait`` on a second engine connection (the engine answers it when the container stops);
whenever the bridge has nothing to read it waits on both, and a stopped container ends the stream.
"""

from __future__ import annotations

import json
import select
import struct
from urllib.parse import urlsplit

import trio

from executor.errors import AgentError, EngineUnavailable, SandboxLost
from executor.sandbox.docker._errors import engine_unavailable

__all__ = ["ExecBridgeStream", "open_exec_stream"]

_HEADER_LIMIT = 64 * 1024
_STDERR_KEPT = 4096


async def _open_engine_stream(base_url: str) -> trio.SocketStream:
    parts = urlsplit(base_url)
    try:
        if parts.scheme == "unix":
            return await trio.open_unix_socket(parts.path)
        if parts.scheme in ("tcp", "http"):
            return await trio.open_tcp_stream(parts.hostname or "localhost", parts.port or 2375)
    except OSError as exc:
        raise engine_unavailable(base_url, f"exec bridge: {exc}") from exc
    raise EngineUnavailable(f"the exec bridge speaks unix:// and tcp:// engines only, not {base_url!r}")


class ExecBridgeStream(trio.abc.HalfCloseableStream):
    """The agent's byte stream carried by a hijacked exec: stdout frames in, raw stdin out.

    What the bridge writes on stderr is kept (the last few KiB) for error messages, never passed on.
    """

    def __init__(
        self,
        transport: trio.SocketStream,
        leftover: bytes,
        *,
        exec_id: str,
        watch: trio.SocketStream | None = None,
    ) -> None:
        self._transport = transport
        self._watch = watch
        self._buffer = bytearray(leftover)
        self._payload_left = 0
        self._payload_stream = 0
        self._eof = False
        self.exec_id = exec_id
        """The engine's exec id of the bridge process."""
        self.stderr = bytearray()
        """The bridge's recent stderr (bounded)."""

    async def _fill(self) -> bool:
        if self._watch is None or _readable(self._transport):
            data = await self._transport.receive_some(65536)
        else:
            data = await self._receive_unless_stopped(self._watch)
        if not data:
            self._eof = True
            return False
        self._buffer += data
        return True

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """Next stdout bytes of the bridge (the agent's output); ``b""`` at the end of the stream."""
        chunk = await self._receive(max_bytes or 65536)
        if not chunk:
            # Every receive is a checkpoint, also at a remembered end of stream: a caller looping on b"" must
            # stay cancellable.
            await trio.lowlevel.checkpoint()
        return chunk

    async def _receive(self, limit: int) -> bytes:
        while True:
            if self._payload_left == 0:
                while len(self._buffer) < 8:
                    if self._eof or not await self._fill():
                        return b""
                kind, length = struct.unpack(">BxxxL", bytes(self._buffer[:8]))
                del self._buffer[:8]
                self._payload_stream, self._payload_left = kind, length
                continue
            if not self._buffer and (self._eof or not await self._fill()):
                return b""
            take = min(self._payload_left, len(self._buffer), limit)
            chunk = bytes(self._buffer[:take])
            del self._buffer[:take]
            self._payload_left -= take
            if self._payload_stream == 2:
                self.stderr += chunk
                del self.stderr[:-_STDERR_KEPT]
                continue
            if chunk:
                return chunk

    async def _receive_unless_stopped(self, watch: trio.SocketStream) -> bytes:
        # Only reached when nothing is buffered, so the nursery's cost is paid while idle, not per chunk.
        received: list[bytes] = []
        async with trio.open_nursery() as nursery:

            async def data() -> None:
                received.append(await self._transport.receive_some(65536))
                nursery.cancel_scope.cancel()

            async def stopped() -> None:
                # Any byte (or the end) on the wait connection: the container stopped or is gone. A cancelled
                # receive on a trio socket consumes nothing, so the data side loses no byte either way.
                await watch.receive_some(1)
                nursery.cancel_scope.cancel()

            nursery.start_soon(data)
            nursery.start_soon(stopped)
        return received[0] if received else b""

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Write raw bytes to the bridge's stdin (the agent's input)."""
        await self._transport.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        """See :meth:`trio.abc.SendStream.wait_send_all_might_not_block`."""
        await self._transport.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        """Close the bridge's stdin; the agent sees the end of its input."""
        await self._transport.send_eof()

    async def aclose(self) -> None:
        """Close the hijacked connection (the bridge then ends on its own) and the container watch."""
        try:
            await self._transport.aclose()
        finally:
            if self._watch is not None:
                await self._watch.aclose()


def _readable(stream: trio.SocketStream) -> bool:
    # A zero-timeout poll: data (or the end) is waiting, so a plain receive returns at once.
    readable, _, _ = select.select([stream.socket.fileno()], [], [], 0)
    return bool(readable)


async def _open_watch(base_url: str, api_version: str, container: str) -> trio.SocketStream:
    """A connection on which the engine sends the body once ``container`` is no longer running.

    The engine answers the header at once (so the wait is registered before this returns) and the body when the
    container stops; any byte after the header, or the end, means "stopped".

    Raises:
        SandboxLost: the container is gone or already stopped.
    """
    watch = await _open_engine_stream(base_url)
    try:
        await watch.send_all(
            f"POST /v{api_version}/containers/{container}/wait?condition=not-running HTTP/1.1\r\n"
            "Host: docker\r\nContent-Length: 0\r\n\r\n".encode()
        )
        received = bytearray()
        while b"\r\n\r\n" not in received:
            data = await watch.receive_some(_HEADER_LIMIT)
            if not data or len(received) > _HEADER_LIMIT:
                raise SandboxLost(f"the engine gave no usable answer to a wait on {container}")
            received += data
        header, _, body = bytes(received).partition(b"\r\n\r\n")
        status_line = header.split(b"\r\n", 1)[0].decode(errors="replace")
        if status_line.split(" ")[1:2] != ["200"] or body:
            raise SandboxLost(f"{container} is gone or not running ({status_line})")
        return watch
    except BaseException:
        with trio.CancelScope(shield=True):
            await watch.aclose()
        raise


async def open_exec_stream(
    base_url: str, api_version: str, exec_id: str, *, container: str | None = None
) -> ExecBridgeStream:
    """Start exec ``exec_id`` (created with stdin, stdout and stderr attached, no tty) and hijack its streams.

    Args:
        base_url: the engine address (``unix://`` or ``tcp://``).
        api_version: the negotiated Engine API version.
        exec_id: the created exec.
        container: watch this container too: the stream ends when it stops, even if the engine keeps the
            hijacked connection open.

    Raises:
        EngineUnavailable: the engine socket does not answer.
        SandboxLost: the exec's container is gone.
        AgentError: the engine refused to start the exec.
    """
    watch = None if container is None else await _open_watch(base_url, api_version, container)
    try:
        transport = await _open_engine_stream(base_url)
    except BaseException:
        if watch is not None:
            with trio.CancelScope(shield=True):
                await watch.aclose()
        raise
    try:
        body = json.dumps({"Detach": False, "Tty": False}).encode()
        request = (
            f"POST /v{api_version}/exec/{exec_id}/start HTTP/1.1\r\n"
            "Host: docker\r\n"
            "Content-Type: application/json\r\n"
            "Connection: Upgrade\r\n"
            "Upgrade: tcp\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        await transport.send_all(request)
        received = bytearray()
        while b"\r\n\r\n" not in received:
            if len(received) > _HEADER_LIMIT:
                raise AgentError("the engine's answer to an exec start has an oversized header")
            data = await transport.receive_some(65536)
            if not data:
                raise SandboxLost(f"the engine closed the exec {exec_id[:12]} before answering")
            received += data
        header, _, leftover = bytes(received).partition(b"\r\n\r\n")
        status_line = header.split(b"\r\n", 1)[0].decode(errors="replace")
        fields = status_line.split(" ", 2)
        status = int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else 0
        if status not in (101, 200):
            if status in (404, 409):
                raise SandboxLost(f"exec {exec_id[:12]} could not start: {status_line}; the container is gone")
            raise AgentError(f"exec {exec_id[:12]} could not start: {status_line}")
        return ExecBridgeStream(transport, leftover, exec_id=exec_id, watch=watch)
    except BaseException:
        with trio.CancelScope(shield=True):
            await transport.aclose()
            if watch is not None:
                await watch.aclose()
        raise
