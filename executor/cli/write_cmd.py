"""``executor write [--session ID|NAME] [--profile P] [--image I] PATH [--from FILE|-] [--json]``: write a file.

The content comes from ``--from FILE``, or from stdin (``--from -``, the default). The write is gated on the exact
path and content like any action: when the policy asks and stdin and stderr are terminals (and stdin did not carry
the content), the terminal handler shows the diff and asks; otherwise the ask comes back blocked and nothing is
written. Without ``--session`` the write lands in a throwaway session (useful only to preview a diff); with
``--session NAME`` the session must exist unless the call says ``--create`` (then a missing one is started and left
running), like ``exec``.

Output: the result view (what was written, its size, mode and digest, and the diff) on stdout.

Exit codes: ``0`` written; ``1`` the container refused the write (a missing folder, a read-only file system, no
space, ...), nothing written; ``2`` bad input (a refused path, content over ``write.max_bytes``, a symlink on the
path, an unreadable ``--from`` file, an unknown session); ``75`` blocked; ``77`` denied or declined; ``125``
executor failure.

``--json`` prints ``{"outcome": "completed" | "blocked" | "denied" | "error", "exit_code": int, "path": str,
"artifact_id": str|null, "action_id": str|null, "text": str, "write": {"path", "created", "state": {...}, ...}|null,
"session": SESSION}`` (``executor.cli.shapes``); ``write`` is the write tool's result once the file was written.
Failures before a result: ``{"outcome": "error", "error": MESSAGE, "exit_code": 2 | 125}``.
"""

from __future__ import annotations

from typing import Any

import typer

from executor.cli import shapes
from executor.cli._common import emit, state
from executor.cli.exec_cmd import CliSession, interactive_handler, read_input, run_cli, session_dict
from executor.session import SessionAPI, ToolResult

__all__ = ["write_command"]


def write_command(
    ctx: typer.Context,
    path: str = typer.Argument(..., help="The file to create or replace (relative paths are in the workspace)."),
    source: str = typer.Option("-", "--from", help="Read the content from this file, or - for stdin (default)."),
    session: str | None = typer.Option(
        None, "--session", help="Session id or name (must exist unless --create); else a throwaway session."
    ),
    create: bool = typer.Option(False, "--create", help="Start the --session NAME if it does not exist."),
    profile: str | None = typer.Option(None, "--profile", help="Profile of a session started here."),
    image: str | None = typer.Option(None, "--image", help="Image of a session started here."),
) -> None:
    """Create or replace a file in a session; print the result and its diff."""
    st = state(ctx)
    json_mode = st.json
    settings = st.settings()
    content = read_input(
        source, option="--from", json_mode=json_mode, limit=settings.write.max_bytes, setting="write.max_bytes"
    )
    where = CliSession(json_mode=json_mode, session=session, create=create, profile=profile, image=image)
    seen: list[dict[str, Any]] = []

    async def job(s: SessionAPI) -> ToolResult:
        seen.append(session_dict(s))
        return await s.write_file(path, content)

    result = run_cli(settings, where, job, handler=interactive_handler(stdin_used=source == "-"))
    code = shapes.write_exit_code(result.outcome)
    data = shapes.write_json(result.model_dump(mode="json"), code=code, path=path, session=seen[0])
    emit(data, result.text, json_mode=json_mode)
    raise typer.Exit(code)
