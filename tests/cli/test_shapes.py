"""The JSON shapes both CLI paths print (pure: plain dicts in, plain dicts out)."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from executor.cli import shapes


@pytest.mark.parametrize(
    ("outcome", "command_exit_code", "code"),
    [
        ("completed", 0, 0),
        ("failed", 3, 3),
        ("failed", 124, 124),
        ("failed", None, 1),
        ("timeout", None, 124),
        ("blocked", None, 75),
        ("denied", None, 77),
        ("cancelled", None, 130),
        ("error", None, 125),
        ("unresponsive", None, 125),
    ],
)
def test_exit_code_for_each_outcome(outcome: str, command_exit_code: int | None, code: int) -> None:
    """The process's status is the command's own, or the documented code of how the executor ended the call."""
    assert shapes.exit_code_for(outcome, command_exit_code) == code


def test_a_session_has_one_shape_from_any_source() -> None:
    """The backend's SessionInfo, the service's SessionView and a bare id all give the same nine keys."""
    created = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    backend = {
        "id": "s-1",
        "name": "ci",
        "image": "i",
        "profile": "p",
        "state": "running",
        "created_at": created,
        "owner": "o",
        "container_id": "c",
        "labels": {},
        "transport": "socket",
        "workspace_only": False,
    }
    service = {
        "id": "s-1",
        "name": "ci",
        "image": "i",
        "profile": "p",
        "state": "running",
        "created_at": "2026-01-02T03:04:05Z",
        "held": True,
        "idle_limit_s": 60.0,
        "idle_for_s": 1.5,
    }
    one, two = shapes.session_json(backend), shapes.session_json(service)
    assert one is not None and two is not None
    assert list(one) == list(two) == list(shapes.SESSION_KEYS)
    assert one["created_at"] == "2026-01-02T03:04:05+00:00" and one["idle_s"] is None and one["owner"] == "o"
    assert (two["idle_limit_s"], two["idle_s"], two["owner"]) == (60.0, 1.5, None)
    used = shapes.session_json({"id": "s-2", "last_used_at": datetime.now(UTC).isoformat()})
    assert used is not None and 0 <= used["idle_s"] < 60
    # A command running for a minute: busy, so not idle (the backend's info says busy beside its last use).
    long_ago = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    busy = shapes.session_json({"id": "s-4", "last_used_at": long_ago, "busy": True})
    assert busy is not None and busy["idle_s"] == 0.0
    assert shapes.bare_session("s-3") == dict.fromkeys(shapes.SESSION_KEYS) | {"id": "s-3"}
    assert shapes.session_json(None) is None


def test_session_table_shows_age_idle_and_owner() -> None:
    """`session ls` as text: a header and one row per session, with age, idle time and owner columns."""
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC).timestamp()
    rows: list[dict[str, object]] = [
        {
            "id": "s-0123456789ab",
            "name": "ci",
            "state": "running",
            "profile": "default",
            "image": "base",
            "created_at": "2026-01-01T11:00:00Z",
            "idle_for_s": 30.0,
            "owner": "a-very-long-owner-hash",
        },
        {
            "id": "s-ba9876543210",
            "name": None,
            "state": "exited",
            "profile": "default",
            "image": "base",
            "created_at": "2026-01-01T11:59:50Z",
            "workspace_only": True,
        },
    ]
    lines = shapes.session_table(rows, now=now).splitlines()
    assert lines[0].split() == ["ID", "NAME", "STATE", "PROFILE", "AGE", "IDLE", "OWNER", "IMAGE"]
    assert lines[1].split() == ["s-0123456789ab", "ci", "running", "default", "60m", "30s", "a-very-long~", "base"]
    assert lines[2].split()[:7] == ["s-ba9876543210", "-", "exited", "default", "10s", "-", "-"]
    assert lines[2].endswith("(workspace kept; no container)")


def test_tasks_and_results_keep_their_documented_keys() -> None:
    """A task's end is ``result`` on both paths (the service calls it ``run``); nothing is ``ok``."""
    task = shapes.task_json({"task_id": "t1", "command": "x", "running": False, "run": {"cause": "exited"}})
    assert list(task) == list(shapes.TASK_KEYS) and task["result"] == {"cause": "exited"}
    stopped = shapes.bg_stop_json(task, text="stopped", session={"id": "s-1"})
    assert (stopped["outcome"], stopped["exit_code"]) == ("completed", 0)
    result = {"outcome": "failed", "exit_code": 3, "text": "v", "run": None, "artifact_id": "s-1.a1"}
    data = shapes.exec_json(
        result, code=3, session=None, stdout=b"a\xffb", stdout_whole=True, stderr=b"", stderr_whole=False
    )
    assert (data["stdout"], data["command_exit_code"], data["session"]) == ("a\ufffdb", 3, None)
    assert shapes.error_json("bad", 2) == {"outcome": "error", "error": "bad", "exit_code": 2}
    assert shapes.task_table([{"task_id": "t1", "running": True, "command": "echo \x1b[31m"}]).endswith(
        "echo \\x1b[31m"
    )


def test_the_thin_path_loads_only_the_standard_library() -> None:
    """Importing the dispatcher, the thin client and the shapes loads none of the executor's heavy dependencies."""
    code = (
        "import sys, executor.cli.main, executor.cli.thin.run, executor.cli.shapes; "
        "heavy = ('pydantic', 'docker', 'trio', 'typer', 'httpx', 'httpx2', 'anyio'); "
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_the_reason_line_of_a_gated_call_names_its_reasons() -> None:
    """A denial's stderr line carries the reasons listed under the view's first line; other outcomes keep the first
    line alone, and an empty view names the outcome."""
    denied = "[denied: nothing ran]\n- policy rule 'x' (deny):  Because.\n- rules: sudo\nDo not retry this action."
    assert shapes.reason_line("denied", denied) == (
        "executor: denied: [denied: nothing ran]; policy rule 'x' (deny): Because.; rules: sudo"
    )
    assert shapes.reason_line("timeout", "[timed out after 3 ms]\n- not a reason") == (
        "executor: timeout: [timed out after 3 ms]"
    )
    assert shapes.reason_line("error", "") == "executor: error: error"
