"""The MCP stdio transport, guarded: every request gets an answer, even one that is not a valid JSON-RPC message.

The SDK's stdio transport hands a line that does not validate (not JSON, or a request whose ``params`` is a string)
to the server as an exception, and the server drops it: the client waits forever for its reply. Here each line is
checked first, the way the SDK checks it; a line that fails gets the JSON-RPC error its sender can act on
(``-32700`` for text that is not JSON, ``-32602`` for a request whose ``params`` is not an object, ``-32600`` for
any other request that is not valid, with the request's id when it has one) and never reaches the server.
Notifications and stray responses that do not validate are dropped, as JSON-RPC says (nobody waits for a reply).
A line nested deeper than ``service.max_json_depth`` or longer than its byte limit is answered ``-32700`` before
any parser recurses into it or holds it whole (executor/nesting.py), and the server reads the next line.

Like the SDK's transport, this one claims the process's standard streams while it serves: the wire moves to
private descriptors, file descriptor 0 reads the null device and 1 writes to stderr, so a handler's or a child's
stray output cannot corrupt the wire; both are restored on exit.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio
from mcp_types import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, jsonrpc_message_adapter

from executor.nesting import DEFAULT_MAX_DEPTH, NestingTooDeep, check_json_depth, loads_json

__all__ = ["guarded_stdio", "reply_to_invalid"]

_SHAPE: Final = 'a request is {"jsonrpc": "2.0", "id": string or number, "method": string, "params": object}'


def reply_to_invalid(line: str, *, max_depth: int = DEFAULT_MAX_DEPTH) -> str | None:
    """What to answer instead of passing ``line`` on: None for a valid message, ``""`` to drop it silently, else
    one JSON-RPC error response (without the newline)."""
    if not line.strip():
        return ""
    try:
        check_json_depth(line, max_depth=max_depth, setting="service.max_json_depth")
    except NestingTooDeep as exc:
        return _error(None, PARSE_ERROR, f"Parse error: {exc}")
    try:
        jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError:
        pass
    else:
        return None
    try:
        data: Any = loads_json(line, max_depth=max_depth)
    except ValueError:
        return _error(None, PARSE_ERROR, "Parse error: the line is not JSON; send one JSON-RPC message per line")
    if not isinstance(data, dict) or "method" not in data:
        # A response or something unrecognisable: answer only what looks like a request with an id.
        if isinstance(data, dict) and "id" in data and "result" not in data and "error" not in data:
            return _error(_id_of(data), INVALID_REQUEST, f"Invalid Request: {_SHAPE}")
        if not isinstance(data, dict):
            return _error(None, INVALID_REQUEST, "Invalid Request: a message is a JSON object")
        return ""
    if "id" not in data:
        return ""  # a notification: no reply, by JSON-RPC
    params = data.get("params")
    if not _is_unicode(params):
        message = "Invalid params: a string holds an unpaired surrogate escape, which is not Unicode text; send UTF-8"
        return _error(_id_of(data), INVALID_PARAMS, message)
    if params is not None and not isinstance(params, dict):
        message = f"Invalid params: params must be an object, not {type(params).__name__}"
        return _error(_id_of(data), INVALID_PARAMS, message)
    return _error(_id_of(data), INVALID_REQUEST, f"Invalid Request: {_SHAPE}")


def _is_unicode(value: object) -> bool:
    """Whether every string in ``value`` is Unicode text (JSON's ``\\udXXX`` escapes can spell lone surrogates)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _id_of(data: dict[str, Any]) -> str | int | None:
    ident = data.get("id")
    return ident if isinstance(ident, str | int) and not isinstance(ident, bool) else None


def _error(ident: str | int | None, code: int, message: str) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}})


class _Wire:
    """The outgoing side: whole lines written to a private duplicate of stdout, one writer at a time."""

    def __init__(self, fd: int) -> None:
        # closefd=False: a worker thread may still use the descriptor after the transport exits.
        self._file = os.fdopen(fd, "wb", closefd=False)
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            self._file.write(text.encode("utf-8"))
            self._file.flush()
        return len(text)

    def flush(self) -> None:
        """Every write is flushed already."""


class _GuardedLines:
    """The incoming side: lines from a private duplicate of stdin; invalid messages are answered, not passed on."""

    def __init__(self, fd: int, wire: _Wire, *, max_depth: int, max_line_chars: int) -> None:
        self._file = io.TextIOWrapper(os.fdopen(fd, "rb", closefd=False), encoding="utf-8", errors="replace")
        self._wire = wire
        self._max_depth = max_depth
        self._max_line_chars = max_line_chars

    def _skip_rest_of_line(self) -> bool:
        """Read and drop what is left of an overlong line; False when the input ended first."""
        while part := self._file.readline(self._max_line_chars):
            if part.endswith("\n"):
                return True
        return False

    def readline(self) -> str:
        while True:
            # Never more than the limit in memory: an endless line is read in pieces and dropped.
            line = self._file.readline(self._max_line_chars + 1)
            if not line:
                return ""
            if len(line) > self._max_line_chars and not line.endswith("\n"):
                message = f"Parse error: the line is longer than {self._max_line_chars} characters; send less"
                self._wire.write(_error(None, PARSE_ERROR, message) + "\n")
                if not self._skip_rest_of_line():
                    return ""
                continue
            reply = reply_to_invalid(line, max_depth=self._max_depth)
            if reply is None:
                return line
            if reply:
                self._wire.write(reply + "\n")


@asynccontextmanager
async def guarded_stdio(
    *, max_depth: int, max_line_chars: int
) -> AsyncIterator[tuple[anyio.AsyncFile[str], anyio.AsyncFile[str]]]:
    """Claim stdin/stdout for the wire and yield them as the (stdin, stdout) files of the SDK's ``stdio_server``.

    Args:
        max_depth: deepest JSON nesting of a line (``service.max_json_depth``).
        max_line_chars: longest line read; a longer one is answered with an error and dropped.
    """
    wire_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    wire_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.dup2(null, 0)
        os.dup2(2, 1)
    finally:
        os.close(null)
    wire = _Wire(wire_out)
    try:
        yield (
            anyio.wrap_file(_GuardedLines(wire_in, wire, max_depth=max_depth, max_line_chars=max_line_chars)),  # type: ignore[arg-type]  # only readline() is used
            anyio.wrap_file(wire),  # type: ignore[arg-type]  # only write() and flush() are used
        )
    finally:
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)
