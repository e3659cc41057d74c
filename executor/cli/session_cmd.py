"""``executor session start | ls | stop ID | gc``.

Every command acts on this home's sessions only (sessions carry an ``executor.home`` label derived from the
resolved ``EXECUTOR_HOME``); ``--all`` on ``ls``, ``stop`` and ``gc`` reaches every home's sessions.
A named session whose container stopped keeps its workspace volume until it is stopped: ``gc`` removes the stopped
container and lists the volume as kept; ``session start --name NAME`` (or ``exec --session NAME --create``)
recreates the container on it.

JSON shapes (``--json``; :mod:`executor.cli.shapes`, the same over a running service):

* ``session start``: ``{"outcome": "completed", "exit_code": 0, "session": SESSION}``;
* ``session ls``: ``{"outcome": "completed", "exit_code": 0, "sessions": [SESSION, ...]}``;
* ``session stop ID``: ``{"outcome": "completed", "exit_code": 0, "stopped": "s-...", "session": SESSION}`` (its
  ``state`` is ``stopped``);
* ``session gc``: ``{"outcome": "completed", "exit_code": 0, "removed": ["executor-s-...",
  "executor-s-...-workspace", ...], "kept": ["executor-s-...-workspace", ...], "idle_stopped": [NAME, ...],
  "spools_removed": N}``
  (named sessions stopped because they were idle past their limit, their workspaces kept; upload bodies a killed
  service left, removed when no service runs for the home);
* failures: ``{"outcome": "error", "error": "...", "exit_code": N}``: 2 for bad input (unknown profile or image,
  bad name, unknown session), 125 when the engine or the sandbox failed.

``SESSION`` is ``{"id", "name", "image", "profile", "state", "created_at", "owner", "idle_limit_s", "idle_s"}``,
null where unknown. ``session ls`` as text shows each session's age, idle time (since its last use, where known)
and owner.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Literal, TypeVar

import trio
import typer

from executor.cli import shapes
from executor.cli._common import EXIT_USAGE, emit, emit_done, fail, progress, state
from executor.config import parse_idle_limit
from executor.gate.judge import api_key_from
from executor.gate.policy import load_profile_policy
from executor.sandbox.base import Backend, GcReport, SessionInfo, open_backend
from executor.service.lock import clear_unserved_spools
from executor.session import open_executor

app = typer.Typer(help="Start, list, stop and garbage-collect sessions.", no_args_is_help=True)

T = TypeVar("T")


def _run(ctx: typer.Context, job: Callable[[Backend], Awaitable[T]]) -> T:
    settings = state(ctx).settings()

    async def main() -> T:
        async with open_backend(settings) as backend:
            return await job(backend)

    return trio.run(main)


_ALL_HOMES = typer.Option(False, "--all", help="Every executor home's sessions, not only this home's.")


@app.command("start")
def start(
    ctx: typer.Context,
    profile: str | None = typer.Option(None, "--profile", help="Profile name (else the default profile)."),
    image: str | None = typer.Option(None, "--image", help="Override the profile's image."),
    name: str | None = typer.Option(None, "--name", help="A unique name for the session."),
    idle: str | None = typer.Option(
        None,
        "--idle",
        help="A named session's idle limit: seconds, a duration (30m, 2h) or none (default sessions.idle_s).",
    ),
) -> None:
    """Start a hardened session container and wait until its agent answers.

    The session is opened through the pipeline, like the API's ``open_session``: the profile's policy is loaded and
    checked first (a bad policy starts nothing), and the session's journal records its opening.
    """
    st = state(ctx)
    settings = st.settings()
    idle_s: float | Literal["none"] | None = None
    if idle is not None:
        if name is None:
            fail(
                "--idle needs --name: an unnamed session lives only as long as this command",
                code=EXIT_USAGE,
                json_mode=st.json,
            )
        try:
            limit = parse_idle_limit(idle)
        except ValueError as exc:
            fail(f"--idle: {exc}", code=EXIT_USAGE, json_mode=st.json)
        idle_s = "none" if limit is None else limit
    chosen = settings.profile(profile)
    load_profile_policy(settings.gate, chosen)  # bad input is told before the engine is asked for anything
    profile_name = profile or settings.default_profile
    shown = image or chosen.image
    progress(f"starting a session ({profile_name} profile, image {shown})", json_mode=st.json)

    async def main() -> SessionInfo:
        api_key = api_key_from(settings.gate.judge, os.environ)
        async with (
            open_executor(settings, api_key=api_key, surface="cli") as ex,
            ex.open_session(profile=profile, image=image, name=name, keep=True, idle_s=idle_s) as session,
        ):
            return session.info

    info = trio.run(main)
    emit(shapes.started_json(info.model_dump(mode="json")), info.id, json_mode=st.json)


@app.command("ls")
def ls(ctx: typer.Context, all_homes: bool = _ALL_HOMES) -> None:
    """List this home's sessions in every state."""
    st = state(ctx)

    async def job(backend: Backend) -> list[SessionInfo]:
        return await backend.list_sessions(all_homes=all_homes)

    infos = [info.model_dump(mode="json") for info in _run(ctx, job)]
    emit(shapes.sessions_json(infos), shapes.session_table(infos), json_mode=st.json)


