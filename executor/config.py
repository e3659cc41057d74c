"""Settings: one validated model, built once at the entry point.

Sources, highest precedence first:

1. explicit overrides passed to :func:`load_settings` (CLI flags, the Python API);
2. environment variables ``EXECUTOR_<SECTION>__<FIELD>`` (for example ``EXECUTOR_BASH__TIMEOUT_MS=5000``;
   lists and tables as JSON);
3. the TOML file named by ``--config`` or ``EXECUTOR_CONFIG``;
4. the defaults below.

Each component receives its own section and never reads the environment itself. Every field has a
default, a range and a docstring; the README's settings table is generated from this module
(:func:`settings_table`) and a test fails when it drifts.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import tomllib
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Final, Literal

import platformdirs
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from executor.durations import parse_idle_limit
from executor.environ import is_setting
from executor.errors import ConfigError
from executor.ids import is_image_ref
from executor.nesting import DEFAULT_MAX_DEPTH, NestingTooDeep, check_toml_depth, loads_json

__all__ = [
    "DEFAULT_DOCKER_HOST",
    "SHIPPED_IMAGES",
    "SHIPPED_POLICIES",
    "TOML_MAX_BYTES",
    "AgentSettings",
    "ArchiveSettings",
    "ArtifactSettings",
    "BashSettings",
    "CacheSettings",
    "DockerSettings",
    "FocusSettings",
    "GateSettings",
    "ImageSettings",
    "JournalSettings",
    "JudgeSettings",
    "McpSettings",
    "PoolSettings",
    "Profile",
    "ServiceSettings",
    "SessionSettings",
    "Settings",
    "WriteSettings",
    "docker_endpoint",
    "load_settings",
    "parse_bytes",
    "parse_idle_limit",
    "parse_toml",
    "plain_validation_message",
    "read_toml",
    "read_toml_bytes",
    "settings_table",
]

_REPO_ROOT = Path(__file__).resolve().parent.parent
_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_CREDENTIAL_RE = re.compile(r"KEY|SECRET|TOKEN|PASSWORD|CREDENTIAL", re.IGNORECASE)


TOML_MAX_BYTES: Final = 1024 * 1024
"""Largest settings, policy or image TOML file read (these are hand-written files of a few kilobytes)."""


def read_toml_bytes(path: Path) -> bytes:
    """The bytes of one TOML file, bounded: a regular file of at most :data:`TOML_MAX_BYTES`.

    Raises:
        FileNotFoundError: there is no such file (callers say which setting names it).
        ConfigError: not a regular file (a device, a FIFO, a folder), unreadable, or too large.
    """
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below like any non-regular file.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ConfigError(f"{path}: not a regular file; pass a TOML file")
    with os.fdopen(fd, "rb") as file:
        try:
            raw = file.read(TOML_MAX_BYTES + 1)
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    if len(raw) > TOML_MAX_BYTES:
        raise ConfigError(f"{path}: larger than {TOML_MAX_BYTES} bytes; a TOML file here is a few kilobytes")
    return raw


def parse_toml(raw: bytes, *, path: Path) -> dict[str, Any]:
    """Parse TOML bytes read from ``path``.

    Raises:
        ConfigError: not UTF-8, not TOML, or nested too deeply to parse; the message names the file.
    """
    try:
        # Measured before tomllib recurses into it (executor/nesting.py): a deep file is refused, not a stack overflow.
        check_toml_depth(raw)
        return tomllib.loads(raw.decode("utf-8"))
    except NestingTooDeep as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    except RecursionError:
        raise ConfigError(f"{path}: not valid TOML: arrays or tables nested too deeply") from None


def read_toml(path: Path) -> dict[str, Any]:
    """:func:`read_toml_bytes` then :func:`parse_toml` (the same errors)."""
    return parse_toml(read_toml_bytes(path), path=path)


def parse_bytes(value: object) -> int:
    """Parse a size: a number of bytes or a string such as ``"512m"``, ``"1GiB"``, ``"1.5g"``, ``"64k"``.

    Units are binary (``k`` = 1024), as Docker reads them; a fraction is allowed with a unit and rounds down to a
    whole byte (``"1.5g"`` is 1610612736), never without one (``"1.5"`` bytes is refused).
    """
    if isinstance(value, bool):
        raise ValueError("a size must be a number of bytes or a string like '512m'")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        match = _SIZE_RE.match(value)
        if match is None:
            raise ValueError(f"{value!r} is not a size; write bytes or a number with k, m, g or t, like '512m'")
        number, unit = match.group(1), match.group(2).lower()
        if "." in number and not unit:
            raise ValueError(f"{value!r} is not a whole number of bytes; give a unit ('1.5g') or whole bytes")
        whole, _, fraction = number.partition(".")
        scale = _UNITS[unit]
        # Exact integer arithmetic: float('1.1') * 1024**4 would be off by a few bytes.
        return int(whole) * scale + (int(fraction) * scale // 10 ** len(fraction) if fraction else 0)
    raise ValueError("a size must be a number of bytes or a string like '512m'")


Bytes = Annotated[int, BeforeValidator(parse_bytes)]


def _parse_mode(value: object) -> object:
    """A file mode: an octal string (``"644"``, ``"0644"``, ``"0o644"``), or an int whose decimal digits were meant
    as octal (``644``, which is 0o1204) refused with the spelling to use."""
    if isinstance(value, bool):
        raise ValueError(f"{value} is not a file mode; write one like 0o644")
    if isinstance(value, str):
        text = value.strip().lower().removeprefix("0o")
        if not text or any(ch not in "01234567" for ch in text):
            raise ValueError(f"{value!r} is not an octal file mode like 644 or 0o644")
        return int(text, 8)
    if isinstance(value, int) and 0o777 < value <= 777 and all(ch in "01234567" for ch in str(value)):
        raise ValueError(f'{value} reads as the octal mode {value:#o}; write 0o{value} in TOML (or "{value}")')
    return value


"""A byte count that also accepts ``"512m"``-style strings."""

_MIB = 1024**2

SHIPPED_IMAGES: Final = _REPO_ROOT / "images"
"""The image folders that ship with the executor (searched after ``images.images_dir``)."""
SHIPPED_POLICIES: Final = _REPO_ROOT / "policy"
"""The policy files that ship with the executor (searched after ``gate.policy_dir``)."""


_PROFILE_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def _existing_folder(value: Path | None) -> Path | None:
    """An operator's folder must exist: a misspelt one would silently leave the shipped files in force."""
    if value is not None and not value.is_dir():
        raise ValueError(f"{str(value)!r} is not an existing folder; create it or fix the path")
    return value


