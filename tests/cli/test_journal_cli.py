"""The audit trail through the real CLI and engine: concurrent calls on one named session, and a killed call."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from itertools import pairwise
from pathlib import Path

import pytest

from executor.config import JournalSettings
from executor.journal import ArtifactInterrupted, ExecutionStarted, load_journal_key, read_journal_file
from executor.testing.cli import cli, named_session

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]


def _env(home: Path) -> dict[str, str]:
    env = {**os.environ, "EXECUTOR_HOME": str(home)}
    env.pop("EXECUTOR_CONFIG", None)
    return env


def _exec(home: Path, name: str, command: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "executor.cli", "--json", "exec", "--session", name, "--", command],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(home),
    )


def test_concurrent_execs_on_one_named_session_leave_a_whole_verified_journal(home: Path) -> None:
    """Eight concurrent `exec --session` calls, two rounds, 2,000 lines each: every artifact exact, journal whole."""
    with named_session(home) as name:
        first = cli(home, "--json", "exec", "--session", name, "--create", "--", "true")
        assert first.code == 0, first.stderr
        session_id = first.json()["session"]["id"]
        for _ in range(2):
            calls = [_exec(home, name, "seq 1 2000") for _ in range(8)]
            for call in calls:
                out, err = call.communicate(timeout=300)
                assert call.returncode == 0, err.decode()[-2000:]
                data = json.loads(out)
                assert data["run"]["stream_bytes"]["stdout"] == len("".join(f"{n}\n" for n in range(1, 2001)))
        journal = home / "sessions" / session_id / "journal.ndjson"
        read = read_journal_file(journal, settings=JournalSettings(), key=load_journal_key(home, create=False))
        assert read.issues == () and read.verification == "verified"
        assert all(b.seq > a.seq for a, b in pairwise(read.events))
        assert sum(isinstance(event, ExecutionStarted) for event in read.events) == 17
        replayed = cli(home, "--json", "replay", str(journal))
        assert replayed.code == 0, replayed.stderr
        report = replayed.json()
        assert (report["errors"], report["verification"], report["lines"]) == ([], "verified", read.lines)


def test_a_killed_exec_leaves_an_interrupted_artifact_with_its_bytes_readable(home: Path) -> None:
    """SIGKILL of the CLI mid-command: the next call finalises the artifact as interrupted and reads its lines."""
    with named_session(home) as name:
        first = cli(home, "--json", "exec", "--session", name, "--create", "--", "true")
        assert first.code == 0, first.stderr
        session_id = first.json()["session"]["id"]
        call = _exec(home, name, "for i in $(seq 1 100000); do echo line $i; sleep 0.01; done")
        artifacts = home / "sessions" / session_id / "artifacts"
        deadline = time.monotonic() + 120
        part: Path | None = None
        while part is None or part.stat().st_size < 200:
            assert time.monotonic() < deadline, "the command never started writing"
            parts = list(artifacts.glob("*/stdout.part"))
            part = parts[0] if parts else None
            time.sleep(0.1)
        os.kill(call.pid, signal.SIGKILL)
        call.communicate(timeout=60)
        artifact_id = part.parent.name
        read = cli(home, "--json", "output", "read", artifact_id, "--line-count", "3")
        assert read.code == 0, read.stderr
        page = read.json()["page"]
        assert "line 1\nline 2\nline 3" in read.json()["text"] and page["end_line"] == 3
        status = cli(home, "--json", "output", "search", artifact_id, "--pattern", "^line 2$")
        assert status.code == 0, status.stderr
        journal = home / "sessions" / session_id / "journal.ndjson"
        events = read_journal_file(journal, settings=JournalSettings(), key=load_journal_key(home, create=False))
        assert events.issues == ()
        interrupted = [e for e in events.events if isinstance(e, ArtifactInterrupted)]
        assert [e.artifact_id for e in interrupted] == [artifact_id]
        assert "ended before finishing it" in interrupted[0].reason
