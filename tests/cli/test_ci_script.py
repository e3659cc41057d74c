"""A CI pipeline's whole script through the thin CLI against a real ``executor serve``: start a named session,
upload the project, build, run a failing test whose stderr streams raw, search its log, run a background server
and follow it until it is ready, fetch the build's output, tear down, and leave nothing behind."""

from __future__ import annotations

import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from executor.testing.cli import Ran, cli, serving

_BUILD = """#!/bin/sh
set -e
mkdir -p out
for n in 1 2 3; do echo "compiling unit $n"; done
printf 'built from %s\\n' "$(cat VERSION)" > out/artifact.txt
echo "build ok"
"""

_TEST = """#!/bin/sh
echo "test_one ... ok"
echo "test_two ... FAIL: expected 3, got 4" >&2
exit 1
"""

_SERVER = "for n in 1 2 3; do echo \"warming $n\"; done; echo 'server ready'; exit 0"


@pytest.fixture
def service_home(base_image: str) -> Iterator[Path]:
    """A short private home with ``executor serve`` running in it (the default socket)."""
    home = Path(tempfile.mkdtemp(prefix="exci-", dir="/tmp"))
    try:
        with serving(home, profiles__default__pool__service_size="0"):
            yield home
    finally:
        cli(home, "session", "gc")
        shutil.rmtree(home, ignore_errors=True)


def _run(home: Path, *args: str) -> Ran:
    # EXECUTOR_URL names the service: the thin path must answer, never an in-process run in its place.
    return cli(home, *args, env={"EXECUTOR_URL": f"unix://{home / 'service.sock'}"})


def _left_of(session_id: str) -> list[str]:
    """Containers and volumes of the session still known to the engine."""
    found: list[str] = []
    for kind in ("container", "volume"):
        found += subprocess.run(
            ["docker", kind, "ls", *(["-a"] if kind == "container" else []), "-q", "--filter", f"name={session_id}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.split()
    return found


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_a_ci_script_end_to_end_through_the_thin_cli(service_home: Path, tmp_path: Path) -> None:
    """Every step of a CI script works over the service with the exit codes, raw streams and files a CI author
    relies on, and the teardown leaves no session behind."""
    home = service_home
    name = f"ci-{secrets.token_hex(3)}"
    project = tmp_path / "proj"
    project.mkdir()
    (project / "build.sh").write_text(_BUILD)
    (project / "test.sh").write_text(_TEST)
    (project / "VERSION").write_text("1.2.3\n")
    (project / "build.sh").chmod(0o755)

    started = _run(home, "--json", "session", "start", "--name", name, "--idle", "10m")
    assert started.code == 0, started.stdout + started.stderr
    assert started.json()["session"]["name"] == name and started.json()["session"]["idle_limit_s"] == 600
    session_id = started.json()["session"]["id"]
    try:
        uploaded = _run(home, "cp", str(project), f"{name}:.")
        assert uploaded.code == 0, uploaded.stdout + uploaded.stderr

        build = _run(home, "exec", "--session", name, "--", "cd proj && ./build.sh")
        assert build.code == 0, build.stderr
        assert build.stdout == "compiling unit 1\ncompiling unit 2\ncompiling unit 3\nbuild ok\n"

        failed = _run(home, "exec", "--session", name, "--", "cd proj && sh test.sh")
        assert failed.code == 1
        assert failed.stdout == "test_one ... ok\n"
        assert "test_two ... FAIL: expected 3, got 4\n" in failed.stderr

        as_json = _run(home, "--json", "exec", "--session", name, "--", "cd proj && sh test.sh")
        log = as_json.json()
        assert (log["outcome"], log["exit_code"], log["command_exit_code"]) == ("failed", 1, 1)
        assert log["stderr"] == "test_two ... FAIL: expected 3, got 4\n" and log["stderr_whole"] is True
        hit = _run(home, "--json", "output", "search", log["artifact_id"], "--pattern", "FAIL")
        assert hit.code == 0 and "expected 3, got 4" in hit.json()["text"]
        miss = _run(home, "output", "search", log["artifact_id"], "--pattern", "segfault")
        assert miss.code == 1

        server = _run(home, "--json", "bg", "start", "--session", name, "--", _SERVER)
        assert server.code == 0, server.stdout
        task = server.json()["task_id"]
        followed = _run(home, "bg", "read", task, "--session", name, "--follow")
        assert followed.code == 0, followed.stderr
        assert followed.stdout == "warming 1\nwarming 2\nwarming 3\nserver ready\n"

        fetched = tmp_path / "fetched"
        fetched.mkdir()
        got = _run(home, "cp", f"{name}:proj/out", str(fetched))
        assert got.code == 0, got.stdout + got.stderr
        assert (fetched / "out" / "artifact.txt").read_text() == "built from 1.2.3\n"
    finally:
        stopped = _run(home, "session", "stop", name)
    assert stopped.code == 0, stopped.stderr
    listed = _run(home, "--json", "session", "ls")
    assert [s for s in listed.json()["sessions"] if s["name"] == name] == []
    assert _left_of(session_id) == []
