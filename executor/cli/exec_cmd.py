"""``executor exec [--session ID|NAME] [options] [--json] -- COMMAND...``: run one command in a sandbox session.

Without ``--session`` the command runs in a throwaway session (started, then removed). With ``--session NAME`` it
runs in that session, which must exist (``executor session start --name NAME``) unless the call says ``--create``:
then a missing one is started under that name and left running (``executor session stop NAME`` removes it); a
mistyped name never starts a container. ``COMMAND`` is one bash script (``-- 'make && make test'``), or, given as
several words, an argv that is shell-quoted word by word (``-- ls "my file"``).

Output, like ``docker exec``: the command's raw stdout and stderr go to this process's stdout and stderr as they
arrive, byte for byte, and the process exits with the command's status. When the executor ends the call itself
(blocked, denied, timeout, an error, interrupted) the reason is one line on stderr (``executor: OUTCOME: ...``).
``--view`` prints the presented view instead (bounded, sanitized, with the artifact id to recover the whole output
from); ``--json`` prints one object (below). Both paths behave the same: over a running service (the thin client,
:mod:`executor.cli.thin`) and in-process.

Exit codes:

* the command's own status: ``0``, ``1``..``255``, ``128+N`` when signal N ended it (``137`` for the OOM killer);
* ``2``: bad input (an unknown profile, image or session, a session id of no session, a ``--cwd`` that does not
  exist in the session, a bad session name, a bad ``--env``, invalid UTF-8 in the command or ``--env``, a timeout
  above the cap, an unreadable ``--stdin`` file or one over ``bash.max_stdin_bytes``);
* ``75``: blocked: the policy asks about the command and nobody can answer (no terminal); nothing ran;
* ``77``: denied by the policy or the judge, or the approval was declined; nothing ran;
* ``124``: the command hit ``--timeout-ms`` (its whole process group was killed);
* ``125``: the executor failed (engine down, sandbox lost, no space left in the home, a damaged store, the sandbox
  unresponsive: outcome ``"unresponsive"``, the session is then unhealthy);
* ``130``: interrupted (Ctrl-C); the command's process group is killed.

``--json`` prints one object, whatever happened::

    {"outcome": "completed" | "failed" | "timeout" | "cancelled" | "blocked" | "denied" | "error" | "unresponsive",
     "exit_code": int,               # this process's exit status (the table above)
     "command_exit_code": int|null,  # the command's shell-style status when it ran (128+N for a signal)
     "artifact_id": str|null,        # every stream kept whole: `executor output read|search ID`
     "action_id": str|null,
     "text": str,                    # the presented view, as printed without --json
     "run": {"cause", "exit_code", "signal", "duration_ms", "cpu_ms", "max_rss_kb", "stream_bytes",
             "orphans_left", "orphans_killed", "orphans_left_total", "orphans_killed_total", "drain_cut"} | null,
     "stdout": str,                  # the command's raw stdout (not sanitized; UTF-8, an invalid byte as U+FFFD),
                                     # its first service.result_stream_max_bytes bytes
     "stdout_whole": bool,           # whether "stdout" is the whole stream (else read the artifact)
     "stderr": str, "stderr_whole": bool,
     "session": SESSION|null}        # {"id", "name", "image", "profile", "state", "created_at", "owner",
                                     #  "idle_limit_s", "idle_s"} (null where unknown; executor.cli.shapes)

``outcome`` tells a timeout (``"timeout"``, exit 124) from a command that itself exits 124 (``"failed"``, exit
124). When the executor fails before a result exists, the object is ``{"outcome": "error", "error": MESSAGE,
"exit_code": 2 | 125}``.

This module also holds the session plumbing shared by ``write``, ``bg`` and ``output``.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final, TypeVar

import trio
import typer

from executor.artifacts import tee_captures
from executor.cli import shapes
from executor.cli._common import (
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    emit,
    fail,
    progress,
    state,
)
from executor.cli.shapes import missing_session_message
from executor.cli.streams import OutputFailed, read_capped, silence
from executor.config import Settings
from executor.errors import SessionNotFound, SessionNotRunning
from executor.gate.approvals import ApprovalHandler, TerminalApprovalHandler
from executor.gate.judge import api_key_from
from executor.ids import is_session_id, validate_session_name
from executor.session import ExecutorAPI, FocusMode, SessionAPI, ToolResult, open_executor

__all__ = [
    "EXIT_INTERRUPTED",
    "CliSession",
    "RawTee",
    "exec_command",
    "exit_code_of",
    "interactive_handler",
    "reason_line",
    "run_cli",
    "session_dict",
    "session_scope",
]

_FOCUS_MODES: Final[tuple[FocusMode, ...]] = ("off", "shadow", "on")

T = TypeVar("T")


@dataclass(frozen=True)
class CliSession:
    """Which session a command runs in, as the options gave it."""

    json_mode: bool
    """Quiet progress, one JSON object on stdout."""
    session: str | None = None
    """A session id or name; None means a throwaway session."""
    create: bool = True
    """Start a named session that does not exist yet (``exec``, ``write``, ``bg start``)."""
    can_create: bool = True
    """The command takes ``--create`` (``cp`` does not): a missing session's message offers it only then."""
    profile: str | None = None
    """Profile of a session started here."""
    image: str | None = None
    """Image override of a session started here."""


