"""The bash tool's validation: what is refused before anything runs, and the exact run it builds."""

from __future__ import annotations

from typing import Any

import pytest

from executor.config import load_settings
from executor.errors import CommandRejected, ConfigError
from executor.models import RunSpec, StdinFile
from executor.tools.bash import build_run_spec


def _spec(
    command: str = "true",
    *,
    overrides: dict[str, Any] | None = None,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    stdin: bytes | StdinFile | None = None,
    timeout_ms: int | None = None,
    background: bool = False,
) -> RunSpec:
    settings = load_settings(overrides=overrides)
    return build_run_spec(
        command,
        settings=settings.bash,
        profile=settings.profile(),
        cwd=cwd,
        env=env,
        stdin=stdin,
        timeout_ms=timeout_ms,
        background=background,
    )


def test_defaults_follow_the_settings() -> None:
    """A plain call gets the default deadline, grace, drain, the workspace as cwd and /dev/null stdin."""
    spec = _spec("echo hi")
    assert spec.timeout_ms == 120_000
    assert spec.grace_ms == 3_000
    assert spec.drain_ms == 1_000
    assert spec.cwd == "/workspace"
    assert spec.stdin is None
    assert spec.kill_orphans is True


def test_timeout_above_the_cap_is_refused() -> None:
    """A per-call timeout above max_timeout_ms is refused with a message naming the setting."""
    with pytest.raises(CommandRejected, match=r"above the cap of 600000 ms \(bash.max_timeout_ms\)"):
        _spec(timeout_ms=600_001)
    assert _spec(timeout_ms=600_000).timeout_ms == 600_000


def test_the_cap_is_a_setting() -> None:
    """Lowering max_timeout_ms lowers what a call may ask for."""
    overrides = {"bash": {"timeout_ms": 1000, "max_timeout_ms": 2000}}
    with pytest.raises(CommandRejected, match=r"cap of 2000 ms"):
        _spec(timeout_ms=2001, overrides=overrides)


def test_oversized_command_is_refused_before_anything_runs() -> None:
    """A command larger than max_command_bytes is refused, and the limit is configurable."""
    with pytest.raises(CommandRejected, match=r"above the 2097152-byte limit"):
        _spec("x" * 2_097_153)
    with pytest.raises(CommandRejected, match=r"above the 100-byte limit"):
        _spec("x" * 101, overrides={"bash": {"max_command_bytes": 100}})


def test_empty_and_nul_commands_are_refused() -> None:
    """Empty commands and NUL bytes cannot reach bash."""
    with pytest.raises(CommandRejected, match="empty"):
        _spec("   ")
    with pytest.raises(CommandRejected, match="NUL"):
        _spec("echo a\0b")
    with pytest.raises(CommandRejected, match=r"environment value of 'A' contains a NUL"):
        _spec(env={"A": "x\0y"})
    with pytest.raises(CommandRejected, match=r"cwd contains a NUL"):
        _spec(cwd="/tmp\0/x")


def test_the_environment_is_bounded_per_entry_and_in_all() -> None:
    """One entry is at most the kernel's 128 KiB; all of them at most bash.max_env_bytes (default 256 KiB); a cwd
    longer than a path is refused: none of them can reach the agent (a frame past its bound lost the session)."""
    assert load_settings().bash.max_env_bytes == 256 * 1024
    assert _spec(env={"A": "x" * (128 * 1024 - 3)}).env["A"]
    with pytest.raises(CommandRejected, match=r"entry 'A' is 131073 bytes; Linux passes at most 131072"):
        _spec(env={"A": "x" * (128 * 1024 - 2)})
    wide = {f"V{i}": "x" * 100_000 for i in range(3)}
    with pytest.raises(CommandRejected, match=r"above the 262144-byte limit \(bash\.max_env_bytes\)"):
        _spec(env=wide)
    assert _spec(env=wide, overrides={"bash": {"max_env_bytes": "768KiB"}}).env == wide
    with pytest.raises(CommandRejected, match=r"bash\.max_env_bytes"):
        _spec(env={"A": "x" * 2000}, overrides={"bash": {"max_env_bytes": 1024}})
    for bad in (1023, 768 * 1024 + 1):
        with pytest.raises(ConfigError, match=r"bash\.max_env_bytes"):
            load_settings(overrides={"bash": {"max_env_bytes": bad}})
    with pytest.raises(CommandRejected, match=r"cwd is longer than a path can be"):
        _spec(cwd="/" + "d" * 4095)


