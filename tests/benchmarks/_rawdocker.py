"""A small blocking Engine API client over the unix socket: the raw ``docker exec`` floor the benchmark compares to.

Deliberately minimal, like the baseline's raw variant (``/work/shared/research/baseline.md`` §1): HTTP/1.1 written
by hand on an ``AF_UNIX`` socket, ``exec create`` and ``exec inspect`` on a kept-alive connection, ``exec start`` on
its own connection, upgraded (hijacked) and read to EOF. No docker-py on the timing path. One :class:`RawDocker`
per thread (it owns one kept-alive connection).
"""

from __future__ import annotations

import json
import os
import socket
import struct
import time
from collections.abc import Callable
from typing import Any, BinaryIO, Final

__all__ = ["ExecTiming", "RawDocker", "socket_path"]

_API: Final = "/v1.41"
_RECV: Final = 256 * 1024


def socket_path(base_url: str) -> str:
    """The unix socket path of a ``unix://`` engine URL.

    Raises:
        ValueError: the engine is not reached through a local unix socket.
    """
    if not base_url.startswith("unix://"):
        raise ValueError(f"the raw baseline needs a local unix:// engine, got {base_url!r}")
    return base_url[len("unix://") :]


class ExecTiming:
    """Where one raw exec's time went (seconds, ``perf_counter`` deltas)."""

    __slots__ = ("create", "eof", "exit_code", "inspect", "nbytes", "start", "total")

    def __init__(self) -> None:
        self.create = 0.0
        self.start = 0.0
        self.eof = 0.0
        self.inspect = 0.0
        self.total = 0.0
        self.nbytes = 0
        self.exit_code: int | None = None


