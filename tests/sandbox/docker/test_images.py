"""Images build offline and only when their inputs change."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from executor.config import ImageSettings
from executor.errors import ImageError
from executor.sandbox.docker import DockerEngine, build_image, list_images

pytestmark = pytest.mark.docker


async def _engine() -> DockerEngine:
    from executor.config import DockerSettings

    return await DockerEngine.connect(DockerSettings())


async def test_building_base_twice_does_the_work_once(base_image: str) -> None:
    """A second build of an unchanged ``base`` is skipped and keeps the same image id and base."""
    engine = await _engine()
    try:
        with trio.fail_after(120):
            first = await build_image(engine, ImageSettings(), "base")
            second = await build_image(engine, ImageSettings(), "base")
    finally:
        await engine.aclose()
    assert first.tag == second.tag == base_image == "executor/base:latest"
    assert second.action == "skipped" and second.base_action == "present"
    assert second.image_id == first.image_id and second.inputs_hash == first.inputs_hash


async def test_folder_image_rebuilds_only_when_a_file_changes(base_image: str, tmp_path: Path) -> None:
    """A folder image is built, then skipped while unchanged, then rebuilt offline after a file changes."""
    folder = tmp_path / "images" / "tiny"
    folder.mkdir(parents=True)
    (folder / "Dockerfile").write_text(f"FROM {base_image}\nCOPY note /note\nRUN test -s /note\n")
    (folder / "note").write_text("one\n")
    settings = ImageSettings(images_dir=tmp_path / "images", try_pull=False)
    engine = await _engine()
    try:
        with trio.fail_after(120):
            built = await build_image(engine, settings, "tiny")
            again = await build_image(engine, settings, "tiny")
            (folder / "note").write_text("two\n")
            rebuilt = await build_image(engine, settings, "tiny")
            listed = await list_images(engine)
            await engine.call(
                lambda: engine.client.api.remove_image("executor/tiny:latest", force=True),
                what="cleanup",
                idempotent=True,
            )
    finally:
        await engine.aclose()
    assert (built.action, again.action, rebuilt.action) == ("built", "skipped", "built")
    assert again.image_id == built.image_id != rebuilt.image_id
    assert rebuilt.inputs_hash != built.inputs_hash
    kinds = {tag: info.kind for info in listed for tag in info.tags}
    assert kinds["executor/tiny:latest"] == "session" and kinds["executor/debian:bookworm"] == "base"


async def test_unknown_image_says_what_is_missing(tmp_path: Path) -> None:
    """A name that is neither a folder nor a local image fails with ImageError naming both."""
    engine = await _engine()
    try:
        with trio.fail_after(30), pytest.raises(ImageError, match=r"^no folder .*nosuch.* and no local image"):
            await build_image(engine, ImageSettings(images_dir=tmp_path, try_pull=False), "nosuch")
    finally:
        await engine.aclose()


async def test_local_reference_is_used_as_is(base_image: str) -> None:
    """Any local image reference is accepted without a build."""
    engine = await _engine()
    try:
        result = await build_image(engine, ImageSettings(try_pull=False), "executor/debian:bookworm")
    finally:
        await engine.aclose()
    assert result.action == "present" and result.tag == "executor/debian:bookworm"
