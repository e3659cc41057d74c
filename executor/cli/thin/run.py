"""The session commands over the service (see :mod:`executor.cli.thin`): argument parsing, requests, output.

Commands: ``exec``, ``write``, ``cp``, ``session start|ls|stop``, ``output read|search``, ``bg start|read|stop|ls``
(``bg read --follow`` included). Their
options, output, JSON shapes (:mod:`executor.cli.shapes`) and exit codes are the in-process commands' own. Whatever
this module does not handle itself (``--help``, ``--all``, an operator command) returns None: the caller then runs
the full command line in-process, which is also where its help and its complete error messages live.

Adding a command: its options go in :data:`SPECS` (the same options as its typer command: a usage error here, with
no ``EXECUTOR_URL``, hands the line to the typer command, which reports it or runs it), its function in
``_COMMANDS`` (it gets the connection and the parsed line and returns the exit status), and its JSON shape in
:mod:`executor.cli.shapes`, which its typer command uses too. ``parse`` delegates unknown commands.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import json
import os
import re
import shlex
import struct
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, BinaryIO, Final, NamedTuple

from executor.cli import shapes
from executor.cli.streams import OutputFailed, read_capped, silence
from executor.cli.thin.transport import (
    Connection,
    NotText,
    NotYours,
    Response,
    ServiceError,
    Target,
    Unreachable,
    decode_bytes,
    find_service,
    open_connection,
    segment,
)
from executor.durations import parse_idle_limit
from executor.environ import command_settings, environment_digest
from executor.ids import is_session_id
from executor.nesting import DEFAULT_MAX_DEPTH, loads_json

__all__ = ["EXEC_FRAMES", "Usage", "parse", "run_thin"]

EXEC_FRAMES: Final = "application/vnd.executor.exec-frames"
"""The binary exec stream (``executor.service.wire.EXEC_FRAMES``; a test checks they agree)."""
_FRAME: Final = struct.Struct(">B3xI")
_STDIN_CAP: Final = 256 * 1024 * 1024
"""Most bytes read from ``--stdin``/``--from`` here; the service's own limits (``bash.max_stdin_bytes``,
``write.max_bytes``, ``service.max_request_bytes``) refuse less."""


class Usage(Exception):
    """Bad usage: exit 2 with this message."""


class Delegate(Exception):
    """Not for the thin path: run the whole command line in-process."""


# ----------------------------------------------------------------------------------------------------------------
# Parsing.


class Spec(NamedTuple):
    """What one command accepts."""

    values: frozenset[str] = frozenset()
    """Options that take a value."""
    flags: frozenset[str] = frozenset()
    """Options that do not."""
    repeat: frozenset[str] = frozenset()
    """Value options that may repeat."""
    positionals: int = 0
    """Positional arguments before the command words."""
    words: bool = False
    """Takes a command (``-- COMMAND...``)."""
    inprocess: frozenset[str] = frozenset()
    """Options only the in-process command has."""


class Parsed:
    """A parsed command line."""

    def __init__(self, command: tuple[str, ...], *, json_mode: bool, config: str | None) -> None:
        self.command = command
        self.json = json_mode
        self.config = config
        self.options: dict[str, str] = {}
        self.flags: set[str] = set()
        self.repeated: dict[str, list[str]] = {}
        self.positionals: list[str] = []
        self.words: list[str] = []


_SESSION_OPTS: Final = frozenset({"--session", "--profile", "--image"})
SPECS: Final[dict[tuple[str, ...], Spec]] = {
    ("exec",): Spec(
        values=_SESSION_OPTS | {"--timeout-ms", "--focus-mode", "--intent", "--cwd", "--env", "--stdin"},
        flags=frozenset({"--create", "--view"}),
        repeat=frozenset({"--env"}),
        words=True,
    ),
    ("write",): Spec(values=_SESSION_OPTS | {"--from"}, flags=frozenset({"--create"}), positionals=1),
    ("session", "start"): Spec(values=frozenset({"--profile", "--image", "--name", "--idle"})),
    ("session", "ls"): Spec(inprocess=frozenset({"--all"})),
    ("session", "stop"): Spec(positionals=1, inprocess=frozenset({"--all"})),
    ("output", "read"): Spec(
        values=frozenset({"--session", "--stream", "--start-line", "--line-count", "--start-byte-in-line"}),
        positionals=1,
    ),
    ("output", "search"): Spec(
        values=frozenset({"--session", "--stream", "--pattern", "--limit", "--start-line"}), positionals=1
    ),
    ("bg", "start"): Spec(
        values=_SESSION_OPTS | {"--cwd", "--env"},
        flags=frozenset({"--create"}),
        repeat=frozenset({"--env"}),
        words=True,
    ),
    ("bg", "read"): Spec(
        values=frozenset({"--session", "--stream", "--offset", "--max-bytes"}),
        flags=frozenset({"--follow", "-f"}),
        positionals=1,
    ),
    ("bg", "stop"): Spec(values=frozenset({"--session"}), positionals=1),
    ("bg", "ls"): Spec(values=frozenset({"--session"})),
    ("cp",): Spec(values=frozenset({"--session"}), positionals=2),
}
"""The commands the thin path runs."""

_GROUPS: Final = frozenset(name[0] for name in SPECS if len(name) == 2)


def parse(argv: Sequence[str]) -> Parsed:
    """Parse a command line for the thin path.

    Raises:
        Delegate: not a thin command, or something only the in-process command handles (``--help``, ``--debug``).
        Usage: a bad option or argument (exit 2).
    """
    args = list(argv)
    end = args.index("--") if "--" in args else len(args)
    json_mode = "--json" in args[:end]
    args = [a for i, a in enumerate(args) if not (a == "--json" and i < end)]
    config = None
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "--":
        word = args[i]
        if word == "--config" and i + 1 < len(args):
            config, i = args[i + 1], i + 2
        elif word.startswith("--config="):
            config, i = word.split("=", 1)[1], i + 1
        else:
            raise Delegate  # --debug, --help, anything else: the full CLI
    rest = args[i:]
    if not rest:
        raise Delegate
    name: tuple[str, ...] = (rest[0],)
    if rest[0] in _GROUPS:
        if len(rest) < 2:
            raise Delegate
        name = (rest[0], rest[1])
    spec = SPECS.get(name)
    if spec is None:
        raise Delegate
    parsed = Parsed(name, json_mode=json_mode, config=config)
    words = rest[len(name) :]
    j = 0
    while j < len(words):
        word = words[j]
        j += 1
        if word == "--":
            if not spec.words:
                raise Usage(f"{' '.join(name)} takes no command after --")
            parsed.words = words[j:]
            break
        if word in ("--help", "-h") or word in spec.inprocess or word.split("=", 1)[0] in spec.inprocess:
            raise Delegate
        if word.startswith("-") and word != "-":
            key, eq, inline = word.partition("=")
            if key in spec.flags and not eq:
                parsed.flags.add(key)
                continue
            if key not in spec.values:
                raise Usage(f"no such option: {key} (see `executor {' '.join(name)} --help`)")
            if eq:
                value = inline
            elif j < len(words):
                value, j = words[j], j + 1
            else:
                raise Usage(f"option {key} requires an argument")
            if key in spec.repeat:
                parsed.repeated.setdefault(key, []).append(value)
            else:
                parsed.options[key] = value
            continue
        if len(parsed.positionals) < spec.positionals:
            parsed.positionals.append(word)
        elif spec.words:
            parsed.words = words[j - 1 :]
            break
        else:
            raise Usage(f"unexpected argument {word!r} (see `executor {' '.join(name)} --help`)")
    if len(parsed.positionals) < spec.positionals:
        raise Usage(f"missing argument (see `executor {' '.join(name)} --help`)")
    return parsed


def _int(parsed: Parsed, option: str, default: int | None = None) -> int | None:
    text = parsed.options.get(option)
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        raise Usage(f"{option} {text!r} is not an integer") from None


def _env(parsed: Parsed) -> dict[str, str]:
    env: dict[str, str] = {}
    for entry in parsed.repeated.get("--env", []):
        key, sep, value = entry.partition("=")
        if not sep or not key:
            raise Usage(f"--env {entry!r} is not KEY=VALUE")
        env[key] = value
    return env


def _command_text(words: Sequence[str], usage: str) -> str:
    if not words or not "".join(words).strip():
        raise Usage(f"no command given: {usage}")
    return words[0] if len(words) == 1 else shlex.join(words)


def _read_input(source: str, option: str) -> bytes:
    try:
        if source == "-":
            data = read_capped(sys.stdin.buffer, _STDIN_CAP)
        else:
            with open(source, "rb") as file:
                data = read_capped(file, _STDIN_CAP)
    except OSError as exc:
        raise Usage(f"{option} {source}: {exc.strerror or exc}") from None
    if len(data) > _STDIN_CAP:
        raise Usage(f"{option} {source}: more than {_STDIN_CAP} bytes; pass a smaller input")
    return data


def _interactive(*, stdin_used: bool = False) -> bool:
    """A person can answer an ask: stdin and stderr are terminals (and stdin carries no input)."""
    return not stdin_used and sys.stdin.isatty() and sys.stderr.isatty()


# ----------------------------------------------------------------------------------------------------------------
# Output.


class _Out:
    def __init__(self, json_mode: bool) -> None:
        self.json = json_mode

    def emit(self, data: Mapping[str, Any], text: str) -> None:
        out = sys.stdout
        if out is None:  # closed from the start (>&-): the exit code still tells
            return
        if self.json:
            out.write(json.dumps(data, sort_keys=True, default=str) + "\n")
        elif text:
            out.write(text if text.endswith("\n") else text + "\n")
        out.flush()

    def fail(self, message: str, code: int, outcome: str = "error") -> int:
        if self.json and sys.stdout is not None:
            sys.stdout.write(json.dumps(shapes.error_json(message, code, outcome)) + "\n")
            sys.stdout.flush()
        else:
            sys.stderr.write(f"error: {' '.join(message.split())}\n")
            sys.stderr.flush()
        return code


# ----------------------------------------------------------------------------------------------------------------
# Sessions over the service.


_SESSION_ID: Final = re.compile(r"s-[0-9a-f]{12}")
_SESSION_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


def _check_name(value: str) -> None:
    """A session id or a well-formed name, as ``executor.ids.validate_session_name`` says (a test checks they
    agree); a malformed one is bad input before any request."""
    if _SESSION_ID.fullmatch(value) is None and _SESSION_NAME.fullmatch(value) is None:
        raise Usage(_NAME_RULE.format(name=value))


_NAME_RULE: Final = (
    "session name {name!r} must be 1-63 letters, digits, '_', '.' or '-', start with a letter or digit, "
    "and not look like a session id"
)


class _Client:
    """The commands' requests on one connection."""

    def __init__(self, conn: Connection, out: _Out) -> None:
        self.conn = conn
        self.out = out

    def session_view(self, session: str) -> dict[str, Any] | None:
        view = self.conn.call("GET", f"/v1/sessions/{segment(session)}")
        return view if isinstance(view, dict) else None

    def create(
        self,
        *,
        name: str | None,
        profile: str | None,
        image: str | None,
        idle_s: float | str | None = None,
        throwaway: bool = False,
    ) -> dict[str, Any]:
        fields = (("name", name), ("profile", profile), ("image", image), ("idle_s", idle_s))
        body: dict[str, Any] = {key: value for key, value in fields if value is not None}
        if throwaway:
            body["throwaway"] = True  # it goes with this client: killed mid-command, it leaves nothing running
        view = self.conn.call("POST", "/v1/sessions", body)
        assert isinstance(view, dict)
        return view

    def ensure(self, name: str, parsed: Parsed) -> ServiceError | None:
        """Start the named session when the call says ``--create``; someone else starting it first is fine (the
        refusal is returned: if the session is still not ours to use, it is the better message)."""
        try:
            self.create(name=name, profile=parsed.options.get("--profile"), image=parsed.options.get("--image"))
        except ServiceError as exc:
            if exc.type != "SessionNameTaken":
                raise
            return exc
        return None

    def in_session(self, parsed: Parsed, call: Callable[[str], Any], *, create_allowed: bool = True) -> Any:
        """Run ``call(session)`` in ``--session`` (starting it with ``--create``), else in a throwaway session."""
        name = parsed.options.get("--session")
        if name is None:
            view = self.create(
                name=None, profile=parsed.options.get("--profile"), image=parsed.options.get("--image"), throwaway=True
            )
            try:
                return call(str(view["id"]))
            finally:
                self.quiet_stop(str(view["id"]))
        _check_name(name)
        try:
            return call(name)
        except ServiceError as exc:
            if exc.type not in ("SessionNotFound", "SessionNotRunning") or exc.status != 404:
                raise
            if not (create_allowed and "--create" in parsed.flags) or is_session_id(name):
                if exc.type == "SessionNotRunning":
                    raise  # it says how to start it again
                # (An id is never created: a typo, or a session that is gone.)
                raise ServiceError(
                    404, "SessionNotFound", shapes.missing_session_message(name, can_create=create_allowed)
                ) from None
        taken = self.ensure(name, parsed)
        try:
            return call(name)
        except ServiceError as exc:
            if taken is not None and exc.status == 404:
                raise taken from None  # the name is another token's: "in use", not "no session"
            raise

    def quiet_stop(self, session: str) -> None:
        with contextlib.suppress(ServiceError, Unreachable):
            self.conn.call("DELETE", f"/v1/sessions/{segment(session)}")