def _search_path(operator: Path | None, shipped: Path) -> tuple[Path, ...]:
    folders = [] if operator is None else [operator]
    if shipped.is_dir() and shipped not in folders:
        folders.append(shipped)
    return tuple(folders)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, data: Any) -> Any:
        """``timeout_ms = true`` is not 1 ms: a boolean where a number is expected is refused (TOML and JSON give
        booleans as they are; the environment's strings are parsed by each field)."""
        if isinstance(data, dict):
            for name, value in data.items():
                info = cls.model_fields.get(name) if isinstance(name, str) else None
                if isinstance(value, bool) and info is not None and _numeric(info.annotation):
                    raise ValueError(f"{name}: {str(value).lower()} is a boolean; give a number")
        return data


def _numeric(annotation: Any) -> bool:
    """Whether a field's type is a number (``int``, ``float``, optional or annotated ones)."""
    if annotation in (int, float):
        return True
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Annotated:
        return _numeric(args[0])
    return bool(args) and all(_numeric(arg) or arg is type(None) for arg in args) and any(_numeric(a) for a in args)


DEFAULT_DOCKER_HOST: Final = "unix:///var/run/docker.sock"
"""The engine's default local socket."""
_ENGINE_SCHEMES: Final = ("unix://", "tcp://")


def _check_engine_url(value: str, origin: str) -> str:
    if value.startswith("ssh://"):
        raise ValueError(
            f"{origin} {value!r}: ssh:// engines are not supported; forward the engine's socket "
            "(`ssh -NL /tmp/docker.sock:/var/run/docker.sock HOST`) and use unix:///tmp/docker.sock"
        )
    if not value.startswith(_ENGINE_SCHEMES) or len(value) <= len("unix://"):
        raise ValueError(f"{origin} {value!r} is not an engine address; use unix:///path or tcp://host:port")
    return value


def docker_endpoint(environ: Mapping[str, str]) -> str:
    """Where the Docker CLI would connect, from its environment: ``DOCKER_HOST``; else the current Docker context
    (``DOCKER_CONTEXT``, else ``currentContext`` in ``$DOCKER_CONFIG/config.json`` or ``~/.docker/config.json``), its
    ``docker`` endpoint read from the context's ``meta.json``; else :data:`DEFAULT_DOCKER_HOST`.

    Raises:
        ConfigError: the named context does not exist or its metadata cannot be read; the address is not a
            ``unix://`` or ``tcp://`` engine; the engine needs TLS (``DOCKER_TLS_VERIFY``, or a context with TLS
            material), which the executor does not speak yet. The message names where the value came from.
    """
    host = environ.get("DOCKER_HOST", "").strip()
    if host:
        if environ.get("DOCKER_TLS_VERIFY", "").strip() not in ("", "0"):
            raise ConfigError(f"DOCKER_HOST={host!r} with DOCKER_TLS_VERIFY: TLS engines are not supported yet")
        return _engine_url(host, "DOCKER_HOST")
    if environ.get("DOCKER_CONFIG"):
        folder = Path(environ["DOCKER_CONFIG"])
    elif environ.get("HOME"):
        folder = Path(environ["HOME"]) / ".docker"
    else:
        return DEFAULT_DOCKER_HOST
    name = environ.get("DOCKER_CONTEXT", "").strip()
    origin = "DOCKER_CONTEXT"
    if not name:
        origin = f"currentContext in {folder / 'config.json'}"
        try:
            config = loads_json((folder / "config.json").read_text(encoding="utf-8"), max_depth=DEFAULT_MAX_DEPTH)
        except FileNotFoundError:
            return DEFAULT_DOCKER_HOST
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{folder / 'config.json'}: cannot read the Docker configuration: {exc}") from None
        name = str(config.get("currentContext") or "default") if isinstance(config, dict) else "default"
    if name == "default":
        return DEFAULT_DOCKER_HOST
    context_id = hashlib.sha256(name.encode("utf-8")).hexdigest()
    meta = folder / "contexts" / "meta" / context_id / "meta.json"
    try:
        data = loads_json(meta.read_text(encoding="utf-8"), max_depth=DEFAULT_MAX_DEPTH)
        endpoint = data["Endpoints"]["docker"]
        url = str(endpoint["Host"])
    except FileNotFoundError:
        raise ConfigError(
            f"Docker context {name!r} ({origin}) does not exist under {folder}; `docker context ls` lists them"
        ) from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"Docker context {name!r} ({origin}): cannot read its endpoint from {meta}: {exc}") from None
    if (folder / "contexts" / "tls" / context_id / "docker").is_dir() or url.startswith("https://"):
        raise ConfigError(f"Docker context {name!r} ({origin}) uses TLS, which the executor does not support yet")
    return _engine_url(url, f"Docker context {name!r} ({origin})")


def _engine_url(value: str, origin: str) -> str:
    try:
        return _check_engine_url(value, origin)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


class DockerSettings(_Section):
    """How the executor reaches the Docker engine."""

    base_url: str = DEFAULT_DOCKER_HOST
    """Engine address: ``unix:///path`` (local) or ``tcp://host:port`` (remote; the agent then uses the exec bridge).
    Unset in every settings source, it is where the Docker CLI would connect: ``DOCKER_HOST``, else the current Docker
    context (``DOCKER_CONTEXT`` or ``docker context use``), else the default socket. ``ssh://`` and TLS engines are
    not supported yet (forward the socket over ssh)."""
    api_timeout_s: float = Field(60.0, gt=0, le=3600)
    """Timeout of one Engine API call, in seconds."""
    max_threads: int = Field(8, ge=1, le=128)
    """Worker threads that may run blocking Engine API calls at once."""
    retry_attempts: int = Field(3, ge=1, le=10)
    """Attempts for an idempotent engine call (inspect, list, remove); never for an exec or a write."""
    retry_wait_s: float = Field(0.2, ge=0, le=30)
    """Wait between two attempts of an idempotent engine call, in seconds."""
    gc_on_start: bool = True
    """Reap what earlier runs left behind (our exited containers, stale Created ones, orphaned volumes) whenever an
    executor opens; ``executor session gc`` does the same on demand."""
    stop_timeout_s: int = Field(2, ge=0, le=300)
    """Seconds a session container gets between SIGTERM and SIGKILL when it is stopped."""
    gc_min_age_s: float = Field(300.0, ge=0, le=30 * 86_400.0)
    """Age (from the ``executor.created`` label) a Created container or an orphaned volume must reach before
    ``gc`` reaps it, so that a session another process is opening right now is left alone."""

    @field_validator("base_url")
    @classmethod
    def _engine_address(cls, value: str) -> str:
        return _check_engine_url(value, "engine address")


