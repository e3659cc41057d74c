"""Background-task records live in the shared index: processes writing one session's tasks never lose a record."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from executor.artifacts import ArtifactStore, TaskRecord
from executor.config import load_settings

_WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from executor.artifacts import ArtifactStore, TaskRecord
    from executor.config import load_settings

    home, session_id, prefix, count, go = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), Path(sys.argv[5])
    store = ArtifactStore.open(Path(home), load_settings(overrides={"home": home}).artifacts)
    artifacts = store.session(session_id)
    deadline = time.monotonic() + 30
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.001)
    for i in range(count):
        artifacts.put_task(TaskRecord(task_id=f"{prefix}{i}", command=f"job {i}", owner=prefix))
        artifacts.finish_task(f"{prefix}{i}", artifact_id=f"{session_id}.a{i + 1}")
    store.close()
    """
)


def test_two_processes_recording_tasks_at_once_lose_nothing(home: Path, tmp_path: Path) -> None:
    """Two processes add and finish 200 task records each in one session at the same time; all 400 are kept."""
    session_id = "s-0123456789ab"
    go = tmp_path / "go"
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(home), session_id, prefix, "200", str(go)])
        for prefix in ("cli-", "mcp-")
    ]
    go.touch()
    for writer in writers:
        assert writer.wait(timeout=120) == 0
    with ArtifactStore.open(home, load_settings(overrides={"home": str(home)}).artifacts) as store:
        records = store.session(session_id).tasks()
    assert len(records) == 400
    assert all(record.finished and record.artifact_id is not None for record in records.values())
    assert {record.owner for record in records.values()} == {"cli-", "mcp-"}


def test_task_records_are_per_session_and_replaceable(home: Path) -> None:
    """A session sees only its own task records; recording an id again replaces it; finishing marks it."""
    with ArtifactStore.open(home, load_settings(overrides={"home": str(home)}).artifacts) as store:
        mine, other = store.session("s-00000000000a"), store.session("s-00000000000b")
        mine.put_task(TaskRecord(task_id="7", command="sleep 1", owner="o"))
        mine.put_task(TaskRecord(task_id="7", command="sleep 2", owner="o"))
        assert other.task("7") is None and other.tasks() == {}
        assert mine.task("7") == TaskRecord(task_id="7", command="sleep 2", owner="o")
        mine.finish_task("7", artifact_id="s-00000000000a.a1")
        record = mine.task("7")
        assert record is not None and record.finished and record.artifact_id == "s-00000000000a.a1"


def test_a_detached_task_artifact_leads_to_the_ended_tasks_complete_artifact(home: Path) -> None:
    """The artifact a task started with, cut short ("detached") when its starter ended, reads as the complete
    artifact the task was given once it ended; before that, and for any other artifact, an id is itself."""
    with ArtifactStore.open(home, load_settings(overrides={"home": str(home)}).artifacts) as store:
        artifacts = store.session("s-00000000000c")
        first = artifacts.begin(kind="task", streams=("stdout", "stderr"), meta={"task_id": "t1"})
        first.finish(status="detached")
        plain = artifacts.begin(kind="bash", streams=("stdout", "stderr"))
        plain.feed("stdout", b"x\n")
        plain.finish(status="ok")
        artifacts.put_task(TaskRecord(task_id="t1", command="echo hi", artifact_id=first.artifact_id))
        assert artifacts.detached_task(first.artifact_id) == "t1"
        assert artifacts.current(first.artifact_id) == first.artifact_id  # the task has not ended yet

        whole = artifacts.begin(kind="task", streams=("stdout", "stderr"), meta={"task_id": "t1"})
        whole.feed("stdout", b"hi\n")
        whole.finish(status="ok")
        artifacts.finish_task("t1", artifact_id=whole.artifact_id)
        assert artifacts.current(first.artifact_id) == whole.artifact_id
        assert artifacts.current(whole.artifact_id) == whole.artifact_id
        assert artifacts.current(plain.artifact_id) == plain.artifact_id
        assert artifacts.detached_task(plain.artifact_id) is None
        assert artifacts.current("s-00000000000c.a99") == "s-00000000000c.a99"