# ----------------------------------------------------------------------------------------------------------------
# exec


class _Streamed:
    def __init__(self) -> None:
        self.result: dict[str, Any] | None = None
        self.dropped: dict[str, int] = {}


def _answer_at_terminal(conn_target: Target, event: Mapping[str, Any]) -> None:
    """Ask the person at the terminal (the same words as the in-process handler) and send the answer."""
    err = sys.stderr
    err.write("\n=== approval needed ===\n")
    for reason in event.get("reasons") or ():
        err.write(f"  why: {' '.join(str(reason).split())}\n")
    err.write(str(event.get("summary", "")) + "\n")
    err.write("Approve this exact action once? [y/N] ")
    err.flush()
    line = sys.stdin.readline()
    if not line:
        err.write("\n(end of input: denied)\n")
    approve = line.strip().lower() in ("y", "yes")
    answer = open_connection(conn_target, timeout=30.0)
    try:
        answer.call("POST", f"/v1/approvals/{segment(str(event['approval_id']))}", {"approve": approve})
    except ServiceError:
        pass  # timed out or answered already: the stream's result says what happened
    finally:
        answer.close()


def _read_exact(response: Response, size: int) -> bytes:
    data = response.read(size)
    if len(data) != size:
        raise Unreachable("the exec stream ended early (the service went away); the artifact keeps the output")
    return data