def session_dict(session: SessionAPI) -> dict[str, Any]:
    """The session a command ran in, as a plain dict for :func:`executor.cli.shapes.session_json`."""
    info = getattr(session, "info", None)
    if info is None:
        return {"id": session.id, "name": session.name, "owner": session.owner}
    data: dict[str, Any] = info.model_dump(mode="json")
    return data


def interactive_handler(*, stdin_used: bool = False) -> ApprovalHandler | None:
    """The terminal approval handler when a person can answer (stdin and stderr are terminals), else None.

    Args:
        stdin_used: stdin already carried the command's input or the file's content, so it cannot carry an answer.
    """
    if stdin_used or not (sys.stdin.isatty() and sys.stderr.isatty()):
        return None
    return TerminalApprovalHandler()


@asynccontextmanager
async def session_scope(ex: ExecutorAPI, where: CliSession) -> AsyncIterator[SessionAPI]:
    """Open a throwaway session (removed on exit) or attach to a named one (left running), narrating on a terminal.

    Raises:
        SessionNotFound: ``where.create`` is False and there is no such running session.
        ConfigError, ImageError, AgentError, EngineError: a session could not start.
    """
    quiet = where.json_mode or not sys.stderr.isatty()
    if where.session is None:
        progress("starting a throwaway session", json_mode=quiet)
        async with ex.open_session(profile=where.profile, image=where.image) as session:
            yield session
        return
    if not is_session_id(where.session):
        validate_session_name(where.session)  # a malformed name says so (exit 2), whether or not it would be created
    if where.create:
        progress(f"attaching to session {where.session} (starting it if needed)", json_mode=quiet)
    entered = False
    try:
        async with ex.attach_session(
            where.session, create=where.create, profile=where.profile, image=where.image
        ) as session:
            entered = True
            yield session
    except SessionNotFound as exc:
        if entered or where.create or is_session_id(where.session) or isinstance(exc, SessionNotRunning):
            raise
        # A mistyped name must not start a container: say how to make one on purpose.
        raise SessionNotFound(missing_session_message(where.session, can_create=where.can_create)) from exc


def run_cli(
    settings: Settings,
    where: CliSession,
    job: Callable[[SessionAPI], Awaitable[T]],
    *,
    handler: ApprovalHandler | None,
) -> T:
    """Run ``job`` in the session ``where`` names; what it raises is mapped to an exit code by the CLI's one
    wrapper (:class:`executor.cli._common.GuardedGroup`).

    The entry point reads the judge's key from the environment here, and only the variable the settings name.
    """

    async def main() -> T:
        api_key = api_key_from(settings.gate.judge, os.environ)
        async with (
            open_executor(settings, approval_handler=handler, api_key=api_key, surface="cli") as ex,
            session_scope(ex, where) as session,
        ):
            return await job(session)

    return trio.run(main)


