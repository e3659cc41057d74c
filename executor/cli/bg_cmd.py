"""``executor bg start|read|stop|ls``: background tasks in a named session.

``executor bg start --session S [--create] [--profile P] [--image I] [--cwd DIR] [--env K=V ...] -- COMMAND...``
``executor bg read TASK --session S [--stream stdout|stderr] [--offset N] [--max-bytes M]``
``executor bg stop TASK --session S``
``executor bg ls --session S``

A background task outlives the command that started it, so it needs a session that does too: ``--session`` is
required, and the session must exist (``start --create`` starts a missing named one and leaves it running). A task
is gated like ``exec`` (no deadline); its output is read by whole-stream byte offsets (``read`` prints where the
next read starts), and its streams are mirrored into an artifact (``start`` gives its id: ``executor output read
ID`` pages it, ``executor output search ID`` searches it). ``COMMAND`` is one bash script, or several words quoted
as an argv (see ``executor exec``).

Exit codes: ``0`` done; ``2`` bad input (no ``--session``, unknown session or task, too many tasks already
running); ``75`` blocked and ``77`` denied (``start``: nothing started); ``125`` executor failure.

``--json`` shapes (one object each; :mod:`executor.cli.shapes`, the same over a running service):

* ``start``: ``{"outcome": "completed" | "blocked" | "denied", "exit_code", "task_id": str|null, "artifact_id",
  "action_id", "text", "session"}``;
* ``read``: ``{"outcome": "completed", "exit_code": 0, "task_id", "stream", "offset", "next_offset", "end",
  "dropped", "running", "run": {...}|null, "text", "session"}``: ``offset``..``next_offset`` are the bytes shown,
  ``end`` the bytes the stream has so far, ``dropped`` the first byte still held (the agent's ring buffer drops
  older bytes), ``run`` how the task ended once it has;
* ``stop``: ``{"outcome": "completed", "exit_code": 0, "task": TASK, "text", "session"}``;
* ``ls``: ``{"outcome": "completed", "exit_code": 0, "tasks": [TASK, ...], "session"}``;

``TASK`` is ``{"task_id", "command", "running", "owner", "artifact_id", "result": {...}|null}`` and ``session`` is
``SESSION`` (see ``executor session``). Failures: ``{"outcome": "error", "error": MESSAGE, "exit_code": 2 | 125}``.
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Awaitable, Callable
from typing import Any, Final, Literal

import trio
import typer

from executor.cli import shapes
from executor.cli._common import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    WORDS_CONTEXT,
    emit,
    fail,
    state,
)
from executor.cli.exec_cmd import (
    CliSession,
    command_text,
    exit_code_of,
    interactive_handler,
    parse_env,
    run_cli,
    session_dict,
)
from executor.cli.streams import OutputFailed, silence
from executor.models import RunResult
from executor.session import SessionAPI, TaskInfo, ToolResult

__all__ = ["app"]

app = typer.Typer(help="Background tasks in a named session: start, read, stop, list.", no_args_is_help=True)

_FOLLOW_POLL_S: Final = 0.1
"""How often a follower asks for new bytes while the task is quiet."""

_SESSION_HELP = "Session id or name (required: a task outlives this command)."


def _need_session(session: str | None, *, json_mode: bool) -> str:
    if session is None:
        fail(
            "background tasks need a session that outlives this command: pass --session NAME "
            "(with --create on `bg start` to start a missing one)",
            code=EXIT_USAGE,
            json_mode=json_mode,
        )
    return session


@app.command("start", context_settings=WORDS_CONTEXT)
def start(
    ctx: typer.Context,
    command: list[str] = typer.Argument(..., metavar="-- COMMAND...", help="A bash script, or an argv to quote."),
    session: str | None = typer.Option(None, "--session", help=_SESSION_HELP),
    create: bool = typer.Option(False, "--create", help="Start the --session NAME if it does not exist."),
    profile: str | None = typer.Option(None, "--profile", help="Profile of a session started here."),
    image: str | None = typer.Option(None, "--image", help="Image of a session started here."),
    cwd: str | None = typer.Option(None, "--cwd", help="Working directory (default: the workspace)."),
    env: list[str] = typer.Option([], "--env", help="KEY=VALUE, repeatable."),
) -> None:
    """Start a command in the background and print its task id at once."""
    st = state(ctx)
    json_mode = st.json
    named = _need_session(session, json_mode=json_mode)
    settings = st.settings()
    if not command or not "".join(command).strip():
        fail("no command given: executor bg start --session S -- COMMAND...", code=EXIT_USAGE, json_mode=json_mode)
    env_map = parse_env(env, json_mode=json_mode)
    script = command_text(command)
    where = CliSession(json_mode=json_mode, session=named, create=create, profile=profile, image=image)
    seen: list[dict[str, Any]] = []

    async def job(s: SessionAPI) -> ToolResult:
        seen.append(session_dict(s))
        return await s.start_task(script, cwd=cwd, env=env_map or None)

    result = run_cli(settings, where, job, handler=interactive_handler())
    code = exit_code_of(result)
    emit(
        shapes.bg_start_json(result.model_dump(mode="json"), code=code, session=seen[0]),
        result.text,
        json_mode=json_mode,
    )
    raise typer.Exit(code)


@app.command("read")
def read(
    ctx: typer.Context,
    task_id: str = typer.Argument(..., metavar="TASK", help="A task id from `bg start` or `bg ls`."),
    session: str | None = typer.Option(None, "--session", help=_SESSION_HELP),
    stream: str = typer.Option("stdout", "--stream", help="stdout or stderr."),
    offset: int = typer.Option(0, "--offset", help="Whole-stream byte offset to read from (a read's next_offset)."),
    max_bytes: int = typer.Option(65_536, "--max-bytes", help="Most bytes to read."),
    follow: bool = typer.Option(
        False, "--follow", "-f", help="Print the stream raw as it comes until the task ends; exit with its code."
    ),
) -> None:
    """Print a task's output from a byte offset, and where the next read starts (or follow it to its end)."""
    st = state(ctx)
    json_mode = st.json
    named = _need_session(session, json_mode=json_mode)
    if follow and json_mode:
        fail("--follow prints the raw stream; it cannot be combined with --json", code=EXIT_USAGE, json_mode=True)
    settings = st.settings()
    checked: Literal["stdout", "stderr"]
    if stream == "stdout":
        checked = "stdout"
    elif stream == "stderr":
        checked = "stderr"
    else:
        fail(f"--stream {stream!r} is not one of: stdout, stderr", code=EXIT_USAGE, json_mode=json_mode)
    if offset < 0 or not 1 <= max_bytes <= shapes.MAX_TASK_PAGE_BYTES:
        fail(
            f"--offset must be at least 0 and --max-bytes between 1 and {shapes.MAX_TASK_PAGE_BYTES} "
            "(--offset continues)",
            code=EXIT_USAGE,
            json_mode=json_mode,
        )
    where = CliSession(json_mode=json_mode, session=named, create=False)
    if follow:
        # Pages no longer than the display budget, so that a page's text is all of its bytes.
        page = min(max_bytes, settings.artifacts.display_max_chars)
        try:
            ended = run_cli(settings, where, _follower(task_id, checked, offset, page), handler=None)
        except KeyboardInterrupt:
            sys.stderr.write(f"stopped following; task {task_id} goes on (executor bg stop {task_id} stops it)\n")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        raise typer.Exit(_task_code(ended))
    seen: list[dict[str, Any]] = []

    async def job(s: SessionAPI) -> ToolResult:
        seen.append(session_dict(s))
        return await s.read_task(task_id, stream=checked, offset=offset, max_bytes=max_bytes)

    result = run_cli(settings, where, job, handler=None)
    emit(shapes.bg_read_json(result.model_dump(mode="json"), session=seen[0]), result.text, json_mode=json_mode)