def _stream_exec(client: _Client, session: str, body: Mapping[str, Any], *, live: bool) -> _Streamed:
    response = client.conn.send("POST", f"/v1/sessions/{segment(session)}/exec", body, accept=EXEC_FRAMES)
    if EXEC_FRAMES not in (response.getheader("content-type") or ""):
        raise Unreachable("the service does not speak the framed exec stream; upgrade it (or unset EXECUTOR_URL)")
    streamed = _Streamed()
    # A descriptor started closed (``>&-``) leaves Python no stream: that output is not written, as docker's.
    outs: dict[int, BinaryIO] = {
        kind: stream.buffer for kind, stream in ((1, sys.stdout), (2, sys.stderr)) if stream is not None
    }
    try:
        while True:
            header = response.read(_FRAME.size)
            if not header:
                raise Unreachable("the exec stream ended without a result (the service went away)")
            if len(header) != _FRAME.size:
                header += _read_exact(response, _FRAME.size - len(header))
            kind, size = _FRAME.unpack(header)
            payload = _read_exact(response, size) if size else b""
            if kind in (1, 2):
                out = outs.get(kind) if live else None
                if out is not None:
                    try:
                        out.write(payload)
                        out.flush()
                    except (OSError, ValueError) as exc:
                        del outs[kind]
                        silence(out)
                        if kind == 1:
                            # Nowhere to write the output: stop here, as docker exec does (a throwaway session goes
                            # with this call; a named session's command runs on into its artifact, as on Ctrl-C).
                            raise OutputFailed(exc) from None
                continue
            event = loads_json(payload, max_depth=DEFAULT_MAX_DEPTH)
            what = event.get("kind")
            if what == "result":
                streamed.result = event["result"]
                response.read()  # the stream's end, so the connection can carry the next request
                return streamed
            if what == "error":
                error = event.get("error") or {}
                raise ServiceError(500, str(error.get("type", "ExecutorError")), str(error.get("message", "")))
            if what == "dropped":
                stream = str(event.get("stream"))
                streamed.dropped[stream] = streamed.dropped.get(stream, 0) + int(event.get("bytes", 0))
            elif what == "approval":
                _answer_at_terminal(client.conn.target, event)
    finally:
        if streamed.result is None:
            client.conn.close()  # mid-stream: the next request needs a fresh connection


