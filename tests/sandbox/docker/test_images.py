"""Images build offline and only when their inputs change."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import trio

from executor.config import ImageSettings
from executor.errors import ImageError, ImageNotFound
from executor.sandbox.docker import DockerEngine, build_image, list_images
from executor.sandbox.docker import images as images_module
from executor.sandbox.docker.images import bootstrap_tag

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
    assert kinds["executor/tiny:latest"] == "session"


async def test_the_bootstrapped_base_is_tagged_by_its_inputs(base_image: str) -> None:
    """The base of ``base`` carries its inputs' hash in its tag, and is listed as a base."""
    engine = await _engine()
    try:
        result = await build_image(engine, ImageSettings(try_pull=False), "base")
        listed = await list_images(engine)
    finally:
        await engine.aclose()
    assert result.base is not None and re.fullmatch(r"executor/debian:[a-z]+-[0-9a-f]{12}", result.base)
    assert {tag: info.kind for info in listed for tag in info.tags}[result.base] == "base"


def test_two_folders_bootstrapping_one_repository_keep_separate_bases(tmp_path: Path) -> None:
    """The same repository with other packages (or another suite) gets another tag, so neither retags the other."""
    script = tmp_path / "bootstrap.sh"
    script.write_text("echo\n")
    small = images_module._bootstrap_inputs("bookworm", ["bash"], script)
    large = images_module._bootstrap_inputs("bookworm", ["bash", "gcc"], script)
    other_suite = images_module._bootstrap_inputs("trixie", ["bash"], script)
    tags = {bootstrap_tag("executor/debian", suite, h) for suite, h in [("b", small), ("b", large), ("t", other_suite)]}
    assert len(tags) == 3
    assert bootstrap_tag("executor/debian", "bookworm", small) == bootstrap_tag("executor/debian", "bookworm", small)


async def test_unknown_image_is_bad_input_with_the_known_names(tmp_path: Path) -> None:
    """A bare name that is neither a folder nor a local image is ImageNotFound (a LookupError) listing the folders."""
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "Dockerfile").write_text("FROM scratch\n")
    engine = await _engine()
    try:
        # try_pull is on: a bare name is still never sent to a registry.
        with trio.fail_after(30), pytest.raises(ImageNotFound) as caught:
            await build_image(engine, ImageSettings(images_dir=tmp_path, try_pull=True), "bsae")
    finally:
        await engine.aclose()
    assert isinstance(caught.value, LookupError)
    assert re.match(
        r"no image named 'bsae': no folder bsae/ .*known image folders: base, mine, toolchain", str(caught.value)
    )


async def test_a_full_reference_is_pulled_only_when_the_settings_allow(tmp_path: Path) -> None:
    """A missing ``name:tag`` with pulls off is ImageNotFound saying pulls are off."""
    engine = await _engine()
    try:
        with trio.fail_after(30), pytest.raises(ImageNotFound, match=r"images\.try_pull is off"):
            await build_image(engine, ImageSettings(try_pull=False), "nosuch/thing:1")
    finally:
        await engine.aclose()


async def test_local_reference_is_used_as_is(base_image: str) -> None:
    """Any local image reference is accepted without a build."""
    engine = await _engine()
    try:
        result = await build_image(engine, ImageSettings(try_pull=False), base_image)
    finally:
        await engine.aclose()
    assert result.action == "present" and result.tag == base_image


