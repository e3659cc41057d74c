"""Session images, built with no container registry reachable.

Resolution of an image name (a profile's ``image``):

* a folder ``<name>/`` with a Dockerfile, in the operator's ``images.images_dir`` or else the shipped ``images/``
  → built as ``executor/<name>:latest``;
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
import subprocess
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
from executor.ids import is_image_ref
from executor.sandbox.docker._engine import DockerEngine

__all__ = [
    "LABEL_AGENT",
    "LABEL_AGENT_FROM",
    "LABEL_BOOTSTRAP",
    "LABEL_IMAGE",
    "LABEL_INPUTS",
    "ImageBuildResult",
    "ImageInfo",
    "Progress",
    "PruneResult",
    "bootstrap_tag",
    "build_image",
    "ensure_agent_image",
    "ensure_image",
    "folder_names",
    "folder_tag",
    "host_suite",
    "image_exists",
    "image_folder",
    "list_images",
    "prune_images",
    "remove_image",
    "stale_images",
]

LABEL_IMAGE: Final = "executor.image"
"""Label naming the image folder an image was built from."""
LABEL_INPUTS: Final = "executor.inputs"
"""Label holding the hash of a build's inputs."""
LABEL_BOOTSTRAP: Final = "executor.bootstrap"
"""Label holding the hash of a bootstrapped base's inputs (suite, packages, script)."""
LABEL_AGENT: Final = "executor.agent"
"""Label marking an image derived from a session image with the agent added (exec transport)."""
LABEL_AGENT_FROM: Final = "executor.agent.from"
"""Label holding the id of the session image an agent image was derived from."""
_OURS: Final = (LABEL_IMAGE, LABEL_BOOTSTRAP, LABEL_AGENT)

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
    log: str | None = None
    """The full build log's file, when one was kept (a build that ran with a log folder)."""


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
    profiles: tuple[str, ...] = ()
    """The profiles whose image this is (filled in by the caller that knows the settings)."""
    derived_from: str | None = None
    """For an agent image: the id of the session image it was derived from."""


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


def image_folder(settings: ImageSettings, name: str) -> Path | None:
    """The folder image ``name`` is built from: the first ``<dir>/<name>/Dockerfile`` on the search path (the
    operator's ``images.images_dir``, then the shipped ``images/``); None when ``name`` is no folder's."""
    if not _NAME_RE.match(name):
        return None
    for root in settings.search_path:
        folder = root / name
        if (folder / "Dockerfile").is_file():
            return folder
    return None


def folder_names(settings: ImageSettings) -> list[str]:
    """Every image folder name on the search path, sorted."""
    names = {
        folder.name
        for root in settings.search_path
        if root.is_dir()
        for folder in root.iterdir()
        if (folder / "Dockerfile").is_file()
    }
    return sorted(names)


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
    for root in (*settings.search_path, _REPO_ROOT / "images"):
        if (root / "bootstrap.sh").is_file():
            return root / "bootstrap.sh"
    raise ImageError("no bootstrap.sh in images.images_dir or the executor's own images folder")


async def _inspect(engine: DockerEngine, ref: str) -> dict[str, Any] | None:
    """The engine's record of image ``ref`` (None: no such image).

    Raises:
        ImageNotFound: ``ref`` is not an image reference (no engine call is made with it).
    """
    if not is_image_ref(ref):
        raise ImageNotFound(
            f"{ref!r} is not an image reference: an image folder's name, or [registry/]name[:tag][@digest] in "
            "lowercase letters, digits and '._-' (executor image ls lists the images)"
        )
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


async def image_exists(engine: DockerEngine, ref: str) -> bool:
    """Whether the engine has image ``ref`` locally (no pull)."""
    return await _inspect(engine, ref) is not None


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


def _bootstrap_inputs(suite: str, packages: list[str], script: Path) -> str:
    text = script.read_text(encoding="utf-8")
    return hashlib.sha256(json.dumps({"suite": suite, "include": packages, "script": text}).encode()).hexdigest()


def bootstrap_tag(repository: str, suite: str, inputs_hash: str) -> str:
    """The tag of a bootstrapped base: its repository, suite and the first 12 hex digits of its inputs' hash."""
    return f"{repository}:{suite}-{inputs_hash[:12]}"


