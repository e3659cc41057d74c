"""Building the agent (build.py): hashed names, reuse, the static release binary, compiler errors."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from executor.config import AgentSettings, load_settings
from executor.errors import AgentError, ConfigError
from executor.sandbox.agent.build import agent_build_dir, ensure_agent, ensure_fuzzer, ensure_unpack_fuzzer


def test_static_build_is_reused_and_static(agent_build_root: Path) -> None:
    """The release build is a static executable, named by its sources' hash, and a second call reuses it."""
    first = ensure_agent(AgentSettings(), agent_build_root)
    mtime = first.stat().st_mtime_ns
    again = ensure_agent(AgentSettings(), agent_build_root)
    assert again == first and again.stat().st_mtime_ns == mtime
    assert first.name.startswith("agent-") and "asan" not in first.name
    assert first.stat().st_mode & 0o777 == 0o755
    with first.open("rb") as f:
        head = f.read(4096)
    assert head[:4] == b"\x7fELF" and b"ld-linux" not in head  # no program interpreter: static
    done = subprocess.run([str(first), "version"], capture_output=True, text=True, timeout=10, check=False)
    assert done.returncode == 0 and "protocol 1" in done.stdout


def test_sanitized_build_has_its_own_name(agent_build_root: Path, asan_agent: Path) -> None:
    """The ASan build never overwrites the release binary."""
    assert asan_agent.name.startswith("agent-asan-")
    assert asan_agent != ensure_agent(AgentSettings(), agent_build_root)


def test_whole_settings_build_into_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Given the whole settings, the binary goes to <home>/agent unless agent.build_dir is set."""
    monkeypatch.delenv("EXECUTOR_AGENT__BUILD_DIR", raising=False)  # the suite's shared build folder
    settings = load_settings(overrides={"home": str(tmp_path / "home")})
    assert agent_build_dir(settings) == tmp_path / "home" / "agent"
    assert ensure_agent(settings).parent == tmp_path / "home" / "agent"
    custom = load_settings(overrides={"home": str(tmp_path), "agent": {"build_dir": str(tmp_path / "bin")}})
    assert agent_build_dir(custom) == tmp_path / "bin"


def test_build_dir_default_and_rejection() -> None:
    """agent.build_dir defaults to unset and a non-path value is refused at load time, naming the field."""
    assert AgentSettings().build_dir is None
    with pytest.raises(ConfigError, match=r"agent\.build_dir"):
        load_settings(overrides={"agent": {"build_dir": ["not", "a", "path"]}})


def test_missing_compiler_is_named(tmp_path: Path) -> None:
    """A compiler that does not exist gives an AgentError naming agent.cc."""
    with pytest.raises(AgentError, match=r"agent\.cc"):
        ensure_agent(AgentSettings(cc="/nonexistent/cc"), tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_frame_parser_fuzz_run(agent_build_root: Path) -> None:
    """The sanitizer-built mutation fuzzer runs 300k inputs through the frame and request parsers cleanly."""
    fuzzer = ensure_fuzzer(AgentSettings(), agent_build_root)
    for seed in ("1", "20261130"):
        done = subprocess.run([str(fuzzer), "150000", seed], capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        assert "iterations=150000" in done.stdout and "Sanitizer" not in done.stderr


def test_entry_stream_fuzz_run(agent_build_root: Path, tmp_path: Path) -> None:
    """The sanitizer-built fs-unpack fuzzer runs 100k mutated entry streams through the parser and writes the
    ones it accepts, with no sanitizer report, no entry outside the destination and no descriptor leaked."""
    fuzzer = ensure_unpack_fuzzer(AgentSettings(), agent_build_root)
    shm = Path("/dev/shm")
    scratch = Path(tempfile.mkdtemp(prefix="fuzz-unpack-", dir=shm if shm.is_dir() else tmp_path))
    try:
        for seed in ("1", "20261206"):
            done = subprocess.run(
                [str(fuzzer), "50000", str(scratch), seed], capture_output=True, text=True, timeout=120, check=False
            )
            assert done.returncode == 0, done.stderr[-4000:]
            assert "Sanitizer" not in done.stderr and "runtime error" not in done.stderr, done.stderr[-4000:]
            counts = dict(part.split("=") for part in done.stderr.split())
            assert counts["iterations"] == "50000"
            # the mutations reach the writer too, not only the parser's refusals
            assert int(counts["written"]) > 1000, done.stderr
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
