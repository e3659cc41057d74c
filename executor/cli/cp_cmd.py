"""``executor cp [--session ID|NAME] SRC DEST [--json]``: copy files and folders between the host and a session.

One side is ``SESSION:PATH`` (like ``docker cp``; ``:PATH`` takes the session from ``--session``), the other a host
path. ``SRC`` (a file or a folder, recursively) lands inside the folder ``DEST`` under its own name (``DEST`` is
made if missing), both ways: ``executor cp ./src ci:/work`` makes ``/work/src``, ``executor cp ci:/work/out .``
makes ``./out``. Modes are kept (the session's umask applies inside it; the host drops setuid/setgid/sticky and
group/other write bits), symlinks are copied as symlinks, and ownership is never taken from the archive. A relative
``PATH`` is inside the session's workspace. The session must exist (``executor session start`` or ``exec
--session NAME``).

Inside the session the copy is one gated command, like the service's upload and download: going in, the host reads
the archive once and sends its entries as they will be written (an entry stream, ``canonical_entries``) to the
agent's ``fs-unpack``, which writes exactly those and follows no symlink (the gate judges those entries, bound to
the stream's hash); coming out, ``tar -c`` writes the archive to stdout. On the host the archive that
comes out of the sandbox is checked before anything is written: absolute paths, ``..``, links that leave ``DEST``,
and devices are refused and nothing is written.

Bounds: an archive going in is at most ``bash.max_stdin_bytes``; one coming out at most
``service.download_max_bytes``. Both go through a temporary file, never whole in memory.

Exit codes: ``0`` copied; ``1`` the copy failed in the session (``fs-unpack`` refused an entry, or ``tar -c`` found
no such path; the message says why); ``2`` bad input (a missing host path, a bad ``SESSION:PATH``, both or neither
side in a session, an unknown session, an archive over its bound, an unsafe archive from the session); ``75``
blocked; ``77`` denied; ``125`` executor failure.

``--json`` prints ``{"outcome": "completed" | "failed" | "blocked" | "denied" | ..., "exit_code", "direction":
"to_session" | "from_session", "source", "dest", "files", "entries", "bytes", "archive_bytes", "artifact_id",
"action_id", "text", "session": SESSION}`` (see ``executor session``); ``files``/``bytes`` count regular files and
their content, ``entries`` every member (folders and symlinks too). Failures before a result: ``{"outcome":
"error", "error", "exit_code"}``.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import IO, Any

import trio
import typer

from executor.artifacts import tee_captures
from executor.cli._common import EXIT_USAGE, emit, fail, state
from executor.cli.exec_cmd import CliSession, interactive_handler, run_cli, session_dict
from executor.cli.thin.cp import CpUsage, Side, code_of, copied_text, cp_json, failed_text, parse_side, plan
from executor.models import StdinFile
from executor.session import SessionAPI, ToolResult
from executor.tools.archive import (
    ArchiveStats,
    TarPacker,
    archive_bounds,
    download_too_large,
    extract_tar,
    is_contents,
    pack_command,
    unpack_command,
    write_entry_stream,
)

__all__ = ["cp_command", "parse_side"]


def _plan(source: str, dest: str, session: str | None, *, json_mode: bool) -> tuple[Side, Side, str]:
    try:
        return plan(source, dest, session)
    except CpUsage as exc:
        fail(str(exc), code=EXIT_USAGE, json_mode=json_mode)


def cp_command(
    ctx: typer.Context,
    source: str = typer.Argument(..., metavar="SRC", help="A host path, or SESSION:PATH."),
    dest: str = typer.Argument(..., metavar="DEST", help="The folder to copy into: a host path, or SESSION:PATH."),
    session: str | None = typer.Option(None, "--session", help="Session id or name for a :PATH side."),
) -> None:
    """Copy a file or folder between the host and a session (into the folder DEST)."""
    st = state(ctx)
    json_mode = st.json
    src, dst, named = _plan(source, dest, session, json_mode=json_mode)
    settings = st.settings()
    where = CliSession(json_mode=json_mode, session=named, create=False, can_create=False)
    handler = interactive_handler()
    seen: list[dict[str, Any]] = []
    stats = ArchiveStats()
    archive_bytes = 0

    if not src.remote:
        packer = TarPacker(
            Path(src.path),
            contents=is_contents(src.path),
            limit=settings.bash.max_stdin_bytes,
            setting="bash.max_stdin_bytes",
        )
        # The gate binds the command to its stdin's hash, so the archive is whole before it runs: in a private
        # file, made an entry stream there and streamed to fs-unpack's stdin (never whole in memory).
        with contextlib.ExitStack() as stack, tempfile.NamedTemporaryFile(prefix="cp-") as archive:
            for chunk in packer:
                archive.write(chunk)
            archive.flush()
            stats, archive_bytes = packer.stats, packer.size
            # The session is sent the archive's entries as they will be written: the gate judges exactly those and
            # the agent writes those and nothing else.
            entries = stack.enter_context(tempfile.NamedTemporaryFile(prefix="cp-entries-"))
            write_entry_stream(Path(archive.name), Path(entries.name), bounds=archive_bounds(settings.archive))
            stdin = StdinFile(path=entries.name, size=Path(entries.name).stat().st_size)

            async def upload(s: SessionAPI) -> ToolResult:
                seen.append(session_dict(s))
                return await s.bash(unpack_command(dst.path), stdin=stdin)

            result = run_cli(settings, where, upload, handler=handler)
    else:
        limit = settings.service.download_max_bytes
        with tempfile.TemporaryFile() as spool:
            sink = _Sink(spool, limit)

            async def download(s: SessionAPI) -> ToolResult:
                seen.append(session_dict(s))
                with sink.scope, tee_captures(sink.add, kind="bash"):
                    return await s.bash(pack_command(src.path))
                raise download_too_large(src.path, limit)

            result = run_cli(settings, where, download, handler=handler)
            archive_bytes = sink.size
            if result.outcome == "completed":
                spool.seek(0)
                stats = extract_tar(spool, Path(dst.path))
    code = code_of(result.outcome, result.exit_code)
    into = dst.path if dst.remote else str(Path(dst.path))
    if result.outcome == "completed":
        text = copied_text(stats, into)
    elif result.outcome == "failed":
        text = failed_text(result.stderr.decode("utf-8", "replace"), result.exit_code, result.artifact_id)
    else:
        text = result.text
    data_out = cp_json(
        outcome=result.outcome,
        code=code,
        src=src,
        source=source,
        dest=dest,
        stats=stats,
        archive_bytes=archive_bytes,
        artifact_id=result.artifact_id,
        action_id=result.action_id,
        text=text,
        session=seen[0] if seen else None,
    )
    emit(data_out, text, json_mode=json_mode)
    raise typer.Exit(code)


class _Sink:
    """A capture tee that writes a command's stdout to a file, up to ``limit`` bytes; past it the run is
    cancelled (its process group killed)."""

    def __init__(self, file: IO[bytes], limit: int) -> None:
        self._file = file
        self._limit = limit
        self.size = 0
        self.scope = trio.CancelScope()

    def add(self, stream: str, data: bytes) -> None:
        if stream != "stdout" or self.scope.cancel_called:
            return
        if self.size + len(data) > self._limit:
            self.scope.cancel()
            return
        self._file.write(data)
        self.size += len(data)