class RawDocker:
    """Blocking raw Engine API calls for one thread."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._conn: socket.socket | None = None
        self._buf = b""

    def close(self) -> None:
        """Close the kept-alive connection."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- plain requests on a kept-alive connection ---------------------------------------------------------------

    def _connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(self._path)
        return sock

    def _request(self, method: str, url: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        data = b"" if body is None else json.dumps(body).encode()
        head = f"{method} {_API}{url} HTTP/1.1\r\nHost: docker\r\nContent-Length: {len(data)}\r\n"
        if body is not None:
            head += "Content-Type: application/json\r\n"
        request = head.encode() + b"\r\n" + data
        for attempt in (0, 1):
            if self._conn is None:
                self._conn = self._connect()
                self._buf = b""
            try:
                self._conn.sendall(request)
                return self._read_response()
            except (ConnectionError, _Closed):
                # The daemon may close an idle keep-alive connection; reconnect once.
                self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def _fill(self) -> None:
        assert self._conn is not None
        chunk = self._conn.recv(_RECV)
        if not chunk:
            raise _Closed
        self._buf += chunk

    def _read_response(self) -> tuple[int, Any]:
        while b"\r\n\r\n" not in self._buf:
            self._fill()
        head, _, self._buf = self._buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                while b"\r\n" not in self._buf:
                    self._fill()
                size_line, _, self._buf = self._buf.partition(b"\r\n")
                size = int(size_line.split(b";")[0], 16)
                while len(self._buf) < size + 2:
                    self._fill()
                body += self._buf[:size]
                self._buf = self._buf[size + 2 :]
                if size == 0:
                    break
        else:
            length = int(headers.get("content-length", "0"))
            while len(self._buf) < length:
                self._fill()
            body, self._buf = self._buf[:length], self._buf[length:]
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, (json.loads(body) if body.strip() else None)

    def _ok(self, method: str, url: str, body: dict[str, Any] | None = None) -> Any:
        status, answer = self._request(method, url, body)
        if status >= 300:
            raise RuntimeError(f"{method} {url}: HTTP {status}: {answer}")
        return answer

    # -- exec ----------------------------------------------------------------------------------------------------

    def exec_create(self, container: str, argv: list[str], *, user: str | None = None) -> str:
        """Create an exec (stdout and stderr attached, no stdin, no tty); its id."""
        body: dict[str, Any] = {"AttachStdout": True, "AttachStderr": True, "Tty": False, "Cmd": argv}
        if user is not None:
            body["User"] = user
        answer = self._ok("POST", f"/containers/{container}/exec", body)
        return str(answer["Id"])

    def exec_start_socket(self, exec_id: str) -> tuple[socket.socket, bytes]:
        """Start an exec on a fresh connection and return the upgraded socket plus bytes already read past the
        ``101`` head (the start of the multiplexed stream)."""
        sock = self._connect()
        data = b'{"Detach":false,"Tty":false}'
        sock.sendall(
            (
                f"POST {_API}/exec/{exec_id}/start HTTP/1.1\r\nHost: docker\r\nContent-Type: application/json\r\n"
                f"Connection: Upgrade\r\nUpgrade: tcp\r\nContent-Length: {len(data)}\r\n\r\n"
            ).encode()
            + data
        )
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(_RECV)
            if not chunk:
                sock.close()
                raise RuntimeError(f"exec start {exec_id}: connection closed before the answer")
            buf += chunk
        head, _, rest = buf.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        if status not in (101, 200):
            sock.close()
            raise RuntimeError(f"exec start {exec_id}: HTTP {status}: {head[:200]!r}")
        return sock, rest

    def exec_inspect(self, exec_id: str) -> dict[str, Any]:
        """The exec's inspect document."""
        answer: dict[str, Any] = self._ok("GET", f"/exec/{exec_id}/json")
        return answer

    def run(
        self,
        container: str,
        command: str,
        *,
        out: BinaryIO | None = None,
        on_start: Callable[[socket.socket], None] | None = None,
    ) -> ExecTiming:
        """One whole exec of ``bash -c command``: create, start, read the stream to EOF, inspect.

        Output payload bytes are counted, and written to ``out`` when given (demultiplexed in place: only the
        8-byte frame headers are skipped). ``on_start`` gets the upgraded socket before reading starts.
        """
        t = ExecTiming()
        began = time.perf_counter()
        exec_id = self.exec_create(container, ["bash", "-c", command])
        t.create = time.perf_counter() - began
        sock, rest = self.exec_start_socket(exec_id)
        t.start = time.perf_counter() - began
        if on_start is not None:
            on_start(sock)
        try:
            t.nbytes = _drain(sock, rest, out)
        finally:
            sock.close()
        t.eof = time.perf_counter() - began
        inspected = self.exec_inspect(exec_id)
        t.exit_code = inspected.get("ExitCode")
        t.total = t.inspect = time.perf_counter() - began
        return t


class _Closed(Exception):
    """The kept-alive connection was closed by the daemon."""


def _drain(sock: socket.socket, rest: bytes, out: BinaryIO | None) -> int:
    """Read a multiplexed exec stream to EOF; return the payload bytes (written to ``out`` if given)."""
    buf = bytearray(_RECV)
    view = memoryview(buf)
    pending = bytearray(rest)
    payload = 0
    remaining = 0  # payload bytes left in the current frame
    fd = None if out is None else out.fileno()
    while True:
        # Consume what is pending: frame headers are skipped, payload is counted and written.
        pos = 0
        while pos < len(pending):
            if remaining == 0:
                if len(pending) - pos < 8:
                    break
                (remaining,) = struct.unpack_from(">I", pending, pos + 4)
                pos += 8
                continue
            take = min(remaining, len(pending) - pos)
            if fd is not None:
                _write_all(fd, memoryview(pending)[pos : pos + take])
            payload += take
            remaining -= take
            pos += take
        del pending[:pos]
        n = sock.recv_into(view)
        if n == 0:
            return payload
        if not pending and remaining >= n:
            # The common case in bulk output: the whole read is payload of the current frame.
            if fd is not None:
                _write_all(fd, view[:n])
            payload += n
            remaining -= n
            continue
        pending += view[:n]


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        data = data[os.write(fd, data) :]
