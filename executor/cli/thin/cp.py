"""``executor cp`` over the service (standard library only), and the parsing both paths share.

The copy is the in-process command's (:mod:`executor.cli.cp_cmd`): one side is ``SESSION:PATH``, ``SRC`` lands inside
the folder ``DEST`` under its own name. Over the service a folder goes in as a tar streamed chunked from the packer
(``PUT .../files``; never whole in memory here), and comes out as the service's tar stream (``GET .../files``)
spooled to a temporary file, checked and unpacked (:func:`executor.tools.archive.extract_tar`). An ask is not
answered here: it comes back blocked (exit 75); run without a service to be asked at the terminal.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, NamedTuple

from executor.cli import shapes
from executor.cli.thin.transport import Connection, Response, ServiceError, Unreachable, decode_bytes, segment
from executor.tools.archive import ArchiveStats, TarPacker, download_too_large, extract_tar, is_contents

__all__ = ["CpUsage", "Side", "cp_json", "parse_side", "plan", "run_cp"]

_REMOTE: Final = re.compile(r"^([^/:]*):(.*)$", re.DOTALL)
_CHUNK: Final = 1024 * 1024


class CpUsage(Exception):
    """Bad sides: exit 2 with this message."""


class Side(NamedTuple):
    """One side of a copy: a host path, or a path in a session (``session`` None means ``--session``'s)."""

    path: str
    remote: bool
    session: str | None = None


def parse_side(text: str) -> Side:
    """``SESSION:PATH`` or ``:PATH`` (a session side), else a host path; a host path with a ``:`` before any ``/``
    is written ``./a:b``."""
    match = _REMOTE.match(text)
    if match is None:
        return Side(path=text, remote=False)
    return Side(path=match.group(2), remote=True, session=match.group(1) or None)


def plan(source: str, dest: str, session: str | None) -> tuple[Side, Side, str]:
    """The two sides and the session's id or name.

    Raises:
        CpUsage: both or neither side in a session, no path, no session, two sessions, a missing host source, a
            host destination that is not a folder.
    """
    src, dst = parse_side(source), parse_side(dest)
    if src.remote == dst.remote:
        which = "both are" if src.remote else "neither is"
        raise CpUsage(
            f"one side of a copy is SESSION:PATH and the other a host path; {which} (a host path with a ':' before "
            "any '/' is written ./a:b)"
        )
    remote = src if src.remote else dst
    if not remote.path:
        raise CpUsage(f"no path after the ':' in {source if src.remote else dest!r}")
    if "\0" in remote.path:
        raise CpUsage("a session path cannot hold a NUL byte")
    named = remote.session or session
    if named is None:
        raise CpUsage("which session? write SESSION:PATH, or :PATH with --session")
    if remote.session and session and remote.session != session:
        raise CpUsage(f"--session {session!r} and {remote.session!r}: are two sessions")
    if not src.remote and not os.path.lexists(src.path):
        raise CpUsage(f"no such file or folder on this host: {src.path}")
    if not dst.remote and os.path.exists(dst.path) and not os.path.isdir(dst.path):
        raise CpUsage(f"{dst.path} is not a folder: DEST is the folder SRC is copied into")
    return src, dst, named


def cp_json(
    *,
    outcome: str,
    code: int,
    src: Side,
    source: str,
    dest: str,
    stats: ArchiveStats,
    archive_bytes: int,
    artifact_id: str | None,
    action_id: str | None,
    text: str,
    session: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The one ``--json`` object of ``executor cp`` (both paths)."""
    return {
        "outcome": outcome,
        "exit_code": code,
        "direction": "from_session" if src.remote else "to_session",
        "source": source,
        "dest": dest,
        "files": stats.files,
        "entries": stats.entries,
        "bytes": stats.bytes,
        "archive_bytes": archive_bytes,
        "artifact_id": artifact_id,
        "action_id": action_id,
        "text": text,
        "session": shapes.session_json(session),
    }


def copied_text(stats: ArchiveStats, into: str) -> str:
    """What a successful copy prints."""
    return f"copied {stats.files} file(s), {stats.bytes} bytes ({stats.entries} entries) into {into}"


def failed_text(stderr: str, exit_code: object, artifact_id: object) -> str:
    """What a copy that tar failed prints; the hint reads tar's messages (its stdout is the archive, or nothing)."""
    said = stderr.strip() or f"tar exited {exit_code}"
    return (
        f"the copy failed in the session: {said}\n(tar's messages: executor output read {artifact_id} --stream stderr)"
    )


def code_of(outcome: str, exit_code: int | None) -> int:
    """This process's status for a copy's outcome (tar failing is 1, as cp reports it)."""
    return 1 if outcome == "failed" else shapes.exit_code_for(outcome, exit_code)


def _error(response: Response) -> ServiceError:
    raw = response.read()
    try:
        error = json.loads(raw)["error"]
        return ServiceError(response.status, str(error["type"]), str(error["message"]))
    except (ValueError, KeyError, TypeError):
        return ServiceError(response.status, "ExecutorError", f"the service answered {response.status}: {raw[:200]!r}")


def _stderr_of(result: Mapping[str, Any]) -> str:
    try:
        return decode_bytes(result.get("stderr"), "a result's stderr").decode("utf-8", "replace")
    except ServiceError:
        return ""


def run_cp(conn: Connection, *, source: str, dest: str, session: str | None) -> tuple[dict[str, Any], str, int]:
    """Copy over the service; the ``--json`` object, the text and the exit status.

    Raises:
        CpUsage: bad sides (exit 2).
        ServiceError: the service refused (an unknown session, over a bound, ...).
        Unreachable: the service went away (the message says whether mid-download).
        UnsafeTarget, ContentRejected: the archive from the session was refused, or a host source holds something
            other than files, folders and symlinks (exit 2).
    """
    src, dst, named = plan(source, dest, session)
    files = f"/v1/sessions/{segment(named)}/files"
    stats = ArchiveStats()
    archive_bytes = 0
    if not src.remote:
        packer = TarPacker(Path(src.path), contents=is_contents(src.path))
        response = conn.exchange(
            "PUT",
            files,
            query={"path": dst.path, "approvals": "none"},
            body=iter(packer),
            content_type="application/x-tar",
        )
        if response.status >= 400:
            raise _error(response)
        result: dict[str, Any] = json.loads(response.read())
        stats, archive_bytes = packer.stats, packer.size
    else:
        response = conn.exchange(
            "GET", files, query={"path": src.path, "approvals": "none"}, accept="application/x-tar"
        )
        if response.status == 409:
            result = json.loads(response.read())
        elif response.status >= 400:
            raise _error(response)
        else:
            result = {
                "outcome": "completed",
                "artifact_id": response.getheader("x-executor-artifact") or None,
                "action_id": response.getheader("x-executor-action") or None,
            }
            bound = response.getheader("x-executor-max-bytes") or ""
            with tempfile.TemporaryFile(prefix="executor-cp-") as spool:
                try:
                    while True:
                        chunk = response.read_some(_CHUNK)  # as they come: a cut keeps what came before it
                        if not chunk:
                            break
                        spool.write(chunk)
                        archive_bytes += len(chunk)
                except Unreachable:
                    pass  # a cut: said below
                if not response.done:
                    if bound.isdigit() and archive_bytes >= int(bound):
                        raise download_too_large(src.path, bound)
                    raise Unreachable(
                        f"the download was cut short by the service after {archive_bytes} bytes (the tar failed in "
                        "the session, or the service stopped; its log says which)"
                    )
                spool.seek(0)
                stats = extract_tar(spool, Path(dst.path))
    outcome = str(result.get("outcome") or "error")
    code = code_of(outcome, result.get("exit_code") if isinstance(result.get("exit_code"), int) else None)
    if outcome == "completed":
        text = copied_text(stats, dst.path)
    elif outcome == "failed":
        text = failed_text(_stderr_of(result), result.get("exit_code"), result.get("artifact_id"))
    else:
        text = str(result.get("text") or outcome)
    try:
        view = conn.call("GET", f"/v1/sessions/{segment(named)}")
    except (ServiceError, Unreachable):
        view = {"id": named}
    data = cp_json(
        outcome=outcome,
        code=code,
        src=src,
        source=source,
        dest=dest,
        stats=stats,
        archive_bytes=archive_bytes,
        artifact_id=result.get("artifact_id"),
        action_id=result.get("action_id"),
        text=text,
        session=view if isinstance(view, dict) else None,
    )
    return data, text, code
