"""Records survive the process: a result returned, then a SIGKILL, and its journal and artifact read back whole."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from executor.artifacts import ArtifactStore
from executor.config import Settings
from executor.journal import ExecutionFinished, ExecutionStarted, JudgmentEvent, load_journal_key, read_journal_file
from executor.session import open_executor

pytestmark = pytest.mark.docker

_EXPECTED_STDOUT = "".join(f"{n}\n" for n in range(1, 20001)).encode()


def _read_line(child: subprocess.Popen[bytes], timeout: float) -> bytes:
    """The child's first stdout line, polled under a deadline."""
    assert child.stdout is not None
    deadline = time.monotonic() + timeout
    buffered = b""
    while b"\n" not in buffered:
        left = deadline - time.monotonic()
        if left <= 0 or child.poll() is not None:
            raise AssertionError(f"the child printed no result (exit {child.poll()}): {buffered!r}")
        ready, _, _ = select.select([child.stdout], [], [], left)
        if ready:
            chunk = os.read(child.stdout.fileno(), 4096)
            if not chunk:
                continue
            buffered += chunk
    return buffered.split(b"\n", 1)[0]


def test_a_returned_result_survives_a_sigkill(engine_settings: Settings, session_agent_dir: Path) -> None:
    """Once a result is returned, SIGKILL loses neither its journal records nor its artifact (default fsync)."""
    assert engine_settings.journal.fsync == "action"  # the default, the mode whose promise is tested
    home = engine_settings.home
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.session._kill_child", str(home), str(session_agent_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2],
    )
    session_id: str | None = None
    try:
        shown = json.loads(_read_line(child, timeout=180))
        child.send_signal(signal.SIGKILL)  # at once: the child is already running its next command
        child.wait(timeout=30)
        session_id = shown["session_id"]
        assert shown["outcome"] == "completed"
        action_id, artifact_id = shown["action_id"], shown["artifact_id"]

        key = load_journal_key(home, create=False)
        assert key is not None
        path = home / "sessions" / session_id / "journal.ndjson"
        read = read_journal_file(path, settings=engine_settings.journal, mode="lenient", key=key)
        assert read.verification == "verified"
        events = read.events
        started = [e for e in events if isinstance(e, ExecutionStarted) and e.action_id == action_id]
        finished = [e for e in events if isinstance(e, ExecutionFinished) and e.action_id == action_id]
        assert len(started) == 1
        assert len(finished) == 1
        assert finished[0].artifact_ids == (artifact_id,)
        assert finished[0].exit_code == 0
        # The judgment on the very text that was returned (journaled last, just before the result) is there too.
        judgments = [e for e in events if isinstance(e, JudgmentEvent) and e.artifact_id == artifact_id]
        judged = [e for e in judgments if e.reflex == "sanitize"]
        assert len(judged) == 1
        # Every line up to the result's last record verifies; only the interrupted next command may be cut.
        last = next(r.line for r in read.records if r.event.event_id == judged[0].event_id)
        assert [issue for issue in read.issues if issue.line <= last] == []

        with ArtifactStore.open(home, engine_settings.artifacts) as store:
            artifacts = store.session(session_id)
            record = artifacts.record(artifact_id)
            assert record.status == "ok"
            stdout, stored, dropped = artifacts.read_bytes(artifact_id, stream="stdout", max_bytes=1 << 20)
            assert (stdout, stored, dropped) == (_EXPECTED_STDOUT, len(_EXPECTED_STDOUT), 0)
            stderr, _, _ = artifacts.read_bytes(artifact_id, stream="stderr")
            assert stderr == b"done\n"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
        for pipe in (child.stdout, child.stderr):
            if pipe is not None:
                pipe.close()
        if session_id is not None:
            trio.run(_remove, engine_settings, session_id)


async def _remove(settings: Settings, session_id: str) -> None:
    async with open_executor(settings) as executor:
        await executor.backend.stop_session(session_id)