def _task_code(result: RunResult | None) -> int:
    if result is None:
        return EXIT_FAILURE
    if result.cause == "timeout":
        return EXIT_TIMEOUT
    return result.display_code


def _follower(
    task_id: str, stream: Literal["stdout", "stderr"], offset: int, max_bytes: int
) -> Callable[[SessionAPI], Awaitable[RunResult | None]]:
    """A job that prints ``stream`` raw from ``offset`` as it grows, and returns how the task ended."""

    async def follow(s: SessionAPI) -> RunResult | None:
        if sys.stdout is None:
            raise OutputFailed(OSError(errno.EBADF, "stdout is closed"))
        out = sys.stdout.buffer
        at = offset
        while True:
            page = await s.read_task_bytes(task_id, stream=stream, offset=at, max_bytes=max_bytes)
            if page.data:
                try:
                    out.write(page.data)
                    out.flush()
                except (OSError, ValueError) as exc:
                    silence(out)
                    raise OutputFailed(exc) from None  # following stops; the task goes on
            if page.next_offset > at:
                at = page.next_offset
                continue
            if not page.running and at >= page.end:
                return page.run
            await trio.sleep(_FOLLOW_POLL_S)

    return follow


@app.command("stop")
def stop(
    ctx: typer.Context,
    task_id: str = typer.Argument(..., metavar="TASK", help="A task id from `bg start` or `bg ls`."),
    session: str | None = typer.Option(None, "--session", help=_SESSION_HELP),
) -> None:
    """Kill a task's whole process group (TERM, grace, KILL) and say how it ended."""
    st = state(ctx)
    json_mode = st.json
    named = _need_session(session, json_mode=json_mode)
    settings = st.settings()
    where = CliSession(json_mode=json_mode, session=named, create=False)
    seen: list[dict[str, Any]] = []

    async def job(s: SessionAPI) -> TaskInfo:
        seen.append(session_dict(s))
        return await s.stop_task(task_id)

    info = run_cli(settings, where, job, handler=None).model_dump(mode="json")
    text = f"stopped task {info['task_id']}: {shapes.ended_text(info.get('result'))}"
    emit(shapes.bg_stop_json(info, text=text, session=seen[0]), text, json_mode=json_mode)


@app.command("ls")
def ls(
    ctx: typer.Context,
    session: str | None = typer.Option(None, "--session", help=_SESSION_HELP),
) -> None:
    """List a session's background tasks."""
    st = state(ctx)
    json_mode = st.json
    named = _need_session(session, json_mode=json_mode)
    settings = st.settings()
    where = CliSession(json_mode=json_mode, session=named, create=False)
    seen: list[dict[str, Any]] = []

    async def job(s: SessionAPI) -> list[TaskInfo]:
        seen.append(session_dict(s))
        return await s.list_tasks()

    tasks = [task.model_dump(mode="json") for task in run_cli(settings, where, job, handler=None)]
    # Commands are the caller's own text, shown on a terminal: the table makes control characters visible.
    emit(shapes.bg_ls_json(tasks, session=seen[0]), shapes.task_table(tasks), json_mode=json_mode)
