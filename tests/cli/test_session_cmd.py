"""`executor session start|ls|stop|gc` and `executor image build|ls` end to end, as subprocesses, on the real engine."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest


def _executor(home: Path, *args: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "EXECUTOR_HOME": str(home), **(extra_env or {})}
    return subprocess.run(
        [sys.executable, "-m", "executor.cli", "--json", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def _json(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(done.stdout)
    return data


SESSION_KEYS = {"id", "name", "image", "profile", "state", "created_at", "owner", "idle_limit_s", "idle_s"}


@pytest.mark.docker
def test_session_lifecycle_in_json(base_image: str, either_home: Path) -> None:
    """start prints the session with the idle limit it was given (starting it again is exit 2), ls lists it by name
    (as text: with age, idle time and owner), stop by name removes it, and stop again exits 2; in-process and over a
    running service alike."""
    home = either_home
    name = "cli-" + os.urandom(4).hex()
    for bad_name in ("-bad", "s-0123456789ab"):
        refused = _executor(home, "session", "start", "--name", bad_name)
        assert refused.returncode == 2 and "must be 1-63 letters" in _json(refused)["error"]
    bad_idle = _executor(home, "session", "start", "--name", name, "--idle", "soon")
    assert bad_idle.returncode == 2 and "'soon' is not an idle limit" in _json(bad_idle)["error"]
    started = _executor(home, "session", "start", "--name", name, "--idle", "30m")
    assert started.returncode == 0, started.stdout + started.stderr
    assert _json(started)["outcome"] == "completed" and _json(started)["exit_code"] == 0
    session = _json(started)["session"]
    try:
        assert set(session) == SESSION_KEYS
        assert session["name"] == name and session["state"] == "running" and session["profile"] == "default"
        assert session["idle_limit_s"] == 1800
        taken = _executor(home, "session", "start", "--name", name)
        assert taken.returncode == 2 and f"is used by {session['id']}" in _json(taken)["error"]
        journal = home / "sessions" / session["id"] / "journal.ndjson"
        opened = json.loads(journal.read_text(encoding="utf-8").splitlines()[0])
        assert (opened["type"], opened["policy"]) == ("session_opened", "default")
        listed = _json(_executor(home, "session", "ls"))
        assert (listed["outcome"], listed["exit_code"]) == ("completed", 0)
        assert [set(s) for s in listed["sessions"] if s["id"] == session["id"]] == [SESSION_KEYS]
        table = subprocess.run(
            [sys.executable, "-m", "executor.cli", "session", "ls"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "EXECUTOR_HOME": str(home)},
            check=True,
        ).stdout.splitlines()
        assert table[0].split() == ["ID", "NAME", "STATE", "PROFILE", "AGE", "IDLE", "OWNER", "IMAGE"]
        (row,) = [line.split() for line in table[1:] if name in line]
        assert row[:4] == [session["id"], name, "running", "default"] and row[4].endswith(("s", "m"))
        stopped = _executor(home, "session", "stop", name)
        assert stopped.returncode == 0
        said = _json(stopped)
        assert (said["outcome"], said["exit_code"], said["stopped"]) == ("completed", 0, session["id"])
        assert set(said["session"]) == SESSION_KEYS, said  # the one session shape, as the other commands print
        assert (said["session"]["id"], said["session"]["name"], said["session"]["state"]) == (
            session["id"],
            name,
            "stopped",
        )
    finally:
        _executor(home, "session", "stop", session["id"])
    again = _executor(home, "session", "stop", name)
    assert again.returncode == 2 and _json(again)["outcome"] == "error"
    gc = _json(_executor(home, "session", "gc"))
    assert (gc["outcome"], gc["exit_code"], gc["idle_stopped"]) == ("completed", 0, [])


@pytest.mark.docker
def test_gc_removes_the_upload_spools_of_a_killed_service_only_when_none_runs(home: Path) -> None:
    """A service killed mid-upload leaves its spooled body under the home; gc removes it when no service runs for
    the home, and leaves it while one holds the home's service lock (it may be reading it)."""
    spool = home / "tmp" / "upload-left-by-a-killed-service"
    spool.parent.mkdir(parents=True)
    spool.write_bytes(b"x" * 1024)
    lock = home / "run" / "service.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        gc = _json(_executor(home, "session", "gc"))
        assert gc["spools_removed"] == 0 and spool.exists()
    gc = _json(_executor(home, "session", "gc"))
    assert gc["spools_removed"] == 1 and not spool.exists()


