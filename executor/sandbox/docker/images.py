"""Session images, built with no container registry reachable.

Resolution of an image name (a profile's ``image``):

* a folder ``<images_dir>/<name>/`` with a Dockerfile → built as ``executor/<name>:latest``;
* anything else → a local image reference, pulled when missing (``images.try_pull``).

A folder's base (``image.toml`` ``[bootstrap]``) is used when local, else pulled when pulls are allowed, else
bootstrapped by ``images/bootstrap.sh`` (mmdebstrap, debootstrap as fallback, from the host's apt sources) and
``docker import``-ed. The Dockerfile is built with the classic builder and ``network_mode="none"``. Each build is
labelled with a hash of its inputs; an unchanged image is never rebuilt.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

import docker.errors as de
import trio
from pydantic import BaseModel, ConfigDict

from executor.config import ImageSettings, read_toml
from executor.errors import ConfigError, ExecutorError, ImageError, ImageNotFound
from executor.sandbox.docker._engine import DockerEngine

__all__ = [
    "LABEL_BOOTSTRAP",
    "LABEL_IMAGE",
    "LABEL_INPUTS",
    "ImageBuildResult",
    "ImageInfo",
    "Progress",
    "build_image",
    "ensure_agent_image",
    "ensure_image",
    "folder_tag",
    "host_suite",
    "list_images",
]

LABEL_IMAGE: Final = "executor.image"
"""Label naming the image folder an image was built from."""
LABEL_INPUTS: Final = "executor.inputs"
"""Label holding the hash of a build's inputs."""
LABEL_BOOTSTRAP: Final = "executor.bootstrap"
"""Label holding the hash of a bootstrapped base's inputs (suite, packages, script)."""

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
_REPO_ROOT = Path(__file__).resolve().parents[3]

Progress = Callable[[str], None]
"""Receives one line of narration per step (and the build's own output lines)."""


