"""``executor output read|search ID``: recover a stored stream page by page, or search it.

``executor output read ID [--session S] [--stream S] [--start-line N] [--line-count M] [--start-byte-in-line B]``
``executor output search ID --pattern P [--session S] [--stream S] [--limit N] [--start-line N]``

Artifacts live on the host, so these commands read the artifact store directly: they work whether the session's
container is running, stopped or removed, and they need no Docker engine (unless ``--session`` is given as a name,
which is resolved through the engine). The artifact id names its session (``s-0123456789ab.a3``); ``--session``
is only a cross-check, and an id of another session is "not found". Pages go through the same pipeline as the
``read_output``/``search_output`` tools (``executor.session.open_output_reader``): rendered with the CLI's hints,
judged by the sanitize reflex and sanitized (escapes, invisible characters, instruction-like lines marked,
credentials redacted per ``focus.redact_credentials``), the judgment journaled in the session's journal.

``search`` without ``--stream`` searches every stream of the artifact in turn (stdout, then stderr; for an artifact
with neither, its own stream), each up to ``--limit`` matches, and prints one page per stream.

Exit codes: ``0`` a page (``read``: even an empty one; ``search``: at least one match); ``1`` ``search`` found no
match (as grep does); ``2`` bad input (unknown, malformed, foreign or evicted id, unknown
stream, range out of bounds, a bad or too slow pattern, an unknown session name); ``125`` the store or the engine
failed.

``--json`` prints ``{"outcome": "completed", "exit_code": 0 | 1, "artifact_id", "session", "text", "page"}``
(``session``: ``SESSION``, see ``executor session``, with what the artifact id tells), where ``text`` is the
rendered page as printed without ``--json`` and ``page`` the receipts (``search`` adds ``pages``, one per stream
searched, ``page`` being the first, and ``matches``, their total):

* read: ``{"artifact_id", "stream", "start_line", "end_line", "start_byte_in_line", "end_byte_in_line",
  "next_start_line", "next_start_byte_in_line", "gap_before", "past_end", "complete", ...}`` (the page without its
  bytes);
* search: ``{"artifact_id", "stream", "pattern", "start_line", "matches": [{"line", "spans", "truncated",
  "preview_start"}], "unscannable": [{"line", "reason", "bytes"}], "scanned_lines", "scanned_chars",
  "page_bounded", "scan_bounded", "next_start_line", "complete", ...}`` (match text only in ``text``, sanitized).

Failures: ``{"outcome": "error", "error": MESSAGE, "exit_code": 2 | 125}``.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio
import typer

from executor.cli import shapes
from executor.cli._common import emit, state
from executor.config import Settings
from executor.errors import SessionNotFound, StreamNotFound
from executor.gate.judge import api_key_from
from executor.ids import is_session_id, parse_artifact_id
from executor.sandbox.base import open_backend
from executor.session import ToolResult, open_output_reader
from executor.session.output import OutputTools

__all__ = ["app"]

app = typer.Typer(help="Recover stored output: read a page, or search a stream.", no_args_is_help=True)


T = TypeVar("T")


async def _session_id(settings: Settings, artifact_id: str, session: str | None) -> str:
    """The session to read: ``--session`` (an id, or a name resolved through the engine), else the id's own."""
    if session is not None:
        if is_session_id(session):
            return session
        async with open_backend(settings) as backend:
            return (await backend.find_session(session)).id
    parsed = parse_artifact_id(artifact_id)
    if parsed is None:
        raise SessionNotFound(
            f"{artifact_id[:80]!r} is not an artifact id; use one from a recovery notice, like 's-0123456789ab.a3'"
        )
    return parsed[0]


def _run(
    ctx: typer.Context,
    artifact_id: str,
    session: str | None,
    job: Callable[[OutputTools], Awaitable[list[ToolResult]]],
    *,
    search: bool = False,
) -> None:
    st = state(ctx)
    json_mode = st.json
    settings = st.settings()

    async def main() -> tuple[str, list[ToolResult]]:
        session_id = await _session_id(settings, artifact_id, session)
        api_key = api_key_from(settings.gate.judge, os.environ)
        async with open_output_reader(settings, session_id, api_key=api_key, surface="cli") as reader:
            return session_id, await job(reader)

    session_id, results = trio.run(main)
    first = results[0].model_dump(mode="json")
    if search:
        first["text"] = "\n".join(result.text.rstrip("\n") for result in results)
    data = shapes.output_json(
        first,
        code=0,
        artifact_id=artifact_id,
        session=shapes.bare_session(session_id),
        pages=[result.data for result in results] if search else None,
    )
    code = shapes.EXIT_NO_MATCH if search and not data["matches"] else 0
    data["exit_code"] = code
    emit(data, str(first["text"]), json_mode=json_mode)
    if code:
        raise typer.Exit(code)


@app.command("read")
def read(
    ctx: typer.Context,
    artifact_id: str = typer.Argument(..., metavar="ID", help="An artifact id (s-0123456789ab.a3)."),
    session: str | None = typer.Option(None, "--session", help="Session id or name (default: the id's own)."),
    stream: str | None = typer.Option(None, "--stream", help="Stream name (default: the artifact's first)."),
    start_line: int = typer.Option(1, "--start-line", help="True line number to start at (1-based)."),
    line_count: int | None = typer.Option(None, "--line-count", help="Most lines (default artifacts.read_page_lines)."),
    start_byte_in_line: int | None = typer.Option(
        None, "--start-byte-in-line", help="Continue inside a line (from a page's next_start_byte_in_line)."
    ),
) -> None:
    """Print one page of a stored stream, with its true line range and where the next page starts."""

    async def job(reader: OutputTools) -> list[ToolResult]:
        page = await reader.read_output(
            artifact_id,
            stream=stream,
            start_line=start_line,
            line_count=line_count,
            start_byte_in_line=start_byte_in_line,
        )
        return [page]

    _run(ctx, artifact_id, session, job)


@app.command("search")
def search(
    ctx: typer.Context,
    artifact_id: str = typer.Argument(..., metavar="ID", help="An artifact id (s-0123456789ab.a3)."),
    pattern: str = typer.Option(..., "--pattern", help="A regular expression, matched line by line."),
    session: str | None = typer.Option(None, "--session", help="Session id or name (default: the id's own)."),
    stream: str | None = typer.Option(None, "--stream", help="Stream name (default: every stream, in turn)."),
    limit: int = typer.Option(20, "--limit", help="Most matches on the page (per stream)."),
    start_line: int = typer.Option(1, "--start-line", help="Resume here (a page's next_start_line)."),
) -> None:
    """Print the matching lines of a stored stream with their true line numbers, and where to resume; exit 1 when
    nothing matches."""

    async def job(reader: OutputTools) -> list[ToolResult]:
        async def one(name: str | None) -> ToolResult:
            return await reader.search_output(
                artifact_id, stream=name, pattern=pattern, limit=limit, start_line=start_line
            )

        if stream is not None:
            return [await one(stream)]
        pages: list[ToolResult] = []
        for name in ("stdout", "stderr"):
            try:
                pages.append(await one(name))
            except StreamNotFound:
                continue
        # Neither stdout nor stderr (a write's artifact keeps "output"): the artifact's own first stream.
        return pages or [await one(None)]

    _run(ctx, artifact_id, session, job, search=True)
