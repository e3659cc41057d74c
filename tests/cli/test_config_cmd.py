"""`executor config check|show` end to end, as a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


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
    assert json.loads(done.stdout) == {"outcome": "completed", "exit_code": 0, "file": str(file), "notes": []}


def test_show_prints_effective_settings_with_env_overrides(tmp_path: Path) -> None:
    """`config show` reflects EXECUTOR_* overrides."""
    env = {"PATH": "/usr/bin:/bin", "EXECUTOR_BASH__GRACE_MS": "42", "EXECUTOR_HOME": str(tmp_path)}
    done = _executor("--json", "config", "show", env=env)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["settings"]["bash"]["grace_ms"] == 42
    assert data["settings"]["home"] == str(tmp_path)


@pytest.mark.docker
def test_check_resolves_every_reference_and_reports_all_at_once(tmp_path: Path) -> None:
    """A missing default profile, policy file and image are all reported together, exit 2, before any use."""
    file = tmp_path / "refs.toml"
    file.write_text('default_profile = "main"\n[profiles.a]\npolicy = "nosuch"\n[profiles.b]\nimage = "nosuchimage"\n')
    done = _executor("config", "check", str(file))
    assert done.returncode == 2, done.stdout
    assert "3 problem(s)" in done.stderr
    assert "default_profile: 'main' names no profile; known profiles: a, b, ci, default, untrusted" in done.stderr
    assert "profiles.a.policy: no policy named 'nosuch'" in done.stderr
    assert "profiles.b.image: 'nosuchimage' is no image folder (base, toolchain" in done.stderr
    assert "Traceback" not in done.stderr


def test_check_loads_each_policy_with_its_examples(tmp_path: Path) -> None:
    """A policy on the operator's folder whose example disagrees with its rule fails the check, by rule and line."""
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "strict.toml").write_text(
        '[[command]]\nname = "no-sudo"\ndecision = "deny"\njustification = "j"\nprefix = ["sudo"]\n'
        'examples.match = ["doas ls"]\n'
    )
    file = tmp_path / "p.toml"
    file.write_text(f'[gate]\npolicy_dir = "{policies}"\n[profiles.tight]\npolicy = "strict"\nmemory = "1.5g"\n')
    done = _executor("--json", "config", "check", str(file))
    assert done.returncode == 2
    error = json.loads(done.stdout)["error"]
    assert "profiles.tight.policy:" in error and "strict.toml:1: command rule 'no-sudo': example 'doas ls'" in error


def test_show_says_where_each_profile_image_and_policy_come_from(tmp_path: Path) -> None:
    """An operator's policy folder adds a policy while the shipped default stays reachable; show names both files."""
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "mine.toml").write_text('description = "mine"\n')
    file = tmp_path / "p.toml"
    file.write_text(f'[gate]\npolicy_dir = "{policies}"\n[profiles.own]\npolicy = "mine"\n')
    env = {"PATH": "/usr/bin:/bin", "EXECUTOR_HOME": str(tmp_path / "home")}
    done = _executor("--json", "--config", str(file), "config", "show", env=env)
    assert done.returncode == 0, done.stderr
    sources = json.loads(done.stdout)["sources"]
    assert sources["own"]["policy"] == str(policies / "mine.toml")
    assert sources["default"]["policy"].endswith("policy/default.toml")
    assert sources["default"]["image"].startswith("folder ") and sources["default"]["image"].endswith("images/base")
    checked = _executor("config", "check", str(file), env=env)
    assert checked.returncode == 0, checked.stderr