def test_unknown_profile_is_bad_input(home: Path) -> None:
    """Starting with a profile that does not exist exits 2 naming the known ones."""
    done = _executor(home, "session", "start", "--profile", "nope")
    assert done.returncode == 2
    assert "known profiles: ci, default, untrusted" in _json(done)["error"]


def test_a_profile_whose_policy_does_not_load_starts_nothing(home: Path, tmp_path: Path) -> None:
    """session start checks the profile's policy first: a missing policy is bad input and no session is made."""
    done = _executor(home, "session", "start", extra_env={"EXECUTOR_PROFILES__DEFAULT__POLICY": "nosuch"})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "polic" in _json(done)["error"]
    assert not (home / "sessions").exists() or not any((home / "sessions").glob("s-*/journal.ndjson"))


def test_unreachable_engine_exits_125_with_how_to(home: Path, tmp_path: Path) -> None:
    """With no engine at the configured address, session ls exits 125 and says how to start one."""
    done = _executor(home, "session", "ls", extra_env={"EXECUTOR_DOCKER__BASE_URL": f"unix://{tmp_path}/nothing.sock"})
    assert done.returncode == 125
    assert "start one" in _json(done)["error"]


@pytest.mark.docker
def test_image_build_is_quiet_in_json_and_reports_up_to_date(base_image: str, home: Path) -> None:
    """image build of an unchanged base prints one JSON object saying skipped; image ls shows it."""
    done = _executor(home, "image", "build", "base")
    assert done.returncode == 0 and done.stderr == ""
    assert _json(done)["image"]["action"] == "skipped"
    images = _json(_executor(home, "image", "ls"))["images"]
    assert any(base_image in i["tags"] and i["kind"] == "session" for i in images)


@pytest.mark.docker
def test_two_homes_and_a_named_session_that_survives_a_stop(base_image: str, home: Path, tmp_path: Path) -> None:
    """Another home neither lists, stops nor cleans up this home's session (unless --all); after the container
    stops, this home's gc removes it but keeps the workspace, and `exec --session NAME --create` recreates it on the
    data."""
    other = tmp_path / "other-home"
    other.mkdir()
    name = "cli-" + os.urandom(4).hex()
    started = _executor(home, "exec", "--session", name, "--create", "--", "echo precious > keep.txt")
    assert started.returncode == 0, started.stdout + started.stderr
    session = _json(started)["session"]["id"]
    try:
        assert name not in {s["name"] for s in _json(_executor(other, "session", "ls"))["sessions"]}
        assert name in {s["name"] for s in _json(_executor(other, "session", "ls", "--all"))["sessions"]}
        refused = _executor(other, "session", "stop", name)
        assert refused.returncode == 2 and "no session" in _json(refused)["error"]
        cleaned = _json(_executor(other, "session", "gc"))
        assert not any(session in item for item in cleaned["removed"] + cleaned["kept"])
        # what a dockerd restart does to a running session (gc right after: the other home's part is in test_gc)
        stopped = subprocess.run(["docker", "stop", "-t", "1", f"executor-{session}"], capture_output=True, timeout=60)
        assert stopped.returncode == 0
        mine = _json(_executor(home, "session", "gc"))
        assert f"executor-{session}" in mine["removed"] and mine["kept"] == [f"executor-{session}-workspace"]
        (listed,) = [s for s in _json(_executor(home, "session", "ls"))["sessions"] if s["name"] == name]
        assert listed["state"] == "exited"
        table = subprocess.run(
            [sys.executable, "-m", "executor.cli", "session", "ls"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "EXECUTOR_HOME": str(home)},
            check=True,
        )
        assert "(workspace kept; no container)" in next(line for line in table.stdout.splitlines() if name in line)
        without_create = _executor(home, "exec", "--session", name, "--", "cat keep.txt")  # no container: says how
        assert (
            without_create.returncode == 2
            and f"executor exec --session {name} --create" in _json(without_create)["error"]
        )
        again = _executor(home, "exec", "--session", name, "--create", "--", "cat keep.txt")
        assert again.returncode == 0, again.stdout + again.stderr
        assert _json(again)["session"]["id"] == session and _json(again)["stdout"] == "precious\n"
    finally:
        _executor(home, "session", "stop", name)
    assert name not in {s["name"] for s in _json(_executor(home, "session", "ls"))["sessions"]}