def _exec(client: _Client, parsed: Parsed) -> int:
    out = client.out
    script = _command_text(parsed.words, "executor exec -- COMMAND...")
    focus = parsed.options.get("--focus-mode")
    if focus is not None and focus not in ("off", "shadow", "on"):
        raise Usage(f"--focus-mode {focus!r} is not one of: off, shadow, on")
    timeout_ms = _int(parsed, "--timeout-ms")
    env = _env(parsed)
    stdin_source = parsed.options.get("--stdin")
    stdin = None if stdin_source is None else _read_input(stdin_source, "--stdin")
    view = "--view" in parsed.flags
    live = not (view or out.json)
    body: dict[str, Any] = {
        "command": script,
        "approvals": "wait" if _interactive(stdin_used=stdin_source == "-") else "none",
        "result_streams": out.json,
    }
    for key, value in (
        ("cwd", parsed.options.get("--cwd")),
        ("env", env or None),
        ("stdin", None if stdin is None else base64.b64encode(stdin).decode()),
        ("timeout_ms", timeout_ms),
        ("focus_mode", focus),
        ("intent", parsed.options.get("--intent")),
    ):
        if value is not None:
            body[key] = value
    seen: dict[str, Any] = {}

    def run(session: str) -> _Streamed:
        streamed = _stream_exec(client, session, body, live=live)
        if out.json:
            seen["session"] = client.session_view(session)
        return streamed

    streamed: _Streamed = client.in_session(parsed, run)
    result = streamed.result or {}
    outcome = str(result.get("outcome"))
    code = shapes.exit_code_for(outcome, result.get("exit_code"))
    if out.json:
        data = shapes.exec_json(
            result,
            code=code,
            session=seen.get("session"),
            stdout=decode_bytes(result.get("stdout"), "a result's stdout"),
            # null when nothing ran: the empty streams are then whole, as the in-process path says
            stdout_whole=result.get("stdout_whole") is not False,
            stderr=decode_bytes(result.get("stderr"), "a result's stderr"),
            stderr_whole=result.get("stderr_whole") is not False,
        )
        out.emit(data, "")
        return code
    if view:
        out.emit({}, str(result.get("text", "")))
        return code
    for stream, count in streamed.dropped.items():
        sys.stderr.write(
            f"executor: {count} bytes of {stream} were not streamed (this terminal fell behind); "
            f"artifact {result.get('artifact_id')} has them: `executor output read {result.get('artifact_id')}`\n"
        )
    if outcome not in ("completed", "failed"):
        sys.stderr.write(shapes.reason_line(str(outcome), str(result.get("text", ""))) + "\n")
    sys.stderr.flush()
    return code