async def test_a_step_that_needs_the_network_fails_with_its_output_and_the_hint(
    base_image: str, tmp_path: Path
) -> None:
    """An apt-get step shows the failing step, its output, the offline hint and the kept log."""
    folder = tmp_path / "images" / "needsnet"
    folder.mkdir(parents=True)
    (folder / "Dockerfile").write_text(
        f"FROM {base_image}\nUSER root\nRUN echo fetching jq >&2; apt-get install -y jq\n"
    )
    engine = await _engine()
    try:
        with trio.fail_after(120), pytest.raises(ImageError) as caught:
            await build_image(
                engine,
                ImageSettings(images_dir=tmp_path / "images", try_pull=False),
                "needsnet",
                log_dir=tmp_path / "logs",
            )
    finally:
        await engine.aclose()
    message = str(caught.value)
    assert "returned a non-zero code" in message
    assert re.search(r"the failing step and its last output lines:\n  Step 3/\d+ : RUN echo fetching jq", message)
    assert "\n  fetching jq\n" in message and "\x1b" not in message
    assert "Unable to locate package jq" in message
    assert "hint: image builds run with no network" in message and "image.toml" in message
    log = re.search(r"full log: (\S+)", message)
    assert log is not None and "Step 3/" in await trio.Path(log.group(1)).read_text()


async def test_ls_rm_and_prune_touch_only_the_executors_own_images(base_image: str, tmp_path: Path) -> None:
    """An earlier build is stale and pruned; the current one stays; an operator's image FROM ours is never ours."""
    folder = tmp_path / "images" / "prunable"
    folder.mkdir(parents=True)
    (folder / "Dockerfile").write_text(f"FROM {base_image}\nCOPY note /note\n")
    (folder / "note").write_text("one\n")
    settings = ImageSettings(images_dir=tmp_path / "images", try_pull=False)
    child_tag = f"executor-test/child-{tmp_path.name[-12:].lower()}:1"
    engine = await _engine()
    try:
        with trio.fail_after(180):
            first = await build_image(engine, settings, "prunable")
            (folder / "note").write_text("two\n")
            second = await build_image(engine, settings, "prunable")
            child = await trio.run_process(
                ["docker", "build", "-q", "--network", "none", "-t", child_tag, "-"],
                stdin=f"FROM {base_image}\nRUN echo operator > /op\n".encode(),
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
            assert child.returncode == 0, child.stderr
            listed = {info.image_id: info for info in await list_images(engine)}
            stale = {info.image_id for info in await images_module.stale_images(engine, settings, in_use=set())}
            with pytest.raises(ImageNotFound, match=r"is not one of the executor's images"):
                await images_module.remove_image(engine, child_tag)
            pruned = await images_module.prune_images(engine, settings, in_use=set())
            after = {info.image_id for info in await list_images(engine)}
            child_still_there = await images_module.image_exists(engine, child_tag)
    finally:
        await trio.run_process(["docker", "rmi", "-f", child_tag, "executor/prunable:latest"], check=False)
        await engine.aclose()
    assert listed[first.image_id].kind == "session" and listed[first.image_id].tags == ()
    assert listed[second.image_id].tags == ("executor/prunable:latest",)
    assert not any(child_tag in info.tags for info in listed.values())
    assert first.image_id in stale and second.image_id not in stale
    assert first.image_id in {info.image_id for info in pruned.removed}
    assert first.image_id not in after and second.image_id in after
    assert child_still_there


async def test_a_long_host_step_streams_its_lines_with_elapsed_time_and_keeps_a_log(tmp_path: Path) -> None:
    """Each line of the bootstrap's output reaches progress as it comes, and the whole output lands in the log."""
    lines: list[str] = []
    log = images_module._Log(tmp_path / "logs", "demo")
    script = "for i in 1 2 3; do echo step $i >&2; done; echo last words >&2; exit 7"
    with trio.fail_after(30):
        code, tail = await images_module._run_logged(["bash", "-c", script], log, lines.append)
    log.close()
    assert code == 7
    assert tail[-1] == "last words" and tail[0] == "step 1"
    assert [re.sub(r"^\s*\[\s*\d+s\] ", "", line) for line in lines] == ["step 1", "step 2", "step 3", "last words"]
    assert log.path is not None
    kept = log.path.read_text()
    assert "step 2" in kept and kept.rstrip().endswith("exit 7")