class ImageSettings(_Section):
    """Where session images come from and how they are built offline."""

    images_dir: Path | None = None
    """An operator's folder of images (one sub-folder with a Dockerfile per image), searched before the shipped
    ``images/``: a name found in both is the operator's; unset means the shipped images only."""
    bootstrap: Literal["auto", "mmdebstrap", "debootstrap"] = "auto"
    """Tool that builds a Debian root filesystem when no base image is local or pullable; ``auto`` tries
    mmdebstrap, then debootstrap."""
    suite: str | None = None
    """Debian suite to bootstrap; unset means the host's own release codename."""
    try_pull: bool = True
    """Try to pull a missing base image before bootstrapping it."""
    pull_timeout_s: float = Field(30.0, gt=0, le=3600)
    """Upper bound of one pull attempt, in seconds; past it the pull is abandoned (then bootstrapped)."""
    build_timeout_s: float = Field(1800.0, gt=0, le=7200)
    """Upper bound for bootstrapping and building one image, in seconds."""

    @field_validator("images_dir")
    @classmethod
    def _images_dir_exists(cls, value: Path | None) -> Path | None:
        return _existing_folder(value)

    @property
    def search_path(self) -> tuple[Path, ...]:
        """Folders searched for an image folder, the operator's first, then the shipped ``images/``."""
        return _search_path(self.images_dir, SHIPPED_IMAGES)


class AgentSettings(_Section):
    """The in-container agent and the host's connection to it."""

    transport: Literal["auto", "socket", "exec"] = "auto"
    """``socket``: a unix socket in a host-mounted folder (local engines only); ``exec``: a byte stream through
    an exec bridge (works with remote engines); ``auto`` picks socket for a local engine."""
    connect_timeout_s: float = Field(10.0, gt=0, le=300)
    """How long to wait for a new session's agent to answer its handshake, in seconds."""
    max_frame_bytes: int = Field(1 * _MIB, ge=4096, le=16 * _MIB)
    """Largest protocol frame either side accepts; a larger length closes the connection."""
    detached_buffer_bytes: Bytes = Field(8 * _MIB, ge=64 * 1024, le=1024 * _MIB)
    """Per background-task stream bytes the agent keeps while no host is connected (in its private tmpfs);
    past this the oldest bytes are dropped and the drop is reported."""
    private_tmpfs_bytes: Bytes = Field(64 * _MIB, ge=_MIB, le=4096 * _MIB)
    """Size of the agent's private tmpfs (root only, not visible to commands)."""
    orphan_exit_s: float = Field(600.0, ge=0, le=7 * 86_400.0)
    """An unnamed session's agent sweeps everything and exits after this long with no host connection (a killed
    executor), so its container stops and ``session gc`` removes it; 0 never. Named sessions never do."""
    host_margin_s: float = Field(10.0, gt=0, le=3600)
    """The host's own bound on every agent call, beyond what the agent itself enforces: a run gets its deadline +
    grace + drain + this margin, any other call (task, file and probe operations) this margin alone. Past it the
    call ends as ``unresponsive`` (the container paused, the agent frozen, the engine stalled), partial output is
    kept, and the session is marked unhealthy. A run without a deadline has no host bound but cancellation."""
    cc: str = "cc"
    """C compiler used to build the agent from source."""
    build_dir: Path | None = None
    """Folder the agent binaries are compiled into (named by a hash of their sources); unset means
    ``<home>/agent``."""


class BashSettings(_Section):
    """The bash tool: per-call limits and process-group supervision."""

    timeout_ms: int = Field(120_000, ge=1, le=86_400_000)
    """Default foreground deadline of one command, in milliseconds."""
    max_timeout_ms: int = Field(600_000, ge=1, le=86_400_000)
    """Largest per-call ``timeout_ms`` a caller may ask for; a larger one is refused before anything runs."""
    grace_ms: int = Field(3_000, ge=0, le=600_000)
    """SIGTERM-to-SIGKILL grace on the whole process group, in milliseconds."""
    drain_ms: int = Field(1_000, ge=0, le=600_000)
    """How long pipes are drained after the direct child exits, in milliseconds; a descendant holding a
    pipe cannot hang the call past it."""
    max_command_bytes: int = Field(2 * _MIB, ge=16, le=16 * _MIB)
    """Largest command string accepted; a larger one is refused before the gate sees it. A command longer than the
    kernel's one-argument limit (128 KiB) travels ahead of its stdin on the command's stdin pipe, so every command
    under this cap runs."""
    max_stdin_bytes: Bytes = Field(64 * _MIB, ge=0, le=1024 * _MIB)
    """Largest stdin a caller may supply."""
    max_env_bytes: Bytes = Field(256 * 1024, ge=1024, le=768 * 1024)
    """Most bytes of environment entries a caller may add to one command (``NAME=value`` each, as the kernel counts
    them; one entry is at most 128 KiB whatever this says). A larger value belongs in a file."""
    orphans: Literal["kill", "keep"] = "kill"
    """What happens to processes a foreground command left running: ``kill`` them (and list them in the result),
    or ``keep`` them until the session closes."""
    max_background_tasks: int = Field(32, ge=1, le=1024)
    """Background tasks one session may run at once."""

    @field_validator("max_timeout_ms")
    @classmethod
    def _cap_covers_default(cls, value: int, info: Any) -> int:
        default = info.data.get("timeout_ms")
        if default is not None and value < default:
            raise ValueError(f"max_timeout_ms ({value}) must be at least timeout_ms ({default})")
        return value


class ArchiveSettings(_Section):
    """Uploads' archives (``executor cp`` into a session, ``PUT /v1/sessions/{s}/files``, and a ``tar -x`` the gate
    lists from a supplied stdin): the work reading one may cost on the host. The compressed size is bounded by
    ``bash.max_stdin_bytes`` (in-process) and ``service.max_request_bytes`` (the service). An upload past a bound is
    refused naming it (exit 2 on the CLI, 400 from the service); a ``tar -x`` stdin the gate could not list within
    them is judged unseen. Expanded bytes are never written on the host past ``max_expanded_bytes``."""

    max_expanded_bytes: Bytes = Field(256 * _MIB, ge=_MIB, le=64 * 1024 * _MIB)
    """Most bytes of tar an archive may expand to once decompressed (headers and contents). What an upload writes
    travels to the session as its command's stdin, so ``bash.max_stdin_bytes`` bounds that too."""
    max_members: int = Field(100_000, ge=1, le=1_000_000)
    """Most members (files, folders, links) one archive may hold."""
    max_seconds: float = Field(30.0, gt=0, le=3600)
    """Most seconds reading one archive may take on the host."""