@app.command("stop")
def stop(
    ctx: typer.Context, session: str = typer.Argument(..., help="Session id or name."), all_homes: bool = _ALL_HOMES
) -> None:
    """Stop a session of this home and remove its container and workspace volume."""
    st = state(ctx)
    settings = st.settings()

    async def main() -> SessionInfo:
        # Through the executor: under the name's lock (a --create in another process waits), and the session's
        # background tasks are stopped first with their output kept.
        api_key = api_key_from(settings.gate.judge, os.environ)
        async with open_executor(settings, api_key=api_key, surface="cli", pool="off") as ex:
            info = await ex.backend.find_session(session, all_homes=all_homes)
            await ex.stop_session(info.id, all_homes=all_homes)
            return info

    stopped = trio.run(main)
    emit(shapes.stopped_json(stopped.model_dump(mode="json")), f"stopped {stopped.id}", json_mode=st.json)


@app.command("gc")
def gc(ctx: typer.Context, all_homes: bool = _ALL_HOMES) -> None:
    """Remove this home's leftovers: containers stuck in Created or Exited, and orphaned workspace volumes of
    unnamed sessions. Named sessions' workspaces are kept (`session stop NAME` deletes one)."""
    st = state(ctx)
    settings = st.settings()
    # Its own gc only: the one at the executor's start would report nothing here.
    settings = settings.model_copy(update={"docker": settings.docker.model_copy(update={"gc_on_start": False})})

    async def main() -> GcReport:
        # Through the executor: a session stopped for idleness has its background tasks stopped first, their output
        # kept.
        async with open_executor(
            settings, api_key=api_key_from(settings.gate.judge, os.environ), surface="cli", pool="off"
        ) as ex:
            return await ex.gc(all_homes=all_homes)

    report = trio.run(main)
    # Upload bodies a killed service left spooled: nobody's once no service runs for the home.
    spools = clear_unserved_spools(st.settings().home)
    lines = [f"stopped {name} (idle past its limit)" for name in report.idle_stopped]
    lines += [f"removed {name}" for name in report.removed]
    lines += [f"kept {name} (a named session's workspace; `executor session stop` deletes it)" for name in report.kept]
    lines += [f"removed {spools} upload spool(s) a killed service left"] if spools else []
    emit_done(
        {
            "removed": list(report.removed),
            "kept": list(report.kept),
            "idle_stopped": list(report.idle_stopped),
            "spools_removed": spools,
        },
        "\n".join(lines) or "nothing to remove",
        json_mode=st.json,
    )