def exit_code_of(result: ToolResult) -> int:
    """This process's exit status for a tool result (see the module docstring)."""
    return shapes.exit_code_for(result.outcome, result.exit_code)


def command_text(words: Sequence[str]) -> str:
    """One word is a bash script as is; several words are an argv, quoted word by word."""
    if len(words) == 1:
        return words[0]
    return shlex.join(words)


def parse_env(entries: Sequence[str], *, json_mode: bool) -> dict[str, str]:
    """``K=V`` entries as a mapping; exit 2 on an entry without ``=`` or with an empty key."""
    env: dict[str, str] = {}
    for entry in entries:
        key, sep, value = entry.partition("=")
        if not sep or not key:
            fail(f"--env {entry!r} is not KEY=VALUE", code=EXIT_USAGE, json_mode=json_mode)
        env[key] = value
    return env


def read_input(source: str, *, option: str, json_mode: bool, limit: int, setting: str) -> bytes:
    """The bytes of a file, or of stdin for ``-``, reading at most ``limit`` bytes (then exit 2, naming ``setting``).

    Exit 2 when the file cannot be read or holds more than ``limit`` bytes: reading stops at the cap, so an endless
    source (``/dev/zero``, a pipe that never closes its end) cannot exhaust memory.
    """
    try:
        if source == "-":
            data = read_capped(sys.stdin.buffer, limit)
        else:
            with Path(source).open("rb") as file:
                data = read_capped(file, limit)
    except OSError as exc:
        fail(f"{option} {source}: {exc.strerror or exc}", code=EXIT_USAGE, json_mode=json_mode)
    if len(data) > limit:
        fail(
            f"{option} {source}: more than {limit} bytes, the limit ({setting}); pass a smaller input",
            code=EXIT_USAGE,
            json_mode=json_mode,
        )
    return data


class RawTee:
    """The command's raw output as it arrives: written through to this process's stdout and stderr (``live``), and
    its first ``limit`` bytes per stream kept for ``--json``. A capture tee (it must not raise): when stdout cannot
    be written (its reader went away, ``| head``; a full disk) it records why in :attr:`failed` and calls
    :attr:`on_failed` (the call stops its command, as docker exec does); a failing stderr is only silenced."""

    def __init__(self, *, live: bool, limit: int) -> None:
        self._live = live
        self._limit = limit
        self._kept: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        self._total: dict[str, int] = {"stdout": 0, "stderr": 0}
        self._outs: dict[str, BinaryIO] = {}
        for name, stream in (("stdout", sys.stdout), ("stderr", sys.stderr)):
            if stream is not None:  # a closed descriptor (``>&-``) leaves Python none
                self._outs[name] = stream.buffer
        self.failed: OutputFailed | None = None
        """Why stdout could not be written, once it could not."""
        self.on_failed: Callable[[], None] | None = None

    def __call__(self, stream: str, data: bytes) -> None:
        kept = self._kept.get(stream)
        if kept is None:
            return
        self._total[stream] += len(data)
        room = self._limit - len(kept)
        if room > 0:
            kept += data[:room]
        out = self._outs.get(stream) if self._live else None
        if out is not None:
            try:
                out.write(data)
                out.flush()
            except (OSError, ValueError) as exc:
                del self._outs[stream]
                silence(out)
                if stream == "stdout" and self.failed is None:
                    self.failed = OutputFailed(exc)
                    if self.on_failed is not None:
                        self.on_failed()

    def get(self, stream: str) -> tuple[bytes, bool]:
        """The kept bytes and whether they are the whole stream."""
        kept = self._kept[stream]
        return bytes(kept), len(kept) == self._total[stream]


def reason_line(result: ToolResult) -> str:
    """The one stderr line saying why the executor ended a call (see :func:`shapes.reason_line`)."""
    return shapes.reason_line(result.outcome, result.text)