# ----------------------------------------------------------------------------------------------------------------
# write


def _write(client: _Client, parsed: Parsed) -> int:
    path = parsed.positionals[0]
    source = parsed.options.get("--from", "-")
    content = _read_input(source, "--from")
    interactive = _interactive(stdin_used=source == "-")
    seen: dict[str, Any] = {}

    def run(session: str) -> dict[str, Any]:
        body = {
            "path": path,
            "content": base64.b64encode(content).decode(),
            "approvals": "wait" if interactive else "none",
        }
        with _Approver(client.conn.target, session, enabled=interactive):
            result = client.conn.call("POST", f"/v1/sessions/{segment(session)}/write", body)
        if client.out.json:
            seen["session"] = client.session_view(session)
        assert isinstance(result, dict)
        return result

    result = client.in_session(parsed, run)
    code = shapes.write_exit_code(str(result.get("outcome")))
    data = shapes.write_json(result, code=code, path=path, session=seen.get("session"))
    client.out.emit(data, str(result.get("text", "")))
    return code


class _Approver:
    """While a blocking request runs, answer its asks at the terminal (they come through ``GET /v1/approvals``).

    Only used when a person can answer; otherwise the request says ``approvals: none`` and asks come back blocked.
    """

    def __init__(self, target: Target, session: str, *, enabled: bool) -> None:
        self._target = target
        self._session = session
        self._enabled = enabled
        self._stop: Any = None
        self._thread: Any = None

    def __enter__(self) -> _Approver:
        if self._enabled:
            import threading

            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._stop is not None:
            self._stop.set()
            self._thread.join(timeout=5.0)

    def _poll(self) -> None:
        answered: set[str] = set()
        try:
            conn = open_connection(self._target, timeout=30.0)
        except Unreachable:
            return
        try:
            # Only this call's asks: the home's owner sees every pending ask, also other clients'.
            try:
                session_id = (conn.call("GET", f"/v1/sessions/{segment(self._session)}") or {}).get("id")
            except (ServiceError, Unreachable):
                return
            while not self._stop.wait(0.2):
                try:
                    pending = conn.call("GET", "/v1/approvals")
                except (ServiceError, Unreachable):
                    return
                for ask in pending or ():
                    if ask.get("session_id") == session_id and ask.get("approval_id") not in answered:
                        answered.add(str(ask.get("approval_id")))
                        _answer_at_terminal(self._target, ask)
        finally:
            conn.close()


# ----------------------------------------------------------------------------------------------------------------
# session


def _idle_limit(value: str) -> float | str:
    """``--idle`` as the service takes it (seconds, or ``"none"``); a bad value is a usage error, as in-process."""
    try:
        limit = parse_idle_limit(value)
    except ValueError as exc:
        raise Usage(f"--idle: {exc}") from None
    return "none" if limit is None else limit


def _session_start(client: _Client, parsed: Parsed) -> int:
    name = parsed.options.get("--name")
    idle = parsed.options.get("--idle")
    if idle is not None and name is None:
        raise Usage("--idle needs --name: an unnamed session lives only as long as this command")
    if name is not None and (_SESSION_ID.fullmatch(name) or not _SESSION_NAME.fullmatch(name)):
        raise Usage(_NAME_RULE.format(name=name))  # checked as in-process, before a request
    view = client.create(
        name=name,
        profile=parsed.options.get("--profile"),
        image=parsed.options.get("--image"),
        idle_s=None if idle is None else _idle_limit(idle),
    )
    client.out.emit(shapes.started_json(view), str(view.get("id")))
    return 0


def _session_ls(client: _Client, parsed: Parsed) -> int:
    views = client.conn.call("GET", "/v1/sessions") or []
    client.out.emit(shapes.sessions_json(views), shapes.session_table(views))
    return 0


def _session_stop(client: _Client, parsed: Parsed) -> int:
    name = parsed.positionals[0]
    _check_name(name)
    view = client.session_view(name) or {}
    session_id = str(view.get("id", name))
    client.conn.call("DELETE", f"/v1/sessions/{segment(session_id)}")
    client.out.emit(shapes.stopped_json({**view, "id": session_id}), f"stopped {session_id}")
    return 0


# ----------------------------------------------------------------------------------------------------------------
# output


def _artifact_session(parsed: Parsed, artifact_id: str) -> str:
    session = parsed.options.get("--session")
    if session is not None:
        return session
    head, dot, _ = artifact_id.partition(".")
    if not dot or not head.startswith("s-"):
        raise Usage(
            f"{artifact_id[:80]!r} is not an artifact id; use one from a recovery notice, like 's-0123456789ab.a3'"
        )
    return head