def test_stdin_cap_and_relative_cwd() -> None:
    """stdin above max_stdin_bytes is refused; a relative cwd lands inside the workspace."""
    with pytest.raises(CommandRejected, match=r"bash\.max_stdin_bytes"):
        _spec(stdin=b"x" * 11, overrides={"bash": {"max_stdin_bytes": 10}})
    assert _spec(cwd="src/app").cwd == "/workspace/src/app"
    assert _spec(cwd="/tmp").cwd == "/tmp"


def test_a_stdin_file_is_bounded_by_its_size_and_not_for_tasks() -> None:
    """A StdinFile larger than max_stdin_bytes is refused by its size; a background task cannot take one."""
    with pytest.raises(CommandRejected, match=r"stdin is 11 bytes.*bash\.max_stdin_bytes"):
        _spec(stdin=StdinFile(path="/x", size=11), overrides={"bash": {"max_stdin_bytes": 10}})
    assert _spec(stdin=StdinFile(path="/x", size=10), overrides={"bash": {"max_stdin_bytes": 10}}).stdin is not None
    with pytest.raises(CommandRejected, match="inline"):
        _spec(stdin=StdinFile(path="/x", size=1), background=True)


def test_orphans_keep_and_background_tasks_do_not_kill_leftovers() -> None:
    """orphans = "keep" and background tasks leave what the command started alone; tasks have no deadline."""
    assert _spec(overrides={"bash": {"orphans": "keep"}}).kill_orphans is False
    task = _spec(background=True)
    assert task.timeout_ms is None
    assert task.kill_orphans is False


@pytest.mark.parametrize(
    ("section", "field", "value"),
    [
        ("bash", "timeout_ms", 0),
        ("bash", "grace_ms", -1),
        ("bash", "drain_ms", -5),
        ("bash", "max_command_bytes", 0),
        ("bash", "orphans", "maybe"),
        ("bash", "max_background_tasks", 0),
    ],
)
def test_bad_bash_settings_are_rejected_at_load(section: str, field: str, value: object) -> None:
    """Out-of-range bash settings fail at load, naming the field."""
    with pytest.raises(ConfigError, match=rf"{section}\.{field}"):
        load_settings(overrides={section: {field: value}})


@pytest.mark.parametrize(
    "cwd", ["../../..", "..", "a/../../b", "./../workspace2", "/workspace/../etc", "/workspace/a/../../root"]
)
def test_a_cwd_that_normalises_out_of_the_workspace_is_rejected(cwd: str) -> None:
    """A relative cwd, or an absolute one into the workspace, whose '..' leads out of it is bad input, named."""
    profile = load_settings().profile()
    with pytest.raises(CommandRejected, match=r"^cwd '.*' leads out of the workspace \(to /.*\); pass a directory"):
        build_run_spec("pwd", settings=load_settings().bash, profile=profile, cwd=cwd)


@pytest.mark.parametrize(
    ("cwd", "resolved"),
    [("a/../b", "/workspace/a/../b"), ("..workspace", "/workspace/..workspace"), ("/tmp", "/tmp"), ("/", "/")],
)
def test_a_cwd_inside_the_workspace_or_absolute_elsewhere_is_taken(cwd: str, resolved: str) -> None:
    """'..' that stays inside, a name that merely starts with dots, and explicit absolute paths are accepted."""
    profile = load_settings().profile()
    assert build_run_spec("pwd", settings=load_settings().bash, profile=profile, cwd=cwd).cwd == resolved
