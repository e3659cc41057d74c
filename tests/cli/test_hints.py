"""Every hint the CLI prints is an ``executor`` command line that succeeds as written (subprocesses, real engine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from executor.testing.cli import cli, named_session
from executor.testing.hints import cli_calls

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

_MOST_CALLS = 14
"""Hints followed at most (each is a process; each result's hints are followed in turn, breadth first)."""


def test_every_hint_in_the_cli_is_a_command_that_succeeds(home: Path) -> None:
    """Hints of exec, bg start and output read|search parse as command lines and succeed when run (a search that
    finds nothing exits 1, as grep does)."""
    with named_session(home) as name:
        ran = cli(home, "exec", "--session", name, "--create", "--view", "--", "seq 1 3000; echo oops >&2")
        long = cli(
            home, "exec", "--session", name, "--view", "--", "head -c 20000 /dev/zero | tr '\\0' x; echo; echo tail"
        )
        started = cli(home, "bg", "start", "--session", name, "--", "seq 1 3")
        for done in (ran, long, started):
            assert done.code == 0, done.stdout + done.stderr
        pending = [ran.stdout, long.stdout, started.stdout]
        seen: set[tuple[str, ...]] = set()
        kinds: set[tuple[str, str]] = set()
        while pending and len(seen) < _MOST_CALLS:
            for words in cli_calls(pending.pop(0)):
                if tuple(words) in seen:
                    continue
                seen.add(tuple(words))
                assert words[0] == "executor", words
                kinds.add((words[1], words[2]))
                followed = cli(home, *words[1:])
                # A search that finds nothing exits 1, as grep does (the '<regex>' placeholder matches nothing).
                ok = (0, 1) if words[1:3] == ["output", "search"] else (0,)
                assert followed.code in ok, f"{words} -> {followed.stdout}{followed.stderr}"
                pending.append(followed.stdout)
    assert {("output", "read"), ("output", "search"), ("bg", "read")} <= kinds, seen
    assert any("--start-byte-in-line" in words for words in seen), seen