def _artifact_owner(artifact_id: str, session: str) -> dict[str, Any] | None:
    # What the in-process command says too: the session the artifact id names (an id never needs the engine).
    head = artifact_id.partition(".")[0]
    return shapes.bare_session(head if head.startswith("s-") else session)


def _output_read(client: _Client, parsed: Parsed) -> int:
    artifact_id = parsed.positionals[0]
    session = _artifact_session(parsed, artifact_id)
    query = {
        "stream": parsed.options.get("--stream"),
        "start_line": _int(parsed, "--start-line", 1),
        "line_count": _int(parsed, "--line-count"),
        "start_byte_in_line": _int(parsed, "--start-byte-in-line"),
    }
    result = client.conn.call("GET", f"/v1/sessions/{segment(session)}/artifacts/{segment(artifact_id)}", query=query)
    client.out.emit(
        shapes.output_json(result, code=0, artifact_id=artifact_id, session=_artifact_owner(artifact_id, session)),
        str(result.get("text", "")),
    )
    return 0


def _output_search(client: _Client, parsed: Parsed) -> int:
    artifact_id = parsed.positionals[0]
    pattern = parsed.options.get("--pattern")
    if pattern is None:
        raise Usage("missing option --pattern (see `executor output search --help`)")
    session = _artifact_session(parsed, artifact_id)
    stream = parsed.options.get("--stream")
    limit = _int(parsed, "--limit", 20)
    start_line = _int(parsed, "--start-line", 1)
    path = f"/v1/sessions/{segment(session)}/artifacts/{segment(artifact_id)}/search"
    results: list[dict[str, Any]] = []
    for name in (stream,) if stream is not None else ("stdout", "stderr"):
        query = {"pattern": pattern, "stream": name, "limit": limit, "start_line": start_line}
        try:
            results.append(client.conn.call("GET", path, query=query))
        except ServiceError as exc:
            if stream is not None or exc.type != "StreamNotFound":
                raise
    if not results:
        # Neither stdout nor stderr (a write's artifact keeps "output"): the artifact's own first stream.
        results.append(
            client.conn.call("GET", path, query={"pattern": pattern, "limit": limit, "start_line": start_line})
        )
    pages = [r.get("data") for r in results]
    combined = dict(results[0])
    combined["text"] = "\n".join(str(r.get("text", "")).rstrip("\n") for r in results)
    data = shapes.output_json(
        combined, code=0, artifact_id=artifact_id, session=_artifact_owner(artifact_id, session), pages=pages
    )
    code = 0 if data["matches"] else shapes.EXIT_NO_MATCH
    data["exit_code"] = code
    client.out.emit(data, str(combined["text"]))
    return code


# ----------------------------------------------------------------------------------------------------------------
# bg


def _need_session(parsed: Parsed) -> str:
    session = parsed.options.get("--session")
    if session is None:
        raise Usage(
            "background tasks need a session that outlives this command: pass --session NAME "
            "(with --create on `bg start` to start a missing one)"
        )
    return session


def _bg_start(client: _Client, parsed: Parsed) -> int:
    _need_session(parsed)
    script = _command_text(parsed.words, "executor bg start --session S -- COMMAND...")
    env = _env(parsed)
    interactive = _interactive()
    body: dict[str, Any] = {"command": script, "approvals": "wait" if interactive else "none"}
    if parsed.options.get("--cwd") is not None:
        body["cwd"] = parsed.options["--cwd"]
    if env:
        body["env"] = env
    seen: dict[str, Any] = {}

    def run(session: str) -> dict[str, Any]:
        with _Approver(client.conn.target, session, enabled=interactive):
            result = client.conn.call("POST", f"/v1/sessions/{segment(session)}/tasks", body)
        if client.out.json:
            seen["session"] = client.session_view(session)
        assert isinstance(result, dict)
        return result

    result = client.in_session(parsed, run)
    code = shapes.exit_code_for(str(result.get("outcome")), result.get("exit_code"))
    client.out.emit(shapes.bg_start_json(result, code=code, session=seen.get("session")), str(result.get("text", "")))
    return code


def _session_of(client: _Client, parsed: Parsed) -> dict[str, Any] | None:
    return client.session_view(_need_session(parsed)) if client.out.json else None


