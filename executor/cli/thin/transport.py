"""Where the service is and how to talk to it: stdlib HTTP/1.1 over a unix socket or TCP (no httpx, no pydantic).

Where (:func:`find_service`), in order:

1. ``EXECUTOR_URL`` (``http://host:port`` or ``unix:///path``; ``EXECUTOR_TOKEN`` is sent as the bearer token): the
   service must answer, else the command fails (exit 125) naming it;
2. the default socket, as the settings would place it: ``EXECUTOR_SERVICE__SOCKET``, else ``service.socket`` of the
   settings file (``--config`` or ``EXECUTOR_CONFIG``), else ``service.sock`` under the home (``EXECUTOR_HOME``, else
   the file's ``home``, else the platform's user state folder, computed as ``platformdirs`` does). A socket that is
   missing or refuses connections (a killed service's leftover) means "no service": the CLI runs in-process.

Anything this module cannot read for sure (a settings file that is not plain TOML, a relative socket path in it)
also means "no service here": the in-process path then reads the settings properly and reports what is wrong.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import select
import socket
import stat
import sys
from collections.abc import Iterable, Mapping
from typing import Any, Final

from executor.nesting import DEFAULT_MAX_DEPTH, loads_json
from executor.ownership import peer_refusal, socket_refusal

__all__ = [
    "Connection",
    "NotYours",
    "Response",
    "ServiceError",
    "Target",
    "Unreachable",
    "decode_bytes",
    "default_home",
    "find_service",
    "open_connection",
    "segment",
]

_CONNECT_TIMEOUT_S: Final = 10.0
_USAGE_STATUSES: Final = frozenset({400, 401, 403, 404, 405, 409, 413, 422})
_MAX_HEAD_BYTES: Final = 64 * 1024
_SEND_SLICE_BYTES: Final = 1 << 20
"""At most this much is handed to the socket at a time while watching for an early answer."""
_TOML_MAX_BYTES: Final = 1024 * 1024
"""At most this much of a settings file is read (``executor.config.TOML_MAX_BYTES``; a test checks they agree)."""
_SAFE: Final = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~")


class NotText(Exception):
    """An argument on its way to the service holds bytes that are not UTF-8 (lone surrogates): bad input, exit 2."""

    def __init__(self, what: str) -> None:
        super().__init__(
            f"{what} is not valid UTF-8 (an undecodable byte); pass text, and put binary data in a file or on stdin"
        )


class Unreachable(Exception):
    """Nothing answers at the target, or the connection broke."""


class NotYours(Unreachable):
    """The socket may be another user's (executor/ownership.py): nothing was sent; bad input, exit 2. An
    :class:`Unreachable`, so a connection made again mid-command stops as for a service gone away."""


class ServiceError(Exception):
    """The service answered with an error (``{"error": {"type", "message"}}``)."""

    def __init__(self, status: int, type_: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.type = type_

    @property
    def code(self) -> int:
        """This process's exit status for it: 130 when the session was stopped under the call (as a command
        cancelled so), 2 for the caller's input, 125 for the service failing."""
        if self.type == "SessionStopped":
            return 130
        return 2 if self.status in _USAGE_STATUSES else 125


_URL_SAFE: Final = bytes.maketrans(b"-_", b"+/")


def decode_bytes(value: object, what: str) -> bytes:
    """Bytes the service sent as base64 (``executor.models.Base64Bytes``: the standard alphabet; an older service
    sent the URL-safe one, taken too). Anything else is the service failing, never silently wrong bytes.

    Raises:
        ServiceError: ``value`` is not base64.
    """
    if not value:
        return b""
    try:
        return base64.b64decode(str(value).encode("ascii").translate(_URL_SAFE), validate=True)
    except (UnicodeEncodeError, binascii.Error):
        raise ServiceError(502, "ExecutorError", f"the service sent {what} that is not base64") from None