class WriteSettings(_Section):
    """The write tool: staged, symlink-safe file writes."""

    max_bytes: Bytes = Field(64 * _MIB, ge=0, le=1024 * _MIB)
    """Largest file content one write may carry."""
    new_file_mode: Annotated[int, BeforeValidator(_parse_mode)] = Field(0o644, ge=0, le=0o777)
    """Mode of a file the write creates (an existing file keeps its own mode): permission bits only, as ``0o644`` in
    TOML or ``"644"`` / ``"0644"`` (octal) as a string or in the environment."""
    diff_max_lines: int = Field(200, ge=1, le=100_000)
    """Lines of unified diff shown for review; the rest is summarised."""
    diff_line_chars: int = Field(2_000, ge=80, le=1_000_000)
    """Longest diff line shown; a longer one (a minified file) is cut so a review stays bounded in bytes."""
    diff_source_bytes: Bytes = Field(256 * 1024, ge=1024, le=64 * _MIB)
    """Of each side, at most this much is diffed (difflib is quadratic in the worst case); the review says so."""
    op_timeout_ms: int = Field(120_000, ge=1_000, le=3_600_000)
    """Deadline of one file operation in the agent (stat, read, staged write) before its content is counted."""
    op_timeout_ms_per_mib: int = Field(1_000, ge=0, le=600_000)
    """Extra deadline per MiB of content carried to the agent."""
    max_path_chars: int = Field(4096, ge=16, le=65536)
    """Longest path accepted."""
    max_component_chars: int = Field(255, ge=1, le=4096)
    """Longest single path component accepted."""
    read_max_bytes: Bytes = Field(64 * _MIB, ge=0, le=64 * _MIB)
    """Largest file ``read_file`` returns; a larger file is refused (the agent buffers what it sends)."""


class ArtifactSettings(_Section):
    """The artifact store and the recovery tools (``read_output``, ``search_output``)."""

    capture_max_bytes: Bytes = Field(256_000, ge=1024, le=64 * 1024 * _MIB)
    """Per-stream bytes kept; past it the head and the tail are kept and the drop is recorded."""
    display_max_chars: int = Field(8_000, ge=256, le=1_000_000)
    """Character budget of one presented view or recovery page (a task read too). A text that sanitizing makes
    longer than this budget and 2048 characters for notices (control or invisible characters are shown escaped) is
    cut in its middle, saying so."""
    view_head_lines: int = Field(10, ge=0, le=10_000)
    """Lines of each stream shown in the bounded view before the recovery notice."""
    read_page_lines: int = Field(200, ge=1, le=100_000)
    """Lines one ``read_output`` page holds at most when the caller gives no ``line_count``."""
    journal_mode: Literal["wal", "delete", "truncate"] = "wal"
    """SQLite journal mode of the index; ``delete``/``truncate`` where WAL's shared memory does not work."""
    busy_timeout_s: float = Field(10.0, gt=0, le=600)
    """How long an index operation waits for another process's lock on the index (or its first set-up) before it
    fails, in seconds."""
    sqlite_synchronous: Literal["normal", "full"] = "normal"
    """SQLite ``synchronous`` level of the index: ``normal`` (safe from corruption under WAL; a power cut can lose
    the last commits, like the unsynced stream files) or ``full`` (an fsync per commit, and each stream's file is
    fsynced before its artifact is recorded finished)."""
    session_max_bytes: Bytes = Field(512 * _MIB, ge=_MIB, le=1024**4)
    """Stored bytes per session before the oldest artifacts are evicted."""
    session_max_artifacts: int = Field(10_000, ge=1, le=10_000_000)
    """Stored artifacts per session before the oldest are evicted."""
    tombstone_horizon_s: float = Field(7 * 86_400.0, ge=0, le=365 * 86_400.0)
    """How long an evicted artifact is remembered as evicted; after that it is unknown."""
    search_timeout_s: float = Field(1.0, gt=0, le=60)
    """Time bound of one ``search_output`` call's regex work, in seconds."""
    scan_max_chars: int = Field(1_000_000, ge=1_000, le=1_000_000_000)
    """Characters one ``search_output`` call scans before it stops at a line boundary."""
    line_ceiling_chars: int = Field(16_000_000, ge=1_000, le=1_000_000_000)
    """Longest single line a search finishes, counted in stored bytes (at least its characters, and what it
    costs in memory); a longer one is reported unscannable and the scan goes on past it."""
    pattern_max_chars: int = Field(1_000, ge=1, le=100_000)
    """Longest search pattern accepted."""
    pattern_max_expansion: int = Field(20_000, ge=100, le=10_000_000)
    """Most items a search pattern may unroll to when compiled (nested counted repeats multiply their minimum
    counts: ``(?:a{1000}){100}`` is 100000); compiling is not bounded by ``search_timeout_s``, so a short pattern
    could hold the event loop for seconds and take gigabytes. Ranges from 0 (``{0,n}``) unroll nothing."""


class JudgeSettings(_Section):
    """The pluggable judge ("System One")."""

    provider: Literal["rules", "openai"] = "rules"
    """``rules``: the embedded offline, deterministic judge; ``openai``: any chat-completions endpoint."""
    base_url: str = "http://127.0.0.1:8000/v1"
    """Base URL of the OpenAI-compatible endpoint (``openai`` provider)."""
    model: str = "gpt-4o-mini"
    """Model name sent to the endpoint (``openai`` provider)."""
    api_key_env: str = "OPENAI_API_KEY"
    """Name of the host environment variable holding the API key; the key is never logged nor put in a container."""
    timeout_s: float = Field(20.0, gt=0, le=600)
    """Time bound of one judgment call, in seconds; a timeout fails closed."""
    call_budget: int = Field(500, ge=0, le=1_000_000)
    """Provider calls one session may make; past it judgments fail closed."""
    max_response_bytes: int = Field(65_536, ge=256, le=16 * _MIB)
    """Largest provider answer accepted; a larger one fails closed."""
    max_request_bytes: int = Field(131_072, ge=1024, le=16 * _MIB)
    """Largest request body sent to the provider; larger material fails closed (ask) without a call, so an
    oversized command or diff never costs a provider call."""


class CacheSettings(_Section):
    """The shared exact-answer cache of judgments."""

    enabled: bool = True
    """Share one in-memory cache between every reflex."""
    max_entries: int = Field(1024, ge=1, le=1_000_000)
    """Entries kept before the least recently used is dropped."""