class ImageBuildResult(BaseModel):
    """What :func:`build_image` did."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    """The name asked for (a folder name or an image reference)."""
    tag: str
    """The tag sessions run."""
    image_id: str
    """The image id (``sha256:...``)."""
    action: Literal["built", "skipped", "present", "pulled"]
    """``built``: the Dockerfile was built; ``skipped``: up to date (the inputs' hash matched); ``present``: a local
    reference used as is; ``pulled``: a reference that was pulled."""
    base: str | None = None
    """The base tag of a folder image."""
    base_action: Literal["present", "pulled", "bootstrapped"] | None = None
    """How the base was obtained, for folder images."""
    inputs_hash: str | None = None
    """Hash of the folder's files and the base image id, stored as the ``executor.inputs`` label."""


class ImageInfo(BaseModel):
    """One image of ours, for ``executor image ls``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tags: tuple[str, ...]
    """Its tags."""
    image_id: str
    """Its id."""
    size: int
    """Its size in bytes."""
    created: str
    """When the engine created it."""
    kind: Literal["session", "base", "agent"]
    """A built session image, a bootstrapped base, or a derived image carrying the agent (exec transport)."""
    inputs_hash: str | None
    """The inputs' hash label (built and derived images)."""


def folder_tag(name: str) -> str:
    """The tag of the image built from folder ``name``."""
    return f"executor/{name}:latest"


def host_suite() -> str | None:
    """The host's Debian release codename, or None when the host does not name one."""
    try:
        text = Path("/etc/os-release").read_text(encoding="utf-8")
    except OSError:
        return None
    match = re.search(r"^VERSION_CODENAME=\"?([a-z0-9-]+)\"?$", text, re.MULTILINE)
    return match.group(1) if match else None


def _folder(settings: ImageSettings, name: str) -> Path | None:
    if not _NAME_RE.match(name):
        return None
    folder = settings.images_dir / name
    return folder if (folder / "Dockerfile").is_file() else None


def _folder_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        relative = path.relative_to(folder).as_posix()
        digest.update(f"{relative}\0{path.stat().st_mode & 0o777:o}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


class _Bootstrap(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    repository: str
    include: tuple[str, ...] = ()


def _bootstrap_spec(folder: Path) -> _Bootstrap | None:
    path = folder / "image.toml"
    if not path.is_file():
        return None
    data = read_toml(path)
    section = data.get("bootstrap")
    try:
        return None if section is None else _Bootstrap.model_validate(section)
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def _bootstrap_script(settings: ImageSettings) -> Path:
    for candidate in (settings.images_dir / "bootstrap.sh", _REPO_ROOT / "images" / "bootstrap.sh"):
        if candidate.is_file():
            return candidate
    raise ImageError(f"no bootstrap.sh in {settings.images_dir} or the executor's own images folder")


async def _inspect(engine: DockerEngine, ref: str) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = await engine.call(
            lambda: engine.client.api.inspect_image(ref),  # type: ignore[no-untyped-call]  # the stub lacks types
            what=f"inspect image {ref}",
            idempotent=True,
        )
    except ImageError as exc:
        if isinstance(exc.__cause__, de.NotFound):
            return None
        raise
    return data


def _labels(data: dict[str, Any]) -> dict[str, str]:
    return dict((data.get("Config") or {}).get("Labels") or {})


async def _try_pull(engine: DockerEngine, settings: ImageSettings, ref: str, progress: Progress) -> bool:
    if not settings.try_pull:
        return False
    progress(f"pulling {ref}")
    repository, _, tag = ref.rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else (ref, "", "latest")
    # A pull that no registry answers fails in well under a second here; the bound keeps a hanging
    # registry from holding the build. Abandoning the thread is safe: the pull has no effect we rely on.
    with trio.move_on_after(settings.pull_timeout_s):
        try:
            await engine.call(
                lambda: engine.client.api.pull(repository, tag=tag),
                what=f"pull {ref}",
                idempotent=False,
                abandon_on_cancel=True,
            )
        except ExecutorError as exc:
            progress(f"pull failed: {str(exc)[:200]}")
            return False
        return await _inspect(engine, ref) is not None
    progress(f"pull of {ref} gave no answer within {settings.pull_timeout_s:g}s")
    return False


async def _bootstrap_base(
    engine: DockerEngine, settings: ImageSettings, spec: _Bootstrap, progress: Progress
) -> tuple[str, Literal["present", "pulled", "bootstrapped"]]:
    suite = settings.suite or host_suite()
    if not suite:
        raise ImageError("the host names no Debian release; set images.suite (for example 'bookworm')")
    tag = f"{spec.repository}:{suite}"
    script = _bootstrap_script(settings)
    packages = sorted(set(spec.include))
    want = hashlib.sha256(
        json.dumps({"suite": suite, "include": packages, "script": script.read_text(encoding="utf-8")}).encode()
    ).hexdigest()
    present = await _inspect(engine, tag)
    if present is not None and _labels(present).get(LABEL_BOOTSTRAP) in (None, want):
        # Ours with the same inputs, or an operator's own image under that tag: use it.
        return tag, "present"
    if present is None and await _try_pull(engine, settings, tag, progress):
        return tag, "pulled"
    tool = settings.bootstrap
    progress(f"bootstrapping {tag} with {tool if tool != 'auto' else 'mmdebstrap (or debootstrap)'} (~1 min)")
    with tempfile.TemporaryDirectory(prefix="executor-rootfs-") as scratch:
        tarball = Path(scratch) / "rootfs.tar"
        command = ["bash", str(script), "--output", str(tarball), "--suite", suite, "--tool", tool]
        if packages:
            command += ["--include", ",".join(packages)]
        result = await trio.run_process(command, capture_stdout=True, capture_stderr=True, check=False)
        if result.returncode != 0 or not tarball.is_file():
            tail = result.stderr.decode(errors="replace").strip().splitlines()[-15:]
            raise ImageError(
                f"bootstrapping {tag} failed (exit {result.returncode}); install mmdebstrap or debootstrap and check "
                "the host's apt sources. Last lines:\n" + "\n".join(tail)
            )
        progress(f"importing the root filesystem as {tag}")
        repository, _, version = tag.rpartition(":")
        changes = [f"LABEL {LABEL_BOOTSTRAP}={want}", 'CMD ["bash"]', "ENV LANG=C.UTF-8"]
        await engine.call(
            lambda: engine.client.api.import_image_from_file(
                str(tarball), repository=repository, tag=version, changes=changes
            ),
            what=f"import {tag}",
            idempotent=False,
        )
    if await _inspect(engine, tag) is None:
        raise ImageError(f"the engine did not keep the imported base {tag}")
    return tag, "bootstrapped"


_FROM_RE = re.compile(r"^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)", re.IGNORECASE | re.MULTILINE)


async def _declared_bases(engine: DockerEngine, settings: ImageSettings, folder: Path, progress: Progress) -> None:
    stages: set[str] = set()
    text = (folder / "Dockerfile").read_text(encoding="utf-8")
    for match in _FROM_RE.finditer(text):
        ref = match.group(1)
        alias = re.search(rf"FROM\s+\S*{re.escape(ref)}\s+AS\s+(\S+)", text, re.IGNORECASE)
        if alias:
            stages.add(alias.group(1).lower())
        if ref == "scratch" or "$" in ref or ref.lower() in stages:
            continue
        if await _inspect(engine, ref) is None and not await _try_pull(engine, settings, ref, progress):
            raise ImageError(
                f"{folder.name}: base {ref!r} is not local and could not be pulled; load it, or add an "
                "image.toml [bootstrap] section so that it is bootstrapped"
            )


async def _build(
    engine: DockerEngine,
    *,
    tag: str,
    labels: dict[str, str],
    progress: Progress | None,
    path: str | None = None,
    fileobj: io.BytesIO | None = None,
    buildargs: dict[str, str] | None = None,
) -> None:
    token = trio.lowlevel.current_trio_token()

    def run() -> None:
        stream = engine.client.api.build(
            path=path,
            fileobj=fileobj,
            custom_context=fileobj is not None,
            tag=tag,
            buildargs=buildargs or {},
            labels=labels,
            network_mode="none",
            rm=True,
            forcerm=True,
            pull=False,
            decode=True,
        )
        for chunk in stream:
            if "error" in chunk:
                detail = chunk.get("errorDetail", {}).get("message") or chunk["error"]
                raise ImageError(f"building {tag} failed: {str(detail).strip()}")
            line = str(chunk.get("stream", "")).rstrip()
            if line and progress is not None:
                trio.from_thread.run_sync(progress, line, trio_token=token)

    # A build can run for minutes in the engine: on a time bound (images.build_timeout_s) or a cancel, the waiting
    # thread is abandoned instead of holding the caller until the engine finishes.
    await engine.call(run, what=f"build {tag}", idempotent=False, abandon_on_cancel=True)


async def build_image(
    engine: DockerEngine,
    settings: ImageSettings,
    name: str,
    *,
    progress: Progress | None = None,
    build_output: bool = False,
) -> ImageBuildResult:
    """Make image ``name`` available locally, building it only when its inputs changed.

    Args:
        engine: the engine.
        settings: the images section.
        name: a folder under ``settings.images_dir`` or any image reference.
        progress: receives narration lines (steps; with ``build_output`` also the builder's lines).
        build_output: pass the builder's own output lines to ``progress``.

    Raises:
        ImageError: the base could not be found, pulled or bootstrapped, or the build failed; or the whole
            thing ran past ``images.build_timeout_s``.
        EngineUnavailable: the engine stopped answering.
    """
    say: Progress = progress or (lambda _line: None)
    try:
        with trio.fail_after(settings.build_timeout_s):
            return await _build_image(engine, settings, name, say, say if build_output else None)
    except trio.TooSlowError:
        raise ImageError(
            f"image {name!r} was not ready within images.build_timeout_s={settings.build_timeout_s:g}s"
        ) from None


async def _build_image(
    engine: DockerEngine, settings: ImageSettings, name: str, say: Progress, builder_lines: Progress | None
) -> ImageBuildResult:
    folder = _folder(settings, name)
    if folder is None:
        data = await _inspect(engine, name)
        action: Literal["present", "pulled"] = "present"
        if data is None:
            if "/" not in name and ":" not in name and _NAME_RE.match(name):
                hint = f"no folder {settings.images_dir / name} with a Dockerfile, and no local image {name!r}"
            else:
                hint = f"no local image {name!r}"
            if not await _try_pull(engine, settings, name, say):
                raise ImageNotFound(f"{hint}; build or load it first (executor image ls shows what is there)")
            data = await _inspect(engine, name)
            action = "pulled"
            if data is None:
                raise ImageError(f"{name!r} was pulled but the engine does not show it")
        return ImageBuildResult(name=name, tag=name, image_id=str(data["Id"]), action=action)

    tag = folder_tag(name)
    spec = _bootstrap_spec(folder)
    base: str | None = None
    base_action: Literal["present", "pulled", "bootstrapped"] | None = None
    buildargs: dict[str, str] = {}
    if spec is not None:
        base, base_action = await _bootstrap_base(engine, settings, spec, say)
        buildargs["BASE"] = base
    else:
        await _declared_bases(engine, settings, folder, say)
    base_id = ""
    if base is not None:
        base_data = await _inspect(engine, base)
        base_id = str(base_data["Id"]) if base_data else ""
    inputs = hashlib.sha256(f"{_folder_digest(folder)}\0{base_id}\0{sorted(buildargs.items())}".encode()).hexdigest()
    current = await _inspect(engine, tag)
    if current is not None and _labels(current).get(LABEL_INPUTS) == inputs:
        return ImageBuildResult(
            name=name,
            tag=tag,
            image_id=str(current["Id"]),
            action="skipped",
            base=base,
            base_action=base_action,
            inputs_hash=inputs,
        )
    say(f"building {tag} from {folder} (no network)")
    await _build(
        engine,
        tag=tag,
        labels={LABEL_IMAGE: name, LABEL_INPUTS: inputs},
        progress=builder_lines,
        path=str(folder),
        buildargs=buildargs,
    )
    built = await _inspect(engine, tag)
    if built is None:
        raise ImageError(f"the build of {tag} finished but the engine does not show the tag")
    return ImageBuildResult(
        name=name,
        tag=tag,
        image_id=str(built["Id"]),
        action="built",
        base=base,
        base_action=base_action,
        inputs_hash=inputs,
    )


async def ensure_image(engine: DockerEngine, settings: ImageSettings, name: str) -> str:
    """Return the tag to run for ``name``, building or pulling it when needed (see :func:`build_image`).

    Raises:
        ImageError: it cannot be made available.
    """
    return (await build_image(engine, settings, name)).tag


async def ensure_agent_image(
    engine: DockerEngine, image: str, agent_binary: Path, *, statx_shim: Path | None = None
) -> str:
    """A derived image: ``image`` plus the agent at ``/.executor/agent`` (exec transport: no host mounts), and the
    runsc preload library at ``/.executor/shim-statx.so`` when ``statx_shim`` is given.

    Built from an in-memory context with no network, cached by a hash of the image id and the files.

    Raises:
        ImageError: ``image`` is missing or the build failed.
    """
    from executor.sandbox.docker.hardening import AGENT_PATH, STATX_SHIM_PATH

    data = await _inspect(engine, image)
    if data is None:
        raise ImageError(f"no local image {image!r} to add the agent to")
    binary = await trio.to_thread.run_sync(agent_binary.read_bytes)
    shim = b"" if statx_shim is None else await trio.to_thread.run_sync(statx_shim.read_bytes)
    digest = hashlib.sha256(binary).digest() + (hashlib.sha256(shim).digest() if shim else b"")
    inputs = hashlib.sha256(f"{data['Id']}\0".encode() + digest).hexdigest()
    tag = f"executor/with-agent:{inputs[:16]}"
    current = await _inspect(engine, tag)
    if current is not None and _labels(current).get(LABEL_INPUTS) == inputs:
        return tag
    dockerfile = f"FROM {data['Id']}\nCOPY agent {AGENT_PATH}\n".encode()
    members = [("agent", binary, 0o755)]
    if shim:
        dockerfile += f"COPY shim-statx.so {STATX_SHIM_PATH}\n".encode()
        members.append(("shim-statx.so", shim, 0o755))
    context = io.BytesIO()
    now = int(datetime.now(UTC).timestamp())
    with tarfile.open(fileobj=context, mode="w") as tar:
        for member_name, payload, mode in (("Dockerfile", dockerfile, 0o644), *members):
            info = tarfile.TarInfo(member_name)
            info.size, info.mode, info.mtime = len(payload), mode, now
            tar.addfile(info, io.BytesIO(payload))
    context.seek(0)
    await _build(engine, tag=tag, labels={LABEL_INPUTS: inputs, "executor.agent": "1"}, progress=None, fileobj=context)
    return tag


async def list_images(engine: DockerEngine) -> list[ImageInfo]:
    """Images of ours: built session images, bootstrapped bases and derived agent images.

    Raises:
        EngineUnavailable: the engine stopped answering.
    """
    found: dict[str, ImageInfo] = {}
    kinds: tuple[tuple[str, Literal["session", "base", "agent"]], ...] = (
        (LABEL_IMAGE, "session"),
        (LABEL_BOOTSTRAP, "base"),
        ("executor.agent", "agent"),
    )
    for label, kind in kinds:
        rows = await _images_with_label(engine, label)
        for row in rows:
            labels = row.get("Labels") or {}
            found.setdefault(
                row["Id"],
                ImageInfo(
                    tags=tuple(row.get("RepoTags") or ()),
                    image_id=row["Id"],
                    size=int(row.get("Size") or 0),
                    created=datetime.fromtimestamp(int(row.get("Created") or 0), UTC).isoformat(),
                    kind=kind,
                    inputs_hash=labels.get(LABEL_INPUTS),
                ),
            )
    return sorted(found.values(), key=lambda info: (info.kind, info.tags))


async def _images_with_label(engine: DockerEngine, label: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = await engine.call(
        lambda: engine.client.api.images(filters={"label": label}), what="list images", idempotent=True
    )
    return rows