def _bg_read(client: _Client, parsed: Parsed) -> int:
    _need_session(parsed)
    stream = parsed.options.get("--stream", "stdout")
    if stream not in ("stdout", "stderr"):
        raise Usage(f"--stream {stream!r} is not one of: stdout, stderr")
    offset = _int(parsed, "--offset", 0)
    max_bytes = _int(parsed, "--max-bytes", 65_536)
    assert offset is not None and max_bytes is not None
    if offset < 0 or not 1 <= max_bytes <= shapes.MAX_TASK_PAGE_BYTES:
        raise Usage(
            f"--offset must be at least 0 and --max-bytes between 1 and {shapes.MAX_TASK_PAGE_BYTES} (--offset "
            "continues)"
        )
    task = parsed.positionals[0]
    if "--follow" in parsed.flags or "-f" in parsed.flags:
        if parsed.json:
            raise Usage("--follow prints the raw stream; it cannot be combined with --json")
        return _bg_follow(client, parsed, task, stream, offset, max_bytes)
    result = client.in_session(
        parsed,
        lambda s: client.conn.call(
            "GET",
            f"/v1/sessions/{segment(s)}/tasks/{segment(task)}",
            query={"stream": stream, "offset": offset, "max_bytes": max_bytes},
        ),
        create_allowed=False,
    )
    client.out.emit(shapes.bg_read_json(result, session=_session_of(client, parsed)), str(result.get("text", "")))
    return 0


def _bg_follow(client: _Client, parsed: Parsed, task: str, stream: str, offset: int, max_bytes: int) -> int:
    """Print the task's stream raw as the service's followed pages bring it; exit with the task's code."""
    session = parsed.options["--session"]
    response = client.conn.send(
        "GET",
        f"/v1/sessions/{segment(session)}/tasks/{segment(task)}",
        query={"stream": stream, "offset": offset, "max_bytes": max_bytes, "follow": True},
        accept="application/x-ndjson",
    )
    if sys.stdout is None:
        raise OutputFailed(OSError(errno.EBADF, "stdout is closed"))
    out = sys.stdout.buffer
    run: Any = None
    buffer = b""
    try:
        while True:
            chunk = response.read_some(65_536)
            if not chunk:
                break
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                event = loads_json(line, max_depth=DEFAULT_MAX_DEPTH)
                if event.get("kind") == "error":
                    error = event.get("error") or {}
                    raise ServiceError(404, str(error.get("type")), str(error.get("message")))
                page = event.get("result") or {}
                data = decode_bytes(page.get(stream), "a page")
                if data:
                    try:
                        out.write(data)
                        out.flush()
                    except (OSError, ValueError) as exc:
                        raise OutputFailed(exc) from None  # following stops; the task goes on
                run = page.get("run")
    except KeyboardInterrupt:
        sys.stderr.write(f"stopped following; task {task} goes on (executor bg stop {task} stops it)\n")
        return shapes.EXIT_INTERRUPTED
    if not isinstance(run, dict):
        return shapes.EXIT_FAILURE
    if run.get("cause") == "timeout":
        return shapes.EXIT_TIMEOUT
    if isinstance(run.get("exit_code"), int):
        return int(run["exit_code"])
    signal = run.get("signal")
    return 128 + signal if isinstance(signal, int) else shapes.EXIT_FAILURE


def _bg_stop(client: _Client, parsed: Parsed) -> int:
    _need_session(parsed)
    task = parsed.positionals[0]
    info = client.in_session(
        parsed,
        lambda s: client.conn.call("DELETE", f"/v1/sessions/{segment(s)}/tasks/{segment(task)}"),
        create_allowed=False,
    )
    text = f"stopped task {info.get('task_id')}: {shapes.ended_text(info.get('run'))}"
    client.out.emit(shapes.bg_stop_json(info, text=text, session=_session_of(client, parsed)), text)
    return 0


def _bg_ls(client: _Client, parsed: Parsed) -> int:
    _need_session(parsed)
    tasks = client.in_session(
        parsed, lambda s: client.conn.call("GET", f"/v1/sessions/{segment(s)}/tasks"), create_allowed=False
    )
    client.out.emit(shapes.bg_ls_json(tasks, session=_session_of(client, parsed)), shapes.task_table(tasks))
    return 0


def _cp(client: _Client, parsed: Parsed) -> int:
    from executor.cli.thin import cp  # only for a copy: the archive code stays off the other commands' path
    from executor.errors import ContentRejected, UnsafeTarget

    source, dest = parsed.positionals
    try:
        data, text, code = cp.run_cp(client.conn, source=source, dest=dest, session=parsed.options.get("--session"))
    except cp.CpUsage as exc:
        raise Usage(str(exc)) from None
    except (UnsafeTarget, ContentRejected) as exc:
        return client.out.fail(str(exc), shapes.EXIT_USAGE)
    client.out.emit(data, text)
    return code


_COMMANDS: Final[dict[tuple[str, ...], Callable[[_Client, Parsed], int]]] = {
    ("exec",): _exec,
    ("write",): _write,
    ("session", "start"): _session_start,
    ("session", "ls"): _session_ls,
    ("session", "stop"): _session_stop,
    ("output", "read"): _output_read,
    ("output", "search"): _output_search,
    ("bg", "start"): _bg_start,
    ("bg", "read"): _bg_read,
    ("bg", "stop"): _bg_stop,
    ("bg", "ls"): _bg_ls,
    ("cp",): _cp,
}