def exec_command(
    ctx: typer.Context,
    command: list[str] = typer.Argument(..., metavar="-- COMMAND...", help="A bash script, or an argv to quote."),
    session: str | None = typer.Option(
        None, "--session", help="Session id or name (must exist unless --create); else a throwaway session."
    ),
    create: bool = typer.Option(False, "--create", help="Start the --session NAME if it does not exist."),
    profile: str | None = typer.Option(None, "--profile", help="Profile of a session started here."),
    image: str | None = typer.Option(None, "--image", help="Image of a session started here."),
    timeout_ms: int | None = typer.Option(None, "--timeout-ms", help="Deadline (default bash.timeout_ms)."),
    focus_mode: str | None = typer.Option(None, "--focus-mode", help="off, shadow or on (default focus.mode)."),
    intent: str | None = typer.Option(None, "--intent", help="What you are looking for in the output (focus)."),
    cwd: str | None = typer.Option(None, "--cwd", help="Working directory (default: the workspace)."),
    env: list[str] = typer.Option([], "--env", help="KEY=VALUE, repeatable."),
    stdin: str | None = typer.Option(None, "--stdin", help="Feed this file (or - for stdin) to the command."),
    view: bool = typer.Option(False, "--view", help="Print the model's bounded view instead of the raw streams."),
) -> None:
    """Run a command in a sandbox session; stream its output live; exit with its status."""
    st = state(ctx)
    json_mode = st.json
    settings = st.settings()
    words = list(command)
    if not words or not "".join(words).strip():
        fail("no command given: executor exec -- COMMAND...", code=EXIT_USAGE, json_mode=json_mode)
    checked_focus = None
    if focus_mode is not None:
        checked_focus = next((mode for mode in _FOCUS_MODES if mode == focus_mode), None)
        if checked_focus is None:
            fail(f"--focus-mode {focus_mode!r} is not one of: off, shadow, on", code=EXIT_USAGE, json_mode=json_mode)
    env_map = parse_env(env, json_mode=json_mode)
    stdin_bytes = (
        None
        if stdin is None
        else read_input(
            stdin,
            option="--stdin",
            json_mode=json_mode,
            limit=settings.bash.max_stdin_bytes,
            setting="bash.max_stdin_bytes",
        )
    )
    live = not (view or json_mode)
    # Live, stderr is the command's own (like docker exec): no narration is mixed into it.
    where = CliSession(json_mode=json_mode or live, session=session, create=create, profile=profile, image=image)
    script = command_text(words)
    raw = RawTee(live=live, limit=settings.service.result_stream_max_bytes)
    seen: list[dict[str, Any]] = []

    async def job(s: SessionAPI) -> ToolResult | None:
        seen.append(session_dict(s))
        with trio.CancelScope() as scope, tee_captures(raw, kind="bash"):
            raw.on_failed = scope.cancel  # nowhere to write the output: the command is stopped
            return await s.bash(
                script,
                cwd=cwd,
                env=env_map or None,
                stdin=stdin_bytes,
                timeout_ms=timeout_ms,
                focus_mode=checked_focus,
                intent=intent,
            )
        return None

    ran = run_cli(settings, where, job, handler=interactive_handler(stdin_used=stdin == "-"))
    if raw.failed is not None:
        raise raw.failed  # the CLI's one wrapper reports it (141 quietly, else 125 with its message)
    assert ran is not None  # only a failed write cancels the call
    result = ran
    code = exit_code_of(result)
    if json_mode:
        stdout, stdout_whole = raw.get("stdout")
        stderr, stderr_whole = raw.get("stderr")
        data = shapes.exec_json(
            result.model_dump(mode="json"),
            code=code,
            session=seen[0] if seen else None,
            stdout=stdout,
            stdout_whole=stdout_whole,
            stderr=stderr,
            stderr_whole=stderr_whole,
        )
        emit(data, "", json_mode=True)
    elif view:
        emit({}, result.text, json_mode=False)
    elif result.outcome not in ("completed", "failed"):
        sys.stderr.write(reason_line(result) + "\n")
        sys.stderr.flush()
    raise typer.Exit(code)