class GateSettings(_Section):
    """Static policy, judgment and approvals."""

    policy_dir: Path | None = None
    """An operator's folder of policy TOML files, searched before the shipped ``policy/``; a profile names a policy
    by its stem, and a stem found in both is the operator's. Unset means the shipped policies only."""
    trust: int = Field(1, ge=0, le=3)
    """Trust level N over judged levels (0 none, 1 risk, 2 danger, 3 catastrophic): 0 asks on risk or any flag
    and denies danger, 1 asks on risk and denies danger, 2 allows risk and asks on danger, 3 allows up to danger;
    catastrophic is denied and a static ask/deny holds at every N."""
    judge: JudgeSettings = JudgeSettings()
    """The judge provider."""
    cache: CacheSettings = CacheSettings()
    """The answer cache."""
    stdin_program_max_bytes: Bytes = Field(_MIB, ge=0, le=64 * _MIB)
    """Largest supplied stdin the gate reads as the program of a shell or interpreter the command runs on it
    (``bash``, ``sh -s``, ``python3 -``); a larger one, or one that is not UTF-8 text, is a program nobody can
    review: the judge asks."""

    @field_validator("policy_dir")
    @classmethod
    def _policy_dir_exists(cls, value: Path | None) -> Path | None:
        return _existing_folder(value)

    @property
    def policy_search_path(self) -> tuple[Path, ...]:
        """Folders searched for a policy file, the operator's first, then the shipped ``policy/``."""
        return _search_path(self.policy_dir, SHIPPED_POLICIES)


class FocusSettings(_Section):
    """Focus rollout and sanitizing of presented views."""

    mode: Literal["off", "shadow", "on"] = "off"
    """``off``: bounded view, no focus judgment; ``shadow``: judge and journal, present the off view;
    ``on``: present the selected sections with a coverage receipt."""
    max_sections: int = Field(2_000, ge=1, le=1_000_000)
    """Sections one stream is split into at most; the rest is one trailing section."""
    redact_credentials: bool = True
    """Redact credential-shaped strings in presented views (the stored artifact stays raw)."""


class JournalSettings(_Section):
    """The decision journal (ndjson, one per session)."""

    fsync: Literal["always", "action", "close", "never"] = "action"
    """When appended events are fsynced. In every mode each event is written to the file before the call that
    records it goes on, so a killed process loses no record of a returned result. Against a power cut: ``always``
    fsyncs each event; ``action`` fsyncs at each action boundary (before a command or write executes, before its
    result is returned, when an approval resolves, when the session closes: one fsync covers every earlier event,
    and concurrent actions share it); ``close`` only when the session closes; ``never`` not at all."""
    max_line_bytes: int = Field(16 * _MIB, ge=1024, le=256 * _MIB)
    """Longest journal line a reader accepts (and a writer emits): an action event carries its whole command, so
    this stays well above ``bash.max_command_bytes`` (JSON escaping can grow a command several times)."""
    max_depth: int = Field(32, ge=2, le=1000)
    """Deepest JSON nesting a reader accepts."""
    max_file_bytes: Bytes = Field(1024 * _MIB, ge=_MIB, le=1024**4)
    """Largest journal a reader (``executor replay``) reads; only regular files are read at all."""
    max_issues: int = Field(1000, ge=1, le=1_000_000)
    """Refused lines a read lists one by one (the first ones, in file order); past this many they are only counted,
    so a journal of garbage costs a bounded report (refusals of the journal's end are always listed)."""