def run_thin(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> int | None:
    """Run ``argv`` over the service and return the exit status, or None to run it in-process instead."""
    env = os.environ if environ is None else environ
    try:
        parsed = parse(argv)
    except Delegate:
        return None
    except Usage as exc:
        if not env.get("EXECUTOR_URL"):
            # The in-process command reports its own usage errors (with its help's wording), or runs a line this
            # parser does not know yet. Only a service named by EXECUTOR_URL (possibly remote, with no engine here)
            # makes the thin parser the last word.
            return None
        return _Out("--json" in argv).fail(str(exc), shapes.EXIT_USAGE)
    out = _Out(parsed.json)
    try:
        target = find_service(parsed.config, env)
    except Unreachable as exc:
        return out.fail(str(exc), shapes.EXIT_FAILURE)
    if target is None:
        return None
    try:
        conn = open_connection(target)
    except NotYours as exc:
        return out.fail(str(exc), shapes.EXIT_USAGE)
    except Unreachable as exc:
        if not target.explicit:
            return None  # a stale socket: no service, run in-process
        return out.fail(str(exc), shapes.EXIT_FAILURE)
    client = _Client(conn, out)
    try:
        refused = _other_settings(conn, target, parsed.config or env.get("EXECUTOR_CONFIG"), env)
        if refused is not None:
            return out.fail(refused, shapes.EXIT_USAGE)
        return _COMMANDS[parsed.command](client, parsed)
    except Usage as exc:
        return out.fail(str(exc), shapes.EXIT_USAGE)
    except ServiceError as exc:
        if exc.status == 404 and parsed.command[0] == "output" and not target.explicit:
            return None  # the session is gone: its artifacts are still on this host, read in-process
        return out.fail(str(exc), exc.code)
    except NotYours as exc:
        return out.fail(str(exc), shapes.EXIT_USAGE)
    except Unreachable as exc:
        return out.fail(str(exc), shapes.EXIT_FAILURE)
    except KeyboardInterrupt:
        return out.fail("interrupted", shapes.EXIT_INTERRUPTED, "cancelled")
    except OutputFailed as exc:
        if not exc.quiet:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.write(f"error: {exc.message}\n")
                sys.stderr.flush()
        return exc.code
    except BrokenPipeError:
        return shapes.EXIT_PIPE
    except NotText as exc:
        # An argument with bytes that are not UTF-8 (Python holds them as lone surrogates), on its way to the
        # service: bad input, as in-process.
        return out.fail(str(exc), shapes.EXIT_USAGE)
    except Exception as exc:
        # Nothing leaves as a traceback: an answer this client cannot read (a service of another version, a proxy
        # in the way) or a bug here is the executor failing, said in one line.
        detail = " ".join(str(exc).split())[:300]
        return out.fail(
            f"internal error ({type(exc).__name__}{': ' + detail if detail else ''}) talking to the service at "
            f"{target.label}; check that it runs this executor's version, and report it if so",
            shapes.EXIT_FAILURE,
        )
    finally:
        conn.close()


def _other_settings(conn: Connection, target: Target, config: str | None, environ: Mapping[str, str]) -> str | None:
    """Why the service must not run this line: the caller gave a settings file (``--config``, ``EXECUTOR_CONFIG``)
    that is not the one the service runs with, or ``EXECUTOR_*`` settings in its environment that the service's
    environment does not hold alike. Settings apply where a command runs, so the service would have run it without
    them (a stricter gate, another policy or profile, a shorter deadline), silently. None: none given, or the same."""
    names = command_settings(environ)
    if not config and not names:
        return None
    mine = None
    if config:
        import hashlib  # only with a settings file

        try:
            with open(config, "rb") as handle:
                mine = hashlib.sha256(handle.read()).hexdigest()
        except OSError as exc:
            return f"cannot read settings file {config}: {exc.strerror or exc}"
    health = conn.call("GET", "/v1/health")
    if not isinstance(health, dict):
        health = {}
    if config and health.get("settings_sha256") != mine:
        runs_with = "another settings file" if health.get("settings_sha256") else "the default settings"
        return (
            f"settings file {config}: the service at {target.label} runs with {runs_with}, and settings apply where "
            f"a command runs, so it would ignore this file; start the service with it (EXECUTOR_CONFIG={config} "
            "executor serve), or stop the service to run in-process"
        )
    if names and health.get("environment_sha256") != environment_digest(environ):
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        return (
            f"{shown}: the service at {target.label} runs with other EXECUTOR_ settings in its environment, and "
            "settings apply where a command runs, so it would ignore these; start the service with them, or unset "
            "them here, or stop the service to run in-process"
        )
    return None


def find_service_quietly(config: str | None, environ: Mapping[str, str]) -> Target | None:
    """The service, or None (a malformed ``EXECUTOR_URL`` counts as one: it is reported by the command)."""
    try:
        return find_service(config, environ)
    except Unreachable:
        return Target(environ.get("EXECUTOR_URL", ""), explicit=True)
