"""One outcome vocabulary: every non-session command's --json object says ``completed`` with its ``exit_code``, and a
usage error under --json is the error object on stdout, not the usage box."""

from __future__ import annotations

from pathlib import Path

import pytest

from executor.testing.cli import cli


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--json", "write", "--bogus", "x"], "No such option: --bogus (see `"),
        (["write", "--json", "--bogus", "x"], "No such option: --bogus"),
        (["--json", "session", "stop"], "Missing argument 'session'"),
        (["--json", "nosuchcmd"], "No such command 'nosuchcmd'"),
        (["--json", "--bogus", "config", "show"], "No such option: --bogus (see `"),
        (["--json", "session", "start", "--idle"], "Option '--idle' requires an argument"),
        (["--json", "replay"], "Missing argument 'journal'"),
    ],
)
def test_a_usage_error_under_json_is_one_error_object_on_stdout(home: Path, args: list[str], needle: str) -> None:
    """Under --json the framework's own usage errors print {"outcome": "error", "error", "exit_code": 2} on stdout and
    nothing on stderr; without --json the usage text goes to stderr."""
    ran = cli(home, *args)
    assert ran.code == 2 and ran.stderr == ""
    data = ran.json()
    assert set(data) == {"outcome", "error", "exit_code"}
    assert data["outcome"] == "error" and data["exit_code"] == 2 and needle in data["error"]
    plain = cli(home, *[word for word in args if word != "--json"])
    assert plain.code == 2 and plain.stdout == "" and needle.split(" (see")[0] in plain.stderr


def test_the_commands_without_an_engine_say_completed_with_their_exit_code(home: Path, tmp_path: Path) -> None:
    """config show|check, policy test and agent build: outcome completed, exit_code 0; a policy expectation that is
    not met is outcome failed, exit_code 1 (and the process exits 1)."""
    good = tmp_path / "good.toml"
    good.write_text("[bash]\ntimeout_ms = 5000\n")
    for args in (
        ["config", "show"],
        ["config", "check", str(good)],
        ["policy", "test", "--", "ls"],
        ["agent", "build"],
    ):
        ran = cli(home, "--json", *args)
        assert ran.code == 0, ran.stderr
        data = ran.json()
        assert (data["outcome"], data["exit_code"]) == ("completed", 0), args
    missed = cli(home, "--json", "policy", "test", "--expect", "deny", "--", "ls")
    assert missed.code == 1
    assert (missed.json()["outcome"], missed.json()["exit_code"]) == ("failed", 1)


@pytest.mark.docker
def test_the_engine_commands_say_completed_with_their_exit_code(base_image: str, home: Path) -> None:
    """demo, replay of its journal, image ls and session gc: outcome completed, exit_code 0, no narration."""
    demo = cli(home, "--json", "demo")
    assert demo.code == 0, demo.stderr
    data = demo.json()
    assert (data["outcome"], data["exit_code"]) == ("completed", 0)
    assert data["session"].startswith("s-") and Path(data["journal"]).is_file()
    assert [step["outcomes"] for step in data["steps"]][:2] == [["completed"], ["completed"]]
    assert "blocked" in data["steps"][5]["outcomes"]
    for args in (["replay", data["journal"]], ["image", "ls"], ["session", "gc"]):
        ran = cli(home, "--json", *args)
        assert ran.code == 0, ran.stderr
        assert (ran.json()["outcome"], ran.json()["exit_code"]) == ("completed", 0), args