class Target:
    """A service address."""

    def __init__(
        self,
        label: str,
        *,
        unix_path: str | None = None,
        host: str = "",
        port: int = 0,
        token: str | None = None,
        explicit: bool = False,
    ) -> None:
        self.label = label
        """How messages name it (``EXECUTOR_URL=...`` or the socket's path)."""
        self.unix_path = unix_path
        self.host = host
        self.port = port
        self.token = token
        self.explicit = explicit
        """Named by ``EXECUTOR_URL``: it must answer (no in-process fallback)."""


def default_home(environ: Mapping[str, str]) -> str | None:
    """The platform's default home, exactly as ``platformdirs.user_state_dir("executor")`` computes it (which
    ``executor.config`` uses); None where there is no such folder we can compute (Windows: no unix socket)."""
    if os.name != "posix":
        return None
    xdg = environ.get("XDG_STATE_HOME", "")
    if xdg.startswith("/"):
        return os.path.join(xdg, "executor")
    home = environ.get("HOME")
    if home is None or not home.startswith("/"):
        # platformdirs, like os.path.expanduser, then asks the password database (a relative HOME counts as unset).
        try:
            import pwd

            home = pwd.getpwuid(os.getuid()).pw_dir
        except (ImportError, KeyError):
            return None
        if not home.startswith("/"):
            return None
    base = "Library/Application Support" if sys.platform == "darwin" else ".local/state"
    return (home.rstrip("/") or "") + "/" + base + "/executor"


def _settings_file(config: str | None, environ: Mapping[str, str]) -> dict[str, Any] | None:
    """The settings file's table, {} without one, None when it cannot be read for sure (a device, a FIFO, a huge
    or malformed file: the in-process path then says what is wrong, as ``executor.config.read_toml`` does)."""
    path = config if config is not None else environ.get("EXECUTOR_CONFIG") or None
    if path is None:
        return {}
    try:
        # Non-blocking: opening a FIFO must not wait for a writer; anything but a regular file is not read at all.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        parts: list[bytes] = []
        left = _TOML_MAX_BYTES + 1
        while left > 0 and (part := os.read(fd, left)):
            parts.append(part)
            left -= len(part)
        raw = b"".join(parts)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(raw) > _TOML_MAX_BYTES:
        return None
    try:
        import tomllib

        from executor.nesting import check_toml_depth

        check_toml_depth(raw)  # NestingTooDeep is a ValueError: the in-process path says what is wrong
        return tomllib.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        return None


def _socket_from_settings(config: str | None, environ: Mapping[str, str]) -> str | None:
    explicit = environ.get("EXECUTOR_SERVICE__SOCKET")
    if explicit:
        return explicit
    data = _settings_file(config, environ)
    if data is None:
        return None
    service = data.get("service")
    if isinstance(service, dict) and isinstance(service.get("socket"), str):
        return str(service["socket"])
    home_text = environ.get("EXECUTOR_HOME") or (data.get("home") if isinstance(data.get("home"), str) else None)
    home = home_text or default_home(environ)
    return None if home is None else os.path.join(home, "service.sock")


def find_service(config: str | None, environ: Mapping[str, str]) -> Target | None:
    """The service to use, or None for "run in-process" (see the module docstring).

    Raises:
        Unreachable: ``EXECUTOR_URL`` is malformed (it names a service, so there is no fallback).
    """
    token = environ.get("EXECUTOR_TOKEN") or None
    url = environ.get("EXECUTOR_URL")
    if url:
        label = f"EXECUTOR_URL={url}"
        if url.startswith("unix://") and url[len("unix://") :].startswith("/"):
            return Target(label, unix_path=url[len("unix://") :], token=token, explicit=True)
        if url.startswith("http://"):
            hostport = url[len("http://") :].split("/", 1)[0]
            if hostport.startswith("["):
                host, _, port_text = hostport[1:].partition("]")
                port_text = port_text.removeprefix(":") or "80"
            else:
                host, _, port_text = hostport.partition(":")
                port_text = port_text or "80"
            if host and port_text.isdigit() and 0 < int(port_text) < 65536:
                return Target(label, host=host, port=int(port_text), token=token, explicit=True)
        raise Unreachable(f"{label} is not http://HOST:PORT or unix:///PATH")
    path = _socket_from_settings(config, environ)
    if path is None or not path.startswith("/"):
        return None
    return Target(path, unix_path=path, token=token)


