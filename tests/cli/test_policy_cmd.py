"""`executor policy test` (no engine, nothing runs) and the shipped ci profile end to end through `executor exec`."""

from __future__ import annotations

from pathlib import Path

import pytest

from executor.testing.cli import cli, named_session


def test_policy_test_prints_the_decision_rules_file_and_judge(home: Path) -> None:
    """A command's decision, its matching rule with the policy file, and the judge's answers; nothing runs."""
    ran = cli(home, "--json", "policy", "test", "--", "pkill", "-f", "server")
    assert ran.code == 0, ran.stderr
    data = ran.json()
    assert data["decision"] == "ask" and data["trust"] == 1
    assert [m["rule"] for m in data["matches"]] == ["kill-everything"]
    assert data["policy"]["name"] == "default" and data["policy"]["file"].endswith("policy/default.toml")
    assert data["judgments"] and data["judgments"][0]["provider"] == "rules"
    text = cli(home, "policy", "test", "--profile", "ci", "--", "pkill", "-f", "server")
    assert text.code == 0 and text.stdout.startswith("decision: allow (trust 2)")
    assert "judge rules: " in text.stdout


def test_policy_test_of_a_write_path_and_expectations(home: Path) -> None:
    """--write tests a path rule; --expect exits 1 on another decision, 0 on the expected one."""
    hooks = cli(home, "policy", "test", "--write", ".git/hooks/pre-commit", "--expect", "deny")
    assert hooks.code == 0, hooks.stderr
    assert "rule 'git-hooks' (path, deny)" in hooks.stdout
    wrong = cli(home, "policy", "test", "--expect", "deny", "--", "ls")
    assert wrong.code == 1 and "expected deny, got allow" in wrong.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("policy", "test"),
        ("policy", "test", "--write", "x", "--", "ls"),
        ("policy", "test", "--profile", "nope", "--", "ls"),
        ("policy", "test", "--env", "NOEQUALS", "--", "ls"),
    ],
)
def test_policy_test_bad_input_is_exit_2_with_one_line(home: Path, args: tuple[str, ...]) -> None:
    """No command, both forms, an unknown profile, a malformed --env: exit 2 and a message, no traceback."""
    ran = cli(home, *args)
    assert ran.code == 2, (ran.stdout, ran.stderr)
    assert "Traceback" not in ran.stderr and ran.stderr.startswith("error: ")


@pytest.mark.docker
@pytest.mark.timeout(240)
def test_the_ci_profile_runs_a_pipeline_unattended(home: Path) -> None:
    """Under the ci profile a non-interactive exec cleans its own work and refuses what leaves the workspace."""
    with named_session(home) as name:
        made = cli(
            home, "exec", "--session", name, "--create", "--profile", "ci", "--", "mkdir -p build/x && touch build/x/y"
        )
        assert made.code == 0, made.stderr
        cleaned = cli(home, "exec", "--session", name, "--", "rm -rf build")
        assert cleaned.code == 0, cleaned.stdout + cleaned.stderr
        gone = cli(home, "exec", "--session", name, "--json", "--", "test -e build || echo gone")
        assert "gone" in gone.json()["text"]
        git = cli(home, "exec", "--session", name, "--", "git init -q . && touch junk && git clean -fdx")
        assert git.code == 0, git.stdout + git.stderr
        outside = cli(home, "exec", "--session", name, "--json", "--", "rm -rf /tmp/cache")
        assert outside.code == 77
        data = outside.json()
        assert data["outcome"] == "denied" and "ci-delete-outside-workspace" in data["text"]
        assert "policy file ci.toml" in data["text"]
    with named_session(home) as plain:
        asked = cli(home, "exec", "--session", plain, "--create", "--json", "--", "git init -q . && git clean -fdx")
        assert asked.code == 75, asked.stdout
        assert "git-discard-local-work" in asked.json()["text"] and "policy file default.toml" in asked.json()["text"]
