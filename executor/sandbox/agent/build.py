"""Compile the in-container agent from the C sources shipped in this package.

The binary's file name carries a hash of the sources, the compiler and the flags, so an unchanged agent is
never rebuilt and two versions never overwrite each other. A build writes a private temporary file and
renames it into place, so concurrent builders (two test processes, two sessions) are safe.

Blocking (it runs the compiler): call it from an entry point, or through ``trio.to_thread.run_sync``.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

from executor.config import AgentSettings, Settings
from executor.errors import AgentError

__all__ = [
    "SOURCE_DIR",
    "agent_build_dir",
    "ensure_agent",
    "ensure_fuzzer",
    "ensure_statx_shim",
    "ensure_unpack_fuzzer",
    "source_files",
]

SOURCE_DIR = Path(__file__).resolve().parent
"""Where the agent's C sources live."""

_COMMON = ["-std=c11", "-Wall", "-Wextra", "-Werror"]
_STATIC = [*_COMMON, "-O2", "-static"]
_SANITIZE = [
    *_COMMON,
    "-O1",
    "-g",
    "-fno-omit-frame-pointer",
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=undefined",
]
_SHARED = [*_COMMON, "-O2", "-shared", "-fPIC"]
_BUILD_TIMEOUT_S = 300


def source_files() -> list[Path]:
    """The agent's sources: every ``*.c``/``*.h`` here except the fuzz drivers and the preload shims, sorted."""
    return sorted(
        p
        for p in SOURCE_DIR.iterdir()
        if p.suffix in (".c", ".h") and not p.name.startswith(("fuzz_", "shim_")) and p.is_file()
    )


def agent_build_dir(settings: Settings) -> Path:
    """The folder binaries are built into: ``agent.build_dir``, else ``<home>/agent``."""
    return settings.agent.build_dir or settings.home / "agent"


def _digest(cc: str, flags: list[str], files: list[Path]) -> str:
    h = hashlib.sha256()
    h.update(cc.encode() + b"\0" + " ".join(flags).encode() + b"\0")
    for path in files:
        h.update(path.name.encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()[:20]


def _compile(cc: str, flags: list[str], files: list[Path], out: Path, *, sources: list[Path] | None = None) -> Path:
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    # `sources` are what the compiler is given; `files` (hashed into the name) may hold ones they #include
    compiled = [str(p) for p in (sources if sources is not None else files) if p.suffix == ".c"]
    try:
        try:
            proc = subprocess.run(
                [cc, *flags, "-o", str(tmp), *compiled],
                capture_output=True,
                text=True,
                timeout=_BUILD_TIMEOUT_S,
                check=False,
            )
        except FileNotFoundError:
            raise AgentError(f"C compiler {cc!r} not found; install one or set agent.cc") from None
        except subprocess.TimeoutExpired:
            raise AgentError(f"building the agent took more than {_BUILD_TIMEOUT_S}s; check {cc!r}") from None
        if proc.returncode != 0:
            raise AgentError(f"building the agent with {cc!r} failed:\n{proc.stderr.strip()[-4000:]}")
        # The session user runs it too (fs-* helpers), through a read-only mount.
        tmp.chmod(0o755)
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def ensure_agent(settings: Settings | AgentSettings, build_dir: Path | None = None, *, sanitize: bool = False) -> Path:
    """Return the path of the agent binary for the current sources, compiling it if needed.

    Args:
        settings: the whole settings (then ``build_dir`` defaults to :func:`agent_build_dir`) or the agent
            section (then ``build_dir`` defaults to ``agent.build_dir``).
        build_dir: where binaries live.
        sanitize: build with AddressSanitizer and UndefinedBehaviorSanitizer (dynamic, for host tests) instead
            of the static release binary.

    Raises:
        AgentError: no compiler, or the compiler failed (its message is included).
    """
    agent = settings.agent if isinstance(settings, Settings) else settings
    if build_dir is None:
        build_dir = agent_build_dir(settings) if isinstance(settings, Settings) else agent.build_dir
    if build_dir is None:
        raise AgentError("no folder to build the agent into: pass build_dir or set agent.build_dir")
    files = source_files()
    flags = _SANITIZE if sanitize else _STATIC
    name = f"agent-{'asan-' if sanitize else ''}{_digest(agent.cc, flags, files)}"
    return _compile(agent.cc, flags, files, build_dir / name)


def ensure_fuzzer(settings: AgentSettings, build_dir: Path) -> Path:
    """Return the sanitizer-built frame-parser fuzz driver (``fuzz_frames.c`` + ``frame.c``), compiling it if needed.

    Raises:
        AgentError: no compiler, or the compiler failed.
    """
    files = sorted([SOURCE_DIR / "fuzz_frames.c", SOURCE_DIR / "frame.c", SOURCE_DIR / "frame.h"])
    name = f"fuzz-frames-{_digest(settings.cc, _SANITIZE, files)}"
    return _compile(settings.cc, _SANITIZE, files, build_dir / name)


def ensure_unpack_fuzzer(settings: AgentSettings, build_dir: Path) -> Path:
    """Return the sanitizer-built fuzz driver of ``fs-unpack``'s entry-stream parser and writer (``fuzz_unpack.c``,
    which includes ``fileops.c``), compiling it if needed.

    Raises:
        AgentError: no compiler, or the compiler failed.
    """
    files = sorted([SOURCE_DIR / "fuzz_unpack.c", SOURCE_DIR / "fileops.c", SOURCE_DIR / "fileops.h"])
    name = f"fuzz-unpack-{_digest(settings.cc, _SANITIZE, files)}"
    return _compile(settings.cc, _SANITIZE, files, build_dir / name, sources=[SOURCE_DIR / "fuzz_unpack.c"])


def ensure_statx_shim(settings: Settings) -> Path:
    """Return the preload library commands get under runsc (``shim_statx.c``), compiling it if needed.

    Raises:
        AgentError: no compiler, or the compiler failed.
    """
    files = [SOURCE_DIR / "shim_statx.c"]
    name = f"shim-statx-{_digest(settings.agent.cc, _SHARED, files)}.so"
    return _compile(settings.agent.cc, _SHARED, files, agent_build_dir(settings) / name)
