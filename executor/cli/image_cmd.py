"""``executor image build [NAME] | ls | rm REF | prune``.

JSON shapes (``--json``), each also with ``"outcome": "completed", "exit_code": 0``:

* ``image build``: ``{"image": {"name", "tag", "image_id", "action", "base", "base_action",
  "inputs_hash", "log"}}`` where ``action`` is ``built``, ``skipped`` (up to date), ``present`` or ``pulled``, and
  ``log`` is the full build log kept under ``$EXECUTOR_HOME/logs`` when something was built;
* ``image ls``: ``{"images": [{"tags", "image_id", "size", "created", "kind", "inputs_hash", "profiles",
  "derived_from"}]}``;
* ``image rm``: ``{"removed": {...one image...}}``;
* ``image prune``: ``{"removed": [...], "kept": [{"image": {...}, "reason": "..."}], "reclaimed_bytes": N}``;
* failures: ``{"outcome": "error", "error": "...", "exit_code": N}``: 2 for an unknown image name (the message lists
  the known ones), 125 for the executor's own failure.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio
import typer

from executor.cli._common import emit_done, progress, state
from executor.config import Settings
from executor.sandbox.docker import (
    DockerEngine,
    ImageBuildResult,
    ImageInfo,
    PruneResult,
    build_image,
    folder_tag,
    image_folder,
    list_images,
    prune_images,
    remove_image,
)

app = typer.Typer(help="Build, list and remove session images (offline: no registry needed).", no_args_is_help=True)

T = TypeVar("T")


def _run(ctx: typer.Context, job: Callable[[DockerEngine], Awaitable[T]]) -> T:
    settings = state(ctx).settings()

    async def main() -> T:
        engine = await DockerEngine.connect(settings.docker)
        try:
            return await job(engine)
        finally:
            await engine.aclose()

    return trio.run(main)


def _profile_refs(settings: Settings) -> dict[str, list[str]]:
    """Each image reference a profile runs, with the profiles that run it."""
    refs: dict[str, list[str]] = {}
    for name, profile in sorted(settings.profiles.items()):
        folder = image_folder(settings.images, profile.image)
        refs.setdefault(folder_tag(profile.image) if folder is not None else profile.image, []).append(name)
    return refs


def _size(size: int) -> str:
    return f"{size / 1e6:.0f} MB"


@app.command("build")
def build(
    ctx: typer.Context,
    name: str = typer.Argument("base", help="An image folder's name (or a local image reference)."),
) -> None:
    """Build an image unless it is up to date; bootstrap its Debian base first when it is missing."""
    st = state(ctx)
    settings = st.settings()
    verbose = not st.json and sys.stderr.isatty()

    def say(line: str) -> None:
        progress(line, json_mode=st.json)

    async def job(engine: DockerEngine) -> ImageBuildResult:
        return await build_image(
            engine, settings.images, name, progress=say, build_output=verbose, log_dir=settings.home / "logs"
        )

    result = _run(ctx, job)
    words = {
        "built": "built",
        "skipped": "up to date (inputs unchanged), skipped",
        "present": "present",
        "pulled": "pulled",
    }
    emit_done(
        {"image": result.model_dump(mode="json")},
        f"{result.tag}: {words[result.action]} ({result.image_id[:19]})",
        json_mode=st.json,
    )


@app.command("ls")
def ls(ctx: typer.Context) -> None:
    """List the executor's images (session images, bootstrapped bases, agent images), sizes, profiles using them."""
    st = state(ctx)
    refs = _profile_refs(st.settings())
    images: list[ImageInfo] = [
        info.model_copy(update={"profiles": tuple(p for tag in info.tags for p in refs.get(tag, ()))})
        for info in _run(ctx, list_images)
    ]
    lines = [f"{'KIND':8} {'TAG':44} {'ID':19} {'SIZE':>8}  PROFILES"]
    for info in images:
        tag = ", ".join(info.tags) or "<none>"
        lines.append(
            f"{info.kind:8} {tag:44} {info.image_id[:19]:19} {_size(info.size):>8}  {', '.join(info.profiles) or '-'}"
        )
    emit_done({"images": [i.model_dump(mode="json") for i in images]}, "\n".join(lines), json_mode=st.json)


@app.command("rm")
def rm(ctx: typer.Context, ref: str = typer.Argument(..., help="A tag or id from 'executor image ls'.")) -> None:
    """Remove one of the executor's images (never another's, never one a container uses)."""
    st = state(ctx)

    async def job(engine: DockerEngine) -> ImageInfo:
        return await remove_image(engine, ref)

    info = _run(ctx, job)
    emit_done(
        {"removed": info.model_dump(mode="json")},
        f"removed {ref} ({info.image_id[:19]}, {_size(info.size)})",
        json_mode=st.json,
    )


@app.command("prune")
def prune(ctx: typer.Context) -> None:
    """Remove the executor's stale images: earlier builds, agent images of old builds, unused bootstrapped bases."""
    st = state(ctx)
    settings = st.settings()

    async def job(engine: DockerEngine) -> PruneResult:
        return await prune_images(engine, settings.images, in_use=set(_profile_refs(settings)))

    result = _run(ctx, job)
    lines = [f"removed {', '.join(i.tags) or i.image_id[:19]} ({_size(i.size)})" for i in result.removed]
    lines += [f"kept {', '.join(i.tags) or i.image_id[:19]}: {reason}" for i, reason in result.kept]
    lines.append(f"{len(result.removed)} removed, {len(result.kept)} kept, {_size(result.reclaimed)} reclaimed")
    emit_done(
        {
            "removed": [i.model_dump(mode="json") for i in result.removed],
            "kept": [{"image": i.model_dump(mode="json"), "reason": reason} for i, reason in result.kept],
            "reclaimed_bytes": result.reclaimed,
        },
        "\n".join(lines),
        json_mode=st.json,
    )