def segment(value: str) -> str:
    """One path segment of the API, percent-encoded (a name with ``/`` can never reach another route).

    Raises:
        NotText: ``value`` is not UTF-8 text.
    """
    try:
        data = value.encode()
    except UnicodeEncodeError:
        raise NotText(repr(value)) from None
    return "".join(chr(b) if b in _SAFE else f"%{b:02X}" for b in data)


def _not_text(value: Any, where: str = "") -> str:
    """The first text in ``value`` that is not UTF-8, with where in the request it is ("" when none is)."""
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            return f"{where} {value!r}".strip()
        return ""
    items = value.items() if isinstance(value, Mapping) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _not_text(item, f"{where}.{key}" if where else str(key))
        if found:
            return found
    return ""


def _query(query: Mapping[str, Any]) -> str:
    parts = []
    for key, value in query.items():
        if value is None:
            continue
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        parts.append(f"{segment(key)}={segment(text)}")
    return "&".join(parts)


class Response:
    """One response: status, headers, and its body read as a stream (``Content-Length`` or chunked)."""

    def __init__(self, status: int, headers: dict[str, str], reader: Any, *, target: Target) -> None:
        self.status = status
        self.headers = headers
        self._reader = reader
        self._target = target
        self._chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = headers.get("content-length")
        self._left: int | None = int(length) if length is not None and length.isdigit() else None
        self._chunk_left = 0
        self.done = self._left == 0
        self.reusable = headers.get("connection", "").lower() != "close" and (self._chunked or self._left is not None)

    def _broken(self, exc: BaseException | None = None) -> Unreachable:
        detail = f" ({exc})" if exc is not None else ""
        return Unreachable(f"the executor service at {self._target.label} went away{detail}")

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes of the body (all of it for -1); fewer only at its end.

        Raises:
            Unreachable: the connection broke mid-body.
        """
        parts: list[bytes] = []
        want = size
        try:
            while not self.done and (want < 0 or want > 0):
                data = self._read_some(want)
                if not data:
                    break
                parts.append(data)
                if want > 0:
                    want -= len(data)
        except OSError as exc:
            raise self._broken(exc) from exc
        return b"".join(parts)

    def read_some(self, size: int) -> bytes:
        """Up to ``size`` bytes of the body, returning as soon as some arrive (at most one chunk of a chunked body):
        for a stream read as it comes; b"" at its end.

        Raises:
            Unreachable: the connection broke mid-body.
        """
        try:
            while not self.done:
                data = self._read_some(size)
                if data:
                    return data
        except OSError as exc:
            raise self._broken(exc) from exc
        return b""

    def _read_some(self, want: int) -> bytes:
        if self._chunked:
            if self._chunk_left == 0:
                line = self._reader.readline(1024)
                if not line.endswith(b"\n"):
                    raise self._broken()
                size_text = line.split(b";", 1)[0].strip()
                try:
                    self._chunk_left = int(size_text, 16)
                except ValueError:
                    raise self._broken() from None
                if self._chunk_left == 0:
                    while self._reader.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    self.done = True
                    return b""
            take = self._chunk_left if want < 0 else min(want, self._chunk_left)
            data = self._reader.read(take)
            if len(data) != take:
                raise self._broken()
            self._chunk_left -= take
            if self._chunk_left == 0:
                self._reader.readline(8)  # the CRLF after a chunk
            return bytes(data)
        if self._left is not None:
            take = self._left if want < 0 else min(want, self._left)
            data = self._reader.read(take)
            if len(data) != take:
                raise self._broken()
            self._left -= take
            self.done = self._left == 0
            return bytes(data)
        data = self._reader.read(None if want < 0 else want)
        if not data:
            self.done = True
        return bytes(data or b"")

    def getheader(self, name: str) -> str | None:
        """A response header (lower-case name)."""
        return self.headers.get(name.lower())


class Connection:
    """One keep-alive HTTP/1.1 connection to the service (connected again when a response left it unusable)."""

    def __init__(self, target: Target, timeout: float | None) -> None:
        self.target = target
        self._timeout = timeout
        self._sock: socket.socket | None = None
        self._reader: Any = None
        self._last: Response | None = None

    def connect(self) -> None:
        """Connect (bounded by the connect timeout).

        Raises:
            NotYours: the unix socket, or a folder holding it, may be another user's; nothing was sent.
            Unreachable: nothing listens there (refused, missing, timed out).
        """
        self.close()
        target = self.target
        try:
            if target.unix_path is not None:
                # Before anything is sent: the socket must be this user's own (a request carries the command).
                refused = socket_refusal(target.unix_path)
                if refused is not None:
                    raise NotYours(refused)
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    sock.settimeout(_CONNECT_TIMEOUT_S)
                    sock.connect(target.unix_path)
                    refused = peer_refusal(sock, target.label)
                    if refused is not None:
                        raise NotYours(refused)
                except BaseException:
                    sock.close()
                    raise
            else:
                sock = socket.create_connection((target.host, target.port), _CONNECT_TIMEOUT_S)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as exc:
            raise Unreachable(f"no executor service answers at {target.label} ({exc.strerror or exc})") from exc
        sock.settimeout(self._timeout)
        self._sock = sock
        self._reader = sock.makefile("rb")

    def _dropped(self) -> bool:
        """Whether the service closed this idle connection meanwhile (its keep-alive timeout, while this client was
        busy, say reading a large stdin): an idle connection with anything to read is closed or broken, and a
        request sent on it would find no answer."""
        if self._sock is None:
            return False
        readable, _, _ = select.select([self._sock], [], [], 0)
        return bool(readable)

    def close(self) -> None:
        """Close it (a later request connects again)."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._last = None

    def send(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        query: Mapping[str, Any] | None = None,
        accept: str = "application/json",
    ) -> Response:
        """Send a request and return the response with its body unread (a stream).

        Raises:
            ServiceError: an error status (its body read and parsed).
            Unreachable: the connection broke.
        """
        # Encoded before the connection is looked at: a large body takes a while, and an idle connection may be
        # closed by the service meanwhile.
        # Not ASCII-escaped: text holding lone surrogates (undecodable bytes of an argument) fails here, as bad input,
        # instead of reaching the service as JSON escapes it refuses in its own words.
        try:
            payload = b"" if body is None else json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        except UnicodeEncodeError:
            raise NotText(_not_text(body)) from None
        if (self._last is not None and not (self._last.done and self._last.reusable)) or self._dropped():
            self.close()
        if self._sock is None:
            self.connect()
        assert self._sock is not None
        if query:
            path += "?" + _query(query)
        head = [
            f"{method} {path} HTTP/1.1",
            "host: executor",
            f"accept: {accept}",
            f"content-length: {len(payload)}",
            "x-executor-hints: cli",  # recovery hints written as executor command lines
        ]
        if payload:
            head.append("content-type: application/json")
        if self.target.token:
            head.append(f"authorization: Bearer {self.target.token}")
        sent = True
        try:
            try:
                sent = self._send_unless_answered(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload)
            except OSError:
                sent = False  # the service stopped reading (a refusal of a large body): its answer says why
            response = self._response()
        except OSError as exc:
            self.close()
            raise Unreachable(f"the executor service at {self.target.label} went away ({exc})") from exc
        response.reusable = response.reusable and sent
        self._last = response
        if response.status >= 400:
            raw = response.read()
            try:
                error = json.loads(raw)["error"]
                message, type_ = str(error["message"]), str(error["type"])
            except (ValueError, KeyError, TypeError):
                message, type_ = f"the service answered {response.status}: {raw[:200]!r}", "ExecutorError"
            raise ServiceError(response.status, type_, message)
        return response

    def exchange(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        accept: str = "application/json",
        body: Iterable[bytes] | None = None,
        content_type: str = "application/octet-stream",
    ) -> Response:
        """Send a request whose body (if any) is streamed chunked from ``body``, and return the response with its
        status unchecked and its body unread (a stream): for files, where an error status carries a result.

        Raises:
            Unreachable: the connection broke before a response came.
        """
        if (self._last is not None and not (self._last.done and self._last.reusable)) or self._dropped():
            self.close()
        if self._sock is None:
            self.connect()
        assert self._sock is not None
        if query:
            path += "?" + _query(query)
        head = [f"{method} {path} HTTP/1.1", "host: executor", f"accept: {accept}"]
        if body is None:
            head.append("content-length: 0")
        else:
            head += ["transfer-encoding: chunked", f"content-type: {content_type}"]
        if self.target.token:
            head.append(f"authorization: Bearer {self.target.token}")
        sent = True
        try:
            self._sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
            if body is not None:
                try:
                    for chunk in body:
                        if chunk and not self._send_unless_answered(b"%x\r\n" % len(chunk) + chunk + b"\r\n"):
                            sent = False  # answered before the body was taken (a refusal): the answer says why
                            break
                    else:
                        self._sock.sendall(b"0\r\n\r\n")
                except OSError:
                    sent = False  # the service stopped reading (a refusal): its answer says why
                except BaseException:
                    self.close()  # the body failed half sent: this connection is unusable
                    raise
            response = self._response()
        except OSError as exc:
            self.close()
            raise Unreachable(f"the executor service at {self.target.label} went away ({exc})") from exc
        response.reusable = response.reusable and sent
        self._last = response
        return response

    def _send_unless_answered(self, data: bytes) -> bool:
        """Send ``data``, unless the service answers first: False then (it refused the request before reading its
        body, a missing session say, and stopped reading; sending on would block forever). As curl does."""
        sock = self._sock
        assert sock is not None
        view = memoryview(data)
        sock.setblocking(False)
        try:
            while view:
                readable, writable, _ = select.select([sock], [sock], [], self._timeout)
                if readable:
                    return False
                if not writable:
                    raise TimeoutError(f"the service took no data for {self._timeout} s")
                try:
                    view = view[sock.send(view[:_SEND_SLICE_BYTES]) :]
                except BlockingIOError:
                    continue
            return True
        finally:
            sock.settimeout(self._timeout)

    def _response(self) -> Response:
        line = self._reader.readline(_MAX_HEAD_BYTES)
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
            raise ConnectionResetError(f"no HTTP response ({line[:80]!r})")
        headers: dict[str, str] = {}
        size = len(line)
        while True:
            line = self._reader.readline(_MAX_HEAD_BYTES)
            size += len(line)
            if line in (b"\r\n", b"\n"):
                break
            if not line or size > _MAX_HEAD_BYTES:
                raise ConnectionResetError("the response's head was cut or too long")
            key, _, value = line.decode("latin-1").partition(":")
            headers[key.strip().lower()] = value.strip()
        status = int(parts[1])
        response = Response(status, headers, self._reader, target=self.target)
        if status in (204, 304) or 100 <= status < 200:
            response.done = True
        return response

    def call(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        query: Mapping[str, Any] | None = None,
    ) -> Any:
        """Send a request and return its JSON body (None for an empty one).

        Raises:
            ServiceError, Unreachable: see :meth:`send`.
        """
        raw = self.send(method, path, body, query=query).read()
        return loads_json(raw, max_depth=DEFAULT_MAX_DEPTH) if raw else None


def open_connection(target: Target, *, timeout: float | None = None) -> Connection:
    """Connect to ``target`` (the connect itself is bounded; ``timeout`` bounds each later read, None: none).

    Raises:
        Unreachable: nothing listens there (refused, missing, timed out).
    """
    conn = Connection(target, timeout)
    conn.connect()
    return conn