class McpSettings(_Section):
    """The MCP server surface."""

    host: str = "127.0.0.1"
    """Address the HTTP transport binds."""
    port: int = Field(8765, ge=0, le=65535)
    """Port the HTTP transport binds (0: any free port)."""
    tokens: tuple[str, ...] = ()
    """Bearer tokens accepted over HTTP; each owns its own sessions and artifacts. Empty: HTTP refuses to start."""

    @field_validator("tokens")
    @classmethod
    def _long_tokens(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for token in value:
            if len(token) < 16:
                raise ValueError("each bearer token must be at least 16 characters")
        return value


def _check_tokens(value: tuple[str, ...]) -> tuple[str, ...]:
    for token in value:
        if len(token) < 16:
            raise ValueError("each bearer token must be at least 16 characters")
    return value


class ServiceSettings(_Section):
    """The long-running service (``executor serve``): its listeners, bounds and shutdown."""

    socket: Path | None = None
    """Unix socket path (mode 0600); unset: ``service.sock`` under ``home``."""
    tcp: bool = False
    """Also listen on TCP at ``host:port`` (requires ``tokens``)."""
    host: str = "127.0.0.1"
    """Address the TCP listener binds."""
    port: int = Field(8766, ge=0, le=65535)
    """Port the TCP listener binds (0: any free port)."""
    tokens: tuple[str, ...] = ()
    """Bearer tokens; each owns its own sessions, tasks, artifacts and approvals (the unix socket accepts none)."""
    max_request_bytes: Bytes = Field(64 * _MIB, ge=1024, le=4 * 1024 * _MIB)
    """Most bytes a request carries (an upload's tar, a write's content, an exec's stdin), counted decoded: their
    base64 in a JSON body does not count against it (a JSON body may hold that base64 plus six times
    `bash.max_command_bytes` plus 1 MiB). More is refused with 413, from the declared length before the body is
    read when it is that far over."""
    max_json_depth: int = Field(DEFAULT_MAX_DEPTH, ge=2, le=500)
    """Deepest nesting of arrays and objects a JSON message may have, on the HTTP API's bodies and on MCP (each
    stdio line, each HTTP body); deeper is refused (400, or a JSON-RPC error) before it is parsed, and the server
    goes on serving."""
    stream_buffer_bytes: Bytes = Field(4 * _MIB, ge=4096, le=1024 * _MIB)
    """Per-stream memory of a live exec stream for a client that reads slower than the command writes; past it the
    bytes wait on disk (``stream_spool_bytes``)."""
    stream_spool_bytes: Bytes = Field(1024 * _MIB, ge=0, le=64 * 1024 * _MIB)
    """Most bytes of a live exec stream waiting for a slow client in an unlinked file under the home (the file starts
    again empty whenever the client catches up; 0: none). Past it the client loses chunks: a ``dropped`` event and
    the result's ``stdout_dropped``/``stderr_dropped`` count them; the artifact keeps every byte either way."""
    result_stream_max_bytes: Bytes = Field(1 * _MIB, ge=0, le=1024 * _MIB)
    """Raw stdout/stderr carried in an exec result (each); ``*_whole`` says whether it is all of it."""
    download_max_bytes: Bytes = Field(256 * _MIB, ge=1024, le=16 * 1024 * _MIB)
    """Largest tar stream a download (``GET .../files``, ``executor cp`` out of a session) may produce: past it the
    download is refused (413) or, once streaming, cut short. The stream is never held whole: what a slow client has
    not read yet waits in memory up to ``stream_buffer_bytes``, then in an unlinked file under the home."""
    approval_timeout_s: float = Field(600.0, gt=0, le=7 * 86_400.0)
    """How long an ask waits for an out-of-band answer (``POST /v1/approvals/{id}``) before it is denied."""
    shutdown_grace_s: float = Field(30.0, ge=0, le=3600.0)
    """On SIGTERM, how long running commands may finish before their process groups are killed."""

    @field_validator("tokens")
    @classmethod
    def _long_tokens(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _check_tokens(value)


class SessionSettings(_Section):
    """Session lifetimes: the idle limit of named sessions and of sessions opened through the service."""

    idle_s: Annotated[float | None, BeforeValidator(parse_idle_limit)] = 3600.0
    """Default idle limit, in seconds (or a duration like ``"30m"``), of a named session and of any session opened
    through the service: once this long has passed since its last command or call ended (and none runs), it is
    stopped; a named session's
    workspace volume is kept (using the name again recreates its container). None (``"none"`` in TOML or the
    environment): no limit. A session may set its own at creation (``session start --idle``, ``idle_s`` in the
    service's ``POST /v1/sessions`` and the Python API); a named session's limit is stored with it (a container
    label) and enforced by the service, by ``session gc`` and by every executor start (``docker.gc_on_start``);
    its background tasks are stopped first, their output kept."""
    idle_check_s: float = Field(30.0, gt=0, le=86_400.0)
    """How often the service looks for idle sessions of its home that it does not hold (found by their labels,
    after a restart too) and removes what ``session gc`` removes (exited containers of unnamed sessions, left by a
    killed service), in seconds; the sessions it holds are checked every second."""


class PoolSettings(_Section):
    """A profile's warm pool: sessions created, started and connected before anyone asks (``executor.session.pool``).

    Pooled sessions serve unnamed sessions opened with exactly this profile; named ones, and ones whose image or
    settings differ, open cold.
    """

    size: int = Field(0, ge=0, le=256)
    """Ready sessions kept by the in-process API (``open_executor``); 0 keeps none."""
    service_size: int = Field(2, ge=0, le=256)
    """Ready sessions kept when the service opens the executor (``open_executor(pool="service")``)."""
    max_idle_s: float = Field(600.0, gt=0, le=7 * 86_400.0)
    """An unclaimed session older than this is removed and replaced by a fresh one."""
    max_creating: int = Field(2, ge=1, le=64)
    """Sessions created at once for this pool (refills and queued opens wait their turn instead of thrashing)."""
    refill_delay_s: float = Field(0.25, ge=0, le=60)
    """After a claim, wait this long before creating its replacement, unless opens are waiting (the engine's work
    would slow the claimed session's first commands)."""
    backoff_initial_s: float = Field(0.5, gt=0, le=600)
    """Wait after a failed creation before the pool tries again; doubled after each further failure."""
    backoff_max_s: float = Field(30.0, gt=0, le=3600)
    """The longest wait between creations while the engine keeps failing."""
    image_check_s: float = Field(10.0, gt=0, le=86_400)
    """How often the profile's image is looked up; waiting sessions made from an older build are retired."""

    @model_validator(mode="after")
    def _backoff_order(self) -> PoolSettings:
        if self.backoff_max_s < self.backoff_initial_s:
            raise ValueError("pool.backoff_max_s must be at least pool.backoff_initial_s")
        return self


_FORBIDDEN_MOUNT_HINT = "mounting the Docker socket hands the sandbox the host; remove it (no loosening allows this)"


class Profile(_Section):
    """A session profile: image, limits and the container's hardening.

    Defaults are the hardened ones; loosening is explicit. Privileged mode, the Docker socket, host
    namespaces and host devices can never be asked for.
    """

    image: str = "base"
    """A folder name under ``images/`` (built on demand) or any local image reference (``name:tag``)."""

    memory: Bytes = Field(1024 * _MIB, ge=32 * _MIB, le=1024**4)
    """Memory limit; swap is disabled (memory+swap is set equal)."""
    cpus: float = Field(1.0, ge=0.01, le=256)
    """CPU quota in cores (at least 0.01; the engine refuses more than the host has)."""
    pids: int = Field(512, ge=16, le=1_000_000)
    """Processes and threads the container may hold (the pids cgroup counts threads)."""
    file_size: Bytes = Field(1024 * _MIB, ge=_MIB, le=1024**4)
    """Largest file a command may write (RLIMIT_FSIZE)."""
    nofile: int = Field(4096, ge=64, le=1_048_576)
    """Open files per process (RLIMIT_NOFILE)."""
    tmp_size: Bytes = Field(256 * _MIB, ge=_MIB, le=1024**4)
    """Size of the ``/tmp`` tmpfs (counts against memory)."""
    home_size: Bytes = Field(64 * _MIB, ge=_MIB, le=1024**4)
    """Size of the session user's home tmpfs (counts against memory)."""
    shm_size: Bytes = Field(64 * _MIB, ge=_MIB, le=1024**4)
    """Size of ``/dev/shm``."""
    network: str = "none"
    """``none`` (default) or ``bridge`` (explicit egress); ``host`` and other containers' namespaces are refused."""
    user: str = "1000:1000"
    """``uid:gid`` commands run as; root is refused."""
    workspace: str = "/workspace"
    """Absolute path of the session's workspace volume inside the container."""
    home: str = "/home/agent"
    """Absolute path of the session user's home: a private tmpfs of ``home_size``, and ``HOME`` for commands."""
    read_only_root: bool = True
    """Mount the image's root filesystem read-only."""
    runtime: Literal["runc", "runsc"] = "runc"
    """OCI runtime of the container: ``runc`` (shares the host kernel) or ``runsc`` (gVisor: a user-space kernel
    as a second wall, slower to start and per syscall; the engine must have it registered, see
    ``images/register-runsc.sh``); under ``runsc`` the agent is reached through the exec bridge."""
    seccomp: Literal["pinned", "engine-default"] = "pinned"
    """``pinned``: the profile shipped with the executor, passed inline; ``engine-default``: the engine's own."""
    log_driver: Literal["none", "capped"] = "none"
    """Container log: ``none``, or ``capped`` (json-file, 1 MiB, one file)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment for the container; credential-shaped names are refused (secrets never enter a sandbox)."""
    policy: str = "default"
    """Name (file stem) of the profile's policy: found in ``gate.policy_dir`` first, then in the shipped ``policy/``."""
    trust: int | None = Field(None, ge=0, le=3)
    """Trust level for this profile's sessions (see ``gate.trust``); unset means ``gate.trust``."""
    gate_mode: Literal["enforce", "observe"] = "enforce"
    """``enforce``: the gate's deny and ask hold. ``observe`` (harness mode, for unattended evaluation runs): the
    gate still evaluates and journals every action but never blocks one, so the container is the only boundary;
    the session's ``session_opened`` journal event says so. Never the default: a profile (or the inspect
    integration's sandbox config) must set it."""
    privileged: bool = False
    """Never allowed; present only so that asking for it fails loudly."""
    pid_mode: str = "private"
    """Never ``host``."""
    ipc_mode: str = "private"
    """Never ``host``."""
    devices: tuple[str, ...] = ()
    """Never allowed: host devices."""
    volumes: dict[str, str] = Field(default_factory=dict)
    """Extra named volumes: ``{volume_name: container_path}``; host paths and the Docker socket are refused."""
    pool: PoolSettings = PoolSettings()
    """The profile's warm pool (sizes, idle limit, creation concurrency, backoff)."""

    @field_validator("image")
    @classmethod
    def _image_is_a_reference(cls, value: str) -> str:
        if not is_image_ref(value):
            raise ValueError(f"{value!r} is not an image folder's name or an image reference ([registry/]name[:tag])")
        return value

    @field_validator("privileged")
    @classmethod
    def _never_privileged(cls, value: bool) -> bool:
        if value:
            raise ValueError("privileged containers are never allowed; remove 'privileged' from the profile")
        return value

    @field_validator("pid_mode", "ipc_mode")
    @classmethod
    def _private_namespaces(cls, value: str) -> str:
        if value != "private":
            raise ValueError(f"{value!r}: host or shared namespaces are never allowed; use 'private'")
        return value

    @field_validator("devices")
    @classmethod
    def _no_devices(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if value:
            raise ValueError("host devices are never passed into a session; remove 'devices'")
        return value

    @field_validator("network")
    @classmethod
    def _network(cls, value: str) -> str:
        if value not in ("none", "bridge"):
            raise ValueError(
                f"network {value!r} is not allowed: use 'none' (default) or 'bridge' for explicit egress; "
                "the host's and other containers' namespaces are never shared"
            )
        return value

    @field_validator("user")
    @classmethod
    def _unprivileged_user(cls, value: str) -> str:
        match = re.fullmatch(r"(\d+):(\d+)", value)
        if match is None:
            raise ValueError(f"user {value!r} must be numeric 'uid:gid', like '1000:1000'")
        if int(match.group(1)) == 0 or int(match.group(2)) == 0:
            raise ValueError("commands never run as root (uid or gid 0); pick an unprivileged 'uid:gid'")
        if max(int(match.group(1)), int(match.group(2))) >= 2**32 - 1:
            raise ValueError(f"user {value!r}: uid and gid must be below 4294967295")
        return value

    @field_validator("workspace", "home")
    @classmethod
    def _absolute_workspace(cls, value: str) -> str:
        if not value.startswith("/") or not value.strip("/") or "\0" in value or "/.." in value:
            raise ValueError(f"{value!r} must be an absolute path below '/', like '/workspace'")
        return "/" + "/".join(part for part in value.split("/") if part and part != ".")

    @field_validator("env")
    @classmethod
    def _no_secrets(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if _CREDENTIAL_RE.search(name):
                raise ValueError(f"env {name!r} looks like a credential; secrets are never put in a container")
            if not name or "=" in name or "," in name or "\0" in name:
                raise ValueError(f"env name {name!r} must be non-empty without '=', ',' or NUL")
        return value

    @field_validator("volumes")
    @classmethod
    def _named_volumes_only(cls, value: dict[str, str]) -> dict[str, str]:
        for source, target in value.items():
            if "docker.sock" in source or "docker.sock" in target:
                raise ValueError(_FORBIDDEN_MOUNT_HINT)
            if source.startswith(("/", ".", "~")) or "/" in source:
                raise ValueError(f"volume {source!r} is a host path; only named volumes are allowed")
            if not target.startswith("/"):
                raise ValueError(f"volume target {target!r} must be an absolute container path")
        return value

    @model_validator(mode="after")
    def _volumes_have_their_own_place(self) -> Profile:
        taken = {
            self.workspace: "the workspace",
            self.home: "the session user's home",
            "/tmp": "the /tmp tmpfs",
            "/dev/shm": "/dev/shm",
            "/.executor": "the agent's own folder",
        }
        seen: dict[str, str] = {}
        for source, target in self.volumes.items():
            place = "/" + "/".join(part for part in target.split("/") if part and part != ".")
            for mount, what in taken.items():
                if place == mount or (mount == "/.executor" and place.startswith(mount + "/")):
                    raise ValueError(
                        f"volume {source!r} at {target!r} would be hidden by {what} ({mount}); mount it elsewhere"
                    )
            if place in seen:
                raise ValueError(f"volumes {seen[place]!r} and {source!r} are both mounted at {place!r}")
            seen[place] = source
        return self

    @model_validator(mode="after")
    def _runsc_needs_the_pinned_seccomp(self) -> Profile:
        if self.runtime == "runsc" and self.seccomp != "pinned":
            raise ValueError(
                "runtime 'runsc' needs seccomp 'pinned': this runsc answers the engine default's ENOSYS rules "
                "(clone3) with EPERM, so no thread could start; remove 'seccomp' or use runtime 'runc'"
            )
        return self

    @property
    def uid(self) -> int:
        """The numeric user id commands run as."""
        return int(self.user.split(":")[0])

    @property
    def gid(self) -> int:
        """The numeric group id commands run as."""
        return int(self.user.split(":")[1])


_SHIPPED_PROFILES: dict[str, dict[str, Any]] = {
    "default": {},
    "untrusted": {"runtime": "runsc"},
    "ci": {"policy": "ci", "trust": 2},
}
"""Profiles that always exist: ``default`` (the hardened defaults), ``untrusted`` (the same under gVisor) and ``ci``
(unattended pipelines in a throwaway session: the ``ci`` policy at trust 2). A settings source naming one refines
these values, field by field."""


def _default_home() -> Path:
    return Path(platformdirs.user_state_dir("executor"))


class Settings(BaseSettings):
    """Everything the executor can be told, one section per component."""

    model_config = SettingsConfigDict(
        env_prefix="EXECUTOR_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
    )

    home: Path = Field(default_factory=_default_home)
    """State folder: per-session artifacts, the SQLite index, journals, agent binaries and sockets. A relative path
    is taken from the current folder (and kept absolute: the engine mounts from it)."""

    @field_validator("home", mode="before")
    @classmethod
    def _absolute_home(cls, value: object) -> object:
        if isinstance(value, str | Path):
            if not str(value).strip():
                raise ValueError("is empty; name a folder (or leave EXECUTOR_HOME unset for the default)")
            path = Path(value).expanduser()
            path = path if path.is_absolute() else Path.cwd() / path
            if path.exists() and not path.is_dir():
                raise ValueError(f"{path} exists and is not a folder; name a folder for the executor's state")
            return path
        return value

    default_profile: str = "default"
    """Profile used when a session names none."""
    profiles: dict[str, Profile] = Field(
        default_factory=lambda: {name: Profile.model_validate(base) for name, base in _SHIPPED_PROFILES.items()}
    )
    """Named profiles; ``default`` (the hardened defaults), ``untrusted`` (the same under gVisor, ``runtime =
    "runsc"``) and ``ci`` (unattended pipelines: the ``ci`` policy at trust 2) always exist; a profile of the same
    name refines them field by field."""
    backend: str = Field("docker", pattern=r"^[a-z][a-z0-9_-]{0,31}$")
    """Sandbox backend, by its registered name (``docker``); an unknown name fails when a backend is opened, with
    the known names."""
    docker: DockerSettings = DockerSettings()
    """Engine connection."""
    images: ImageSettings = ImageSettings()
    """Session images."""
    agent: AgentSettings = AgentSettings()
    """In-container agent."""
    bash: BashSettings = BashSettings()
    """Bash tool."""
    archive: ArchiveSettings = ArchiveSettings()
    """Uploads' archives: the work reading one may cost."""
    write: WriteSettings = WriteSettings()
    """Write tool."""
    artifacts: ArtifactSettings = ArtifactSettings()
    """Artifact store and recovery tools."""
    gate: GateSettings = GateSettings()
    """Policy, judge, approvals, cache."""
    focus: FocusSettings = FocusSettings()
    """Focus and sanitize."""
    journal: JournalSettings = JournalSettings()
    """Decision journal."""
    mcp: McpSettings = McpSettings()
    """MCP server."""
    service: ServiceSettings = ServiceSettings()
    """The service (``executor serve``)."""
    sessions: SessionSettings = SessionSettings()
    """Session lifetimes (idle limits)."""

    @field_validator("profiles", mode="before")
    @classmethod
    def _shipped_profiles_exist(cls, value: object) -> object:
        # A source that names a shipped profile refines it (``[profiles.untrusted] memory = "2g"`` stays on runsc)
        # rather than replacing it with the plain defaults.
        if not isinstance(value, Mapping):
            return value
        for name in value:
            if not isinstance(name, str) or not _PROFILE_NAME.fullmatch(name):
                raise ValueError(
                    f"profile name {name!r} must be letters, digits, '_', '-' or '.' (at most 64, starting with a "
                    "letter or digit)"
                )
        merged: dict[str, Any] = dict(value)
        for name, base in _SHIPPED_PROFILES.items():
            given = merged.get(name)
            if given is None:
                merged[name] = dict(base)
            elif isinstance(given, Mapping):
                merged[name] = {**base, **given}
        return merged

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # load_settings() merges the sources itself so that precedence is explicit and testable;
        # the model only validates what it is given.
        return (init_settings,)

    def gate_for(self, profile: Profile) -> GateSettings:
        """The gate section as it applies to ``profile``'s sessions (its own trust level, when it sets one)."""
        if profile.trust is None:
            return self.gate
        return self.gate.model_copy(update={"trust": profile.trust})

    def profile(self, name: str | None = None) -> Profile:
        """Return the named profile (the default one for None); ConfigError names the known ones."""
        key = name or self.default_profile
        try:
            return self.profiles[key]
        except KeyError:
            known = ", ".join(sorted(self.profiles))
            raise ConfigError(f"no profile named {key!r}; known profiles: {known}") from None


def _deep_merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _env_layer(environ: Mapping[str, str]) -> dict[str, Any]:
    layer: dict[str, Any] = {}
    for name, raw in environ.items():
        if not is_setting(name):
            continue
        path = [part.lower() for part in name[len("EXECUTOR_") :].split("__")]
        value: Any = raw
        if raw[:1] in "[{":
            try:
                value = loads_json(raw, max_depth=DEFAULT_MAX_DEPTH)
            except NestingTooDeep as exc:
                raise ConfigError(f"{name}: {exc}") from None
            except ValueError:
                value = raw
        node = layer
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{name}: conflicts with another EXECUTOR_ variable")
        node[path[-1]] = value
    return layer


def plain_validation_message(message: str) -> str:
    """Pydantic prefixes a validator's own words with ``Value error, ``; the reader needs only the words."""
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            return message[len(prefix) :]
    return message


def _format_validation(error: ValidationError, origin: str) -> str:
    lines = [f"{origin}: {error.error_count()} invalid setting(s):"]
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "(top level)"
        message = plain_validation_message(item["msg"])
        if item["type"] == "extra_forbidden":
            message = "unknown setting; check the spelling against 'executor config show'"
        lines.append(f"  {where}: {message}")
    return "\n".join(lines)


def load_settings(
    config: Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Build the one settings object.

    Args:
        config: a TOML file; None falls back to ``EXECUTOR_CONFIG`` in ``environ``, then to defaults only.
        environ: the environment to read ``EXECUTOR_*`` from (the entry point passes ``os.environ``).
        overrides: explicit values (nested dicts) that win over everything else.

    Raises:
        ConfigError: the file is missing, not a regular file, too large or not TOML, or a field is invalid; the
            message names every bad field and the source it came from.
    """
    environ = environ or {}
    if config is None and environ.get("EXECUTOR_CONFIG"):
        config = Path(environ["EXECUTOR_CONFIG"])
    data: dict[str, Any] = {}
    origin = "defaults"
    if config is not None:
        origin = str(config)
        try:
            data = read_toml(config)
        except FileNotFoundError:
            raise ConfigError(f"config file {config} does not exist; pass an existing TOML file") from None
    env = _env_layer(environ)
    if env:
        origin += " + EXECUTOR_* environment"
    data = _deep_merge(data, env)
    if overrides:
        data = _deep_merge(data, overrides)
    docker_section = data.get("docker")
    if not (isinstance(docker_section, Mapping) and "base_url" in docker_section):
        # No executor setting names the engine: go where the Docker CLI would (DOCKER_HOST, then the context).
        data = _deep_merge(data, {"docker": {"base_url": docker_endpoint(environ)}})
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_validation(exc, origin)) from exc


def _rows(model: type[BaseModel], prefix: str) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, _Section):
            rows.extend(_rows(annotation, f"{key}."))
            continue
        if name == "profiles":
            rows.extend(_rows(Profile, "profiles.<name>."))
            continue
        default = field.get_default(call_default_factory=True)
        if isinstance(default, Path):
            shown = "(repo) " + default.name if default.is_relative_to(_REPO_ROOT) else "(platform state dir)"
        else:
            shown = json.dumps(default, default=str)
        description = " ".join((field.description or "").split())
        rows.append((key, shown, description))
    return rows


def settings_table() -> str:
    """The README's settings table, generated from the model."""
    lines = ["| setting | default | meaning |", "| --- | --- | --- |"]
    for key, default, description in _rows(Settings, ""):
        lines.append(f"| `{key}` | `{default}` | {description.replace('|', '/')} |")
    return "\n".join(lines)
