"""``executor image build [NAME] | ls``.

JSON shapes (``--json``):

* ``image build``: ``{"outcome": "ok", "image": {"name", "tag", "image_id", "action", "base", "base_action",
  "inputs_hash"}}`` where ``action`` is ``built``, ``skipped`` (up to date), ``present`` or ``pulled``;
* ``image ls``: ``{"outcome": "ok", "images": [{"tags", "image_id", "size", "created", "kind", "inputs_hash"}]}``;
* failures: ``{"outcome": "error", "error": "...", "exit_code": 2 | 125}``: 2 for bad input (a bad settings file, an
  unknown image), 125 when the engine or a build failed.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio
import typer

from executor.cli._common import emit, progress, state
from executor.sandbox.docker import DockerEngine, ImageBuildResult, ImageInfo, build_image, list_images

app = typer.Typer(help="Build and list session images (offline: no registry needed).", no_args_is_help=True)

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


@app.command("build")
def build(
    ctx: typer.Context,
    name: str = typer.Argument("base", help="A folder under images/ (or any local image reference)."),
) -> None:
    """Build an image unless it is up to date; bootstrap its Debian base first when it is missing."""
    st = state(ctx)
    settings = st.settings()
    verbose = not st.json and sys.stderr.isatty()

    def say(line: str) -> None:
        progress(line, json_mode=st.json)

    async def job(engine: DockerEngine) -> ImageBuildResult:
        return await build_image(engine, settings.images, name, progress=say, build_output=verbose)

    result = _run(ctx, job)
    words = {
        "built": "built",
        "skipped": "up to date (inputs unchanged), skipped",
        "present": "present",
        "pulled": "pulled",
    }
    emit(
        {"outcome": "ok", "image": result.model_dump(mode="json")},
        f"{result.tag}: {words[result.action]} ({result.image_id[:19]})",
        json_mode=st.json,
    )


@app.command("ls")
def ls(ctx: typer.Context) -> None:
    """List the executor's images: session images, bootstrapped bases, derived agent images."""
    st = state(ctx)
    images: list[ImageInfo] = _run(ctx, list_images)
    lines = [f"{'KIND':8} {'TAG':40} {'ID':19} SIZE"]
    for info in images:
        tag = ", ".join(info.tags) or "<none>"
        lines.append(f"{info.kind:8} {tag:40} {info.image_id[:19]:19} {info.size / 1e6:.0f} MB")
    emit({"outcome": "ok", "images": [i.model_dump(mode="json") for i in images]}, "\n".join(lines), json_mode=st.json)