def _containers(session_id: str) -> list[str]:
    """The ids of the containers of one session (running or not)."""
    return subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=executor.session={session_id}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()


@pytest.mark.docker
def test_a_named_session_whose_container_died_is_recreated_by_create(base_image: str, either_home: Path) -> None:
    """A named session's container killed under it (held by a service or not): without --create the call says it
    is not running (exit 2); once the container is removed `session ls` says its workspace is kept; with --create
    its container is recreated on the kept workspace and the call runs there (over a service too: the service lets
    go of a session whose agent connection died)."""
    home = either_home
    name = "cli-" + os.urandom(4).hex()
    started = _executor(home, "session", "start", "--name", name)
    assert started.returncode == 0, started.stderr
    session_id = _json(started)["session"]["id"]
    try:
        assert _executor(home, "exec", "--session", name, "--", "echo kept > f").returncode == 0
        containers = _containers(session_id)
        assert len(containers) == 1
        subprocess.run(["docker", "kill", *containers], capture_output=True, check=True)
        deadline = time.monotonic() + 60
        state = "running"
        while state == "running" and time.monotonic() < deadline:
            listed = _json(_executor(home, "session", "ls"))["sessions"]
            state = next(s["state"] for s in listed if s["id"] == session_id)
        assert state in ("exited", "dead")
        refused = _executor(home, "exec", "--session", name, "--", "cat f")
        assert refused.returncode == 2, refused.stdout
        assert f"session {name} is not running" in _json(refused)["error"]  # and how to start it again
        subprocess.run(["docker", "rm", "-f", *containers], capture_output=True, check=False)  # if still there
        env = {**os.environ, "EXECUTOR_HOME": str(home)}
        table = subprocess.run(
            [sys.executable, "-m", "executor.cli", "session", "ls"], capture_output=True, text=True, env=env, check=True
        )
        (row,) = (line for line in table.stdout.splitlines() if line.startswith(session_id))
        assert row.endswith("(workspace kept; no container)"), table.stdout  # the same words on both paths
        recreated = _executor(home, "exec", "--session", name, "--create", "--", "cat f")
        assert recreated.returncode == 0, recreated.stdout + recreated.stderr
        assert _json(recreated)["stdout"] == "kept\n" and _json(recreated)["session"]["id"] == session_id
    finally:
        _executor(home, "session", "stop", name)


@pytest.mark.docker
def test_a_recreated_named_session_keeps_the_profile_it_was_made_with(base_image: str, either_home: Path) -> None:
    """A named session whose container went away comes back with its own profile (an untrusted one must not come
    back under runc): '--create' and 'session start --name' without a profile use it, and another profile is
    refused (exit 2) with how to start afresh."""
    home = either_home
    name = "cli-" + os.urandom(4).hex()
    started = _executor(home, "session", "start", "--name", name, "--profile", "ci")
    assert started.returncode == 0, started.stderr
    session_id = _json(started)["session"]["id"]

    def remove_container() -> None:
        subprocess.run(["docker", "rm", "-f", *_containers(session_id)], capture_output=True, check=True)

    def profile() -> str:
        listed = _json(_executor(home, "session", "ls"))["sessions"]
        return str(next(s["profile"] for s in listed if s["id"] == session_id))

    try:
        remove_container()
        recreated = _executor(home, "exec", "--session", name, "--create", "--", "true")
        assert recreated.returncode == 0, recreated.stdout + recreated.stderr
        assert profile() == "ci"
        remove_container()
        other = _executor(home, "session", "start", "--name", name, "--profile", "default")
        assert other.returncode == 2, other.stdout + other.stderr
        assert "profile 'ci'" in _json(other)["error"] and "session stop" in _json(other)["error"]
        again = _executor(home, "session", "start", "--name", name)
        assert again.returncode == 0, again.stdout + again.stderr
        assert profile() == "ci" and _json(again)["session"]["id"] == session_id
    finally:
        _executor(home, "session", "stop", name)
