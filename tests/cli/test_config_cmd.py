"""`executor config check|show` end to end, as a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def _executor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "executor.cli", *args], capture_output=True, text=True, timeout=60, env=env, check=False
    )


def test_check_reports_every_bad_field_and_exits_2(tmp_path: Path) -> None:
    """A bad file gets field-level errors and exit code 2."""
    file = tmp_path / "bad.toml"
    file.write_text("[bash]\ntimeout_ms = 0\n[profiles.x]\nnetwork = 'host'\n")
    done = _executor("config", "check", str(file))
    assert done.returncode == 2
    assert "bash.timeout_ms" in done.stderr
    assert "profiles.x.network" in done.stderr


def test_check_accepts_a_good_file_in_json(tmp_path: Path) -> None:
    """A valid file passes and --json says so."""
    file = tmp_path / "good.toml"
    file.write_text("[bash]\ntimeout_ms = 5000\n")
    done = _executor("--json", "config", "check", str(file))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"outcome": "valid", "file": str(file)}


def test_show_prints_effective_settings_with_env_overrides(tmp_path: Path) -> None:
    """`config show` reflects EXECUTOR_* overrides."""
    env = {"PATH": "/usr/bin:/bin", "EXECUTOR_BASH__GRACE_MS": "42", "EXECUTOR_HOME": str(tmp_path)}
    done = _executor("--json", "config", "show", env=env)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["settings"]["bash"]["grace_ms"] == 42
    assert data["settings"]["home"] == str(tmp_path)