class _Log:
    """A build's full log, kept in a file when a folder is given (for ``--json`` runs and post-mortems)."""

    def __init__(self, folder: Path | None, name: str) -> None:
        self.path: Path | None = None
        self._file: Any = None
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
            self.path = folder / f"image-{name}-{stamp}.log"
            self._file = self.path.open("a", encoding="utf-8")

    def write(self, line: str) -> None:
        if self._file is not None:
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


_TAIL_LINES: Final = 15


async def _run_logged(command: list[str], log: _Log, progress: Progress) -> tuple[int, list[str]]:
    """Run a long host step, its output line by line into the log and, with the elapsed time, to ``progress``.

    Returns the exit status and the last lines, for the error message.
    """
    started = trio.current_time()
    tail: list[str] = []
    log.write("$ " + " ".join(command))
    process = await trio.lowlevel.open_process(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert process.stderr is not None
    pending = b""
    try:
        while True:
            # A quiet bootstrap still shows it is alive: a heartbeat every 10 s with the elapsed time.
            with trio.move_on_after(10) as quiet:
                chunk = await process.stderr.receive_some(65536)
            if quiet.cancelled_caught:
                progress(f"  [{trio.current_time() - started:5.0f}s] still working")
                continue
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                line = raw.decode(errors="replace").rstrip()
                if not line:
                    continue
                log.write(line)
                tail = [*tail[-(_TAIL_LINES - 1) :], line]
                progress(f"  [{trio.current_time() - started:5.0f}s] {line[:200]}")
        returncode = await process.wait()
    except BaseException:
        with trio.CancelScope(shield=True), trio.move_on_after(5):
            process.kill()
            await process.wait()
        raise
    if pending.strip():
        line = pending.decode(errors="replace").rstrip()
        log.write(line)
        tail = [*tail[-(_TAIL_LINES - 1) :], line]
    log.write(f"exit {returncode}")
    return returncode, tail


async def _bootstrap_base(
    engine: DockerEngine, settings: ImageSettings, spec: _Bootstrap, progress: Progress, log: _Log
) -> tuple[str, Literal["present", "pulled", "bootstrapped"]]:
    suite = settings.suite or host_suite()
    if not suite:
        raise ImageError("the host names no Debian release; set images.suite (for example 'bookworm')")
    script = _bootstrap_script(settings)
    packages = sorted(set(spec.include))
    want = _bootstrap_inputs(suite, packages, script)
    # An operator's own image under the plain tag (no bootstrap label: loaded, or built elsewhere) is used as is.
    plain = f"{spec.repository}:{suite}"
    operators = await _inspect(engine, plain)
    if operators is not None and LABEL_BOOTSTRAP not in _labels(operators):
        return plain, "present"
    # Ours are keyed by their inputs, so two folders bootstrapping one repository with different packages each
    # keep their own cached base instead of rebuilding and retagging each other's.
    tag = bootstrap_tag(spec.repository, suite, want)
    if await _inspect(engine, tag) is not None:
        return tag, "present"
    if operators is None and await _try_pull(engine, settings, plain, progress):
        return plain, "pulled"
    tool = settings.bootstrap
    progress(f"bootstrapping {tag} with {tool if tool != 'auto' else 'mmdebstrap (or debootstrap)'} (~1 min)")
    with tempfile.TemporaryDirectory(prefix="executor-rootfs-") as scratch:
        tarball = Path(scratch) / "rootfs.tar"
        command = ["bash", str(script), "--output", str(tarball), "--suite", suite, "--tool", tool]
        if packages:
            command += ["--include", ",".join(packages)]
        returncode, tail = await _run_logged(command, log, progress)
        if returncode != 0 or not tarball.is_file():
            hint = (
                "install one: apt-get install mmdebstrap"
                if returncode == 3
                else "check the host's apt sources (the bootstrap reads them) and the log"
            )
            where = f"; full log: {log.path}" if log.path else ""
            raise ImageError(
                f"bootstrapping {tag} failed (exit {returncode}); {hint}{where}. Last lines:\n" + "\n".join(tail)
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


_STEP_RE: Final = re.compile(r"^Step \d+/\d+ : ")
_ANSI_RE: Final = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_NETWORK_STEP_RE: Final = re.compile(
    r"\b(apt-get|apt|aptitude|apk|dnf|yum|pip3?|npm|curl|wget|git\s+clone|go\s+get|cargo\s+install)\b"
)


def _build_failure(tag: str, detail: str, step: list[str], log_path: Path | None) -> str:
    """A build error with the failing step, its last output lines and, when it fetched, the offline hint."""
    lines = [f"building {tag} failed: {detail}"]
    if step:
        lines.append("the failing step and its last output lines:")
        lines.extend(f"  {line}" for line in step)
    if step and _NETWORK_STEP_RE.search(step[0]):
        lines.append(
            "hint: image builds run with no network, so a step cannot download packages; list Debian packages "
            "under [bootstrap] include in the folder's image.toml (they are installed when the base is "
            "bootstrapped), and copy other files into the folder"
        )
    if log_path is not None:
        lines.append(f"full log: {log_path}")
    return "\n".join(lines)


async def _build(
    engine: DockerEngine,
    *,
    tag: str,
    labels: dict[str, str],
    progress: Progress | None,
    path: str | None = None,
    fileobj: io.BytesIO | None = None,
    buildargs: dict[str, str] | None = None,
    log: _Log | None = None,
) -> None:
    token = trio.lowlevel.current_trio_token()
    log_path = log.path if log is not None else None

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
        step: list[str] = []  # the current step's header and its output, for the error message
        try:
            for chunk in stream:
                if "error" in chunk:
                    detail = str(chunk.get("errorDetail", {}).get("message") or chunk["error"]).strip()
                    raise ImageError(_build_failure(tag, detail, step, log_path))
                for raw_line in str(chunk.get("stream", "")).splitlines():
                    line = _ANSI_RE.sub("", raw_line).rstrip()  # the builder colours a step's stderr
                    if not line:
                        continue
                    if log is not None:
                        log.write(line)
                    step = [line] if _STEP_RE.match(line) else [*step[:1], *step[1:][-(_TAIL_LINES - 1) :], line]
                    if progress is not None:
                        trio.from_thread.run_sync(progress, line, trio_token=token)
        finally:
            # Read the stream to its end: a half-read one keeps its engine socket open until garbage collection
            # (an unclosed-socket warning wherever that happens). A failed build's stream ends right after its error.
            for _ in stream:
                pass

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
    log_dir: Path | None = None,
) -> ImageBuildResult:
    """Make image ``name`` available locally, building it only when its inputs changed.

    Args:
        engine: the engine.
        settings: the images section.
        name: an image folder's name (see :func:`image_folder`) or a local image reference.
        progress: receives narration lines (steps; with ``build_output`` also the builder's lines).
        build_output: pass the builder's own output lines to ``progress``.
        log_dir: keep the full log of a build (bootstrap and builder output) in a file there; its path is the
            result's ``log`` and is named in a failure's message.

    Raises:
        ImageNotFound: ``name`` is neither an image folder nor a local image (and was not pulled).
        ImageError: the base could not be found, pulled or bootstrapped, or the build failed; or the whole
            thing ran past ``images.build_timeout_s``.
        EngineUnavailable: the engine stopped answering.
    """
    say: Progress = progress or (lambda _line: None)
    folder = image_folder(settings, name)
    log = _Log(log_dir if folder is not None else None, name)
    try:
        with trio.fail_after(settings.build_timeout_s):
            result = await _build_image(engine, settings, name, folder, say, say if build_output else None, log)
    except trio.TooSlowError:
        raise ImageError(
            f"image {name!r} was not ready within images.build_timeout_s={settings.build_timeout_s:g}s"
        ) from None
    finally:
        log.close()
    if log.path is not None and result.action == "built":
        return result.model_copy(update={"log": str(log.path)})
    if log.path is not None:
        log.path.unlink(missing_ok=True)  # nothing was built: no log worth keeping
    return result


async def _build_image(
    engine: DockerEngine,
    settings: ImageSettings,
    name: str,
    folder: Path | None,
    say: Progress,
    builder_lines: Progress | None,
    log: _Log,
) -> ImageBuildResult:
    if folder is None:
        data = await _inspect(engine, name)
        action: Literal["present", "pulled"] = "present"
        if data is None:
            # A bare name is a folder name or a local tag: a typo there is bad input, never a registry pull.
            # Only a full reference (with a registry path or a tag) is pulled, and only when images.try_pull allows.
            if "/" not in name and ":" not in name:
                raise ImageNotFound(
                    f"no image named {name!r}: no folder {name}/ with a Dockerfile in "
                    f"{', '.join(str(d) for d in settings.search_path) or '(no images folder)'}, and no local image; "
                    f"known image folders: {', '.join(folder_names(settings)) or 'none'} "
                    "(executor image ls lists the local images)"
                )
            if not await _try_pull(engine, settings, name, say):
                pulls = "could not be pulled" if settings.try_pull else "is not pulled (images.try_pull is off)"
                raise ImageNotFound(
                    f"no local image {name!r}, and it {pulls}; load it (docker load) or build it first "
                    "(executor image ls lists the local images)"
                )
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
        base, base_action = await _bootstrap_base(engine, settings, spec, say, log)
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
        log=log,
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


async def current_image_id(engine: DockerEngine, settings: ImageSettings, name: str) -> str | None:
    """The id the engine now gives ``name`` (an image folder's tag, or the reference itself); None if it has none.

    Nothing is built or pulled.
    """
    ref = folder_tag(name) if image_folder(settings, name) is not None else name
    data = await _inspect(engine, ref)
    return None if data is None else str(data["Id"])


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
    labels = {LABEL_INPUTS: inputs, LABEL_AGENT: "1", LABEL_AGENT_FROM: str(data["Id"])}
    await _build(engine, tag=tag, labels=labels, progress=None, fileobj=context)
    return tag


async def _own_labels(
    engine: DockerEngine, labels: dict[str, str], parent: str, cache: dict[str, dict[str, Any] | None]
) -> dict[str, str]:
    """The executor's labels an image's own build set.

    Labels are inherited, so an operator's image built FROM a session image carries ours too. The build's own
    labels are those that differ from the labels of the image it was built FROM: the first tagged ancestor (the
    untagged parents in between are the build's own intermediate steps).
    """
    ours = {key: value for key, value in labels.items() if key in _OURS}
    inherited: dict[str, str] = {}
    for _ in range(256):  # a bound on the chain walk; Dockerfiles have far fewer steps
        if not parent or not ours:
            break
        if parent not in cache:
            cache[parent] = await _inspect(engine, parent)
        data = cache[parent]
        if data is None:
            break
        if data.get("RepoTags"):
            inherited = _labels(data)
            break
        parent = str(data.get("Parent") or "")
    return {key: value for key, value in ours.items() if inherited.get(key) != value}


def _kind(own: dict[str, str]) -> Literal["session", "base", "agent"] | None:
    if LABEL_AGENT in own:
        return "agent"
    if LABEL_IMAGE in own:
        return "session"
    if LABEL_BOOTSTRAP in own:
        return "base"
    return None


async def list_images(engine: DockerEngine) -> list[ImageInfo]:
    """Images of ours: built session images, bootstrapped bases and derived agent images.

    An image is ours by a label it set itself; images that only inherited one (built FROM ours by someone else) are
    not listed.

    Raises:
        EngineUnavailable: the engine stopped answering.
    """
    rows: dict[str, dict[str, Any]] = {}
    for label in _OURS:
        for row in await _images_with_label(engine, label):
            rows.setdefault(str(row["Id"]), row)
    parents: dict[str, dict[str, Any] | None] = {}
    found: list[ImageInfo] = []
    for image_id, row in rows.items():
        labels = dict(row.get("Labels") or {})
        kind = _kind(await _own_labels(engine, labels, str(row.get("ParentId") or ""), parents))
        if kind is None:
            continue
        found.append(
            ImageInfo(
                tags=tuple(tag for tag in row.get("RepoTags") or () if tag != "<none>:<none>"),
                image_id=image_id,
                size=int(row.get("Size") or 0),
                created=datetime.fromtimestamp(int(row.get("Created") or 0), UTC).isoformat(),
                kind=kind,
                inputs_hash=labels.get(LABEL_INPUTS),
                derived_from=labels.get(LABEL_AGENT_FROM),
            )
        )
    return sorted(found, key=lambda info: (info.kind, info.tags))


async def _images_with_label(engine: DockerEngine, label: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = await engine.call(
        lambda: engine.client.api.images(filters={"label": label}), what="list images", idempotent=True
    )
    return rows


class PruneResult(BaseModel):
    """What :func:`prune_images` removed and what it kept, with why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    removed: tuple[ImageInfo, ...]
    """Stale images of ours that are gone now."""
    kept: tuple[tuple[ImageInfo, str], ...]
    """Stale images of ours the engine would not remove (in use by a container, or a parent of another image)."""

    @property
    def reclaimed(self) -> int:
        """Bytes the removed images took (shared layers may make the real figure smaller)."""
        return sum(info.size for info in self.removed)


def _wanted_bases(settings: ImageSettings) -> set[str]:
    """The bootstrapped base tags the current image folders would use."""
    suite = settings.suite or host_suite()
    if not suite:
        return set()
    script = _bootstrap_script(settings)
    wanted: set[str] = set()
    for name in folder_names(settings):
        folder = image_folder(settings, name)
        spec = _bootstrap_spec(folder) if folder is not None else None
        if spec is not None:
            wanted.add(
                bootstrap_tag(spec.repository, suite, _bootstrap_inputs(suite, sorted(set(spec.include)), script))
            )
    return wanted


async def _current_session_ids(engine: DockerEngine, settings: ImageSettings, refs: set[str]) -> set[str]:
    ids: set[str] = set()
    for ref in {*(folder_tag(name) for name in folder_names(settings)), *refs}:
        data = await _inspect(engine, ref)
        if data is not None:
            ids.add(str(data["Id"]))
    return ids


async def stale_images(engine: DockerEngine, settings: ImageSettings, *, in_use: set[str]) -> list[ImageInfo]:
    """The executor's own images that nothing current needs.

    Stale are: an untagged session image (an earlier build of a folder), an agent image derived from a session
    image that is no longer current, and a bootstrapped base that no image folder on the search path would use now.
    Images without the executor's labels are never listed.

    Args:
        engine: the engine.
        settings: the images section (its search path says which folders are current).
        in_use: further image references counted as current (the profiles' images).
    """
    current = await _current_session_ids(engine, settings, in_use)
    wanted = _wanted_bases(settings)
    stale: list[ImageInfo] = []
    for info in await list_images(engine):
        if info.kind == "session":
            is_stale = not info.tags
        elif info.kind == "agent":
            is_stale = info.derived_from not in current
        else:
            is_stale = not any(tag in wanted for tag in info.tags)
        if is_stale and info.image_id not in current:
            stale.append(info)
    return stale


async def remove_image(engine: DockerEngine, ref: str) -> ImageInfo:
    """Remove one image of ours (never by force: one in use by a container stays).

    Raises:
        ImageNotFound: no such image, or it is not one of the executor's (the message says to use docker rmi).
        ImageError: the engine refused (in use by a container, or a parent of another image).
    """
    data = await _inspect(engine, ref)
    if data is None:
        raise ImageNotFound(f"no image {ref!r}; executor image ls lists the executor's images")
    labels = _labels(data)
    if _kind(await _own_labels(engine, labels, str(data.get("Parent") or ""), {})) is None:
        raise ImageNotFound(
            f"{ref!r} is not one of the executor's images (it has none of its labels); "
            "the executor removes only its own: use docker rmi for others"
        )
    info = next((i for i in await list_images(engine) if i.image_id == data["Id"]), None)
    image_id = str(data["Id"])
    # By id when asked by id, else by the tag asked for: removing one tag of several keeps the image.
    target = image_id if ref in (image_id, image_id.removeprefix("sha256:")) else ref
    await _remove(engine, target)
    return info or ImageInfo(
        tags=tuple(data.get("RepoTags") or ()),
        image_id=image_id,
        size=int(data.get("Size") or 0),
        created=str(data.get("Created") or ""),
        kind="session",
        inputs_hash=labels.get(LABEL_INPUTS),
    )


async def _remove(engine: DockerEngine, ref: str) -> None:
    def call() -> None:
        engine.client.api.remove_image(ref, force=False, noprune=False)

    await engine.call(call, what=f"remove image {ref}", idempotent=False)


async def prune_images(engine: DockerEngine, settings: ImageSettings, *, in_use: set[str]) -> PruneResult:
    """Remove the executor's stale images (see :func:`stale_images`); never anything else, never by force."""
    removed: list[ImageInfo] = []
    kept: list[tuple[ImageInfo, str]] = []
    for info in await stale_images(engine, settings, in_use=in_use):
        try:
            await _remove(engine, info.image_id)
        except ExecutorError as exc:
            if isinstance(exc.__cause__, de.NotFound):
                continue  # gone with another image a moment ago
            kept.append((info, str(exc).splitlines()[0][:200]))
        else:
            removed.append(info)
    return PruneResult(removed=tuple(removed), kept=tuple(kept))
