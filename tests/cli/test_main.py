"""The root command: ``--json`` is accepted after any command's name, never inside the command to run."""

from __future__ import annotations

import json
import subprocess
import sys

from executor.cli.app import hoist_json


def test_json_after_the_command_moves_to_the_root() -> None:
    """`session ls --json` is read as `--json session ls`."""
    assert hoist_json(["session", "ls", "--json"]) == ["--json", "session", "ls"]
    assert hoist_json(["--json", "config", "show", "--json"]) == ["--json", "config", "show"]


def test_words_after_the_separator_are_left_alone() -> None:
    """A `--json` that belongs to the command being run is not taken by the executor."""
    assert hoist_json(["exec", "--", "echo", "--json"]) == ["exec", "--", "echo", "--json"]
    assert hoist_json(["exec", "--json", "--", "echo", "--json"]) == ["--json", "exec", "--", "echo", "--json"]


def test_every_command_takes_json_after_its_name() -> None:
    """`executor config show --json` prints one JSON object."""
    done = subprocess.run(
        [sys.executable, "-m", "executor.cli", "config", "show", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["outcome"] == "completed"
