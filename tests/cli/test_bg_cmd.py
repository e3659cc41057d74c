"""`executor bg` end to end, in-process and over a running service: start, read by offsets, list and stop a
background task in a named session, and read its artifact."""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from executor.testing.cli import cli, cli_env, named_session

pytestmark = [pytest.mark.docker, pytest.mark.timeout(180)]


SESSION_KEYS = {"id", "name", "image", "profile", "state", "created_at", "owner", "idle_limit_s", "idle_s"}


def test_background_task_lifecycle(either_home: Path) -> None:
    """A started task is listed, read from offsets until its output arrives, stopped, and then listed with how it
    ended; its artifact id leads to its output."""
    home = either_home
    with named_session(home) as name:
        argv = ("bg", "start", "--session", name, "--json", "--", "echo first; echo second; sleep 60")
        not_yet = cli(home, *argv)
        assert not_yet.code == 2 and "--create" in not_yet.json()["error"]
        started = cli(home, "bg", "start", "--create", *argv[2:])
        assert started.code == 0, started.stderr
        data = started.json()
        assert set(data) == {"outcome", "exit_code", "task_id", "artifact_id", "action_id", "text", "session"}
        assert set(data["session"]) == SESSION_KEYS and data["session"]["name"] == name
        task = data["task_id"]
        assert data["outcome"] == "completed" and task

        listed = cli(home, "bg", "ls", "--session", name, "--json")
        assert listed.code == 0
        assert [(t["task_id"], t["running"]) for t in listed.json()["tasks"]] == [(task, True)]

        deadline = time.monotonic() + 30
        while True:
            chunk = cli(home, "bg", "read", task, "--session", name, "--json")
            assert chunk.code == 0, chunk.stdout
            read = chunk.json()
            if read["end"] >= len("first\nsecond\n") or time.monotonic() > deadline:
                break
        assert (read["offset"], read["next_offset"], read["running"]) == (0, 13, True)
        assert read["text"].endswith("first\nsecond\n")

        rest = cli(home, "bg", "read", task, "--session", name, "--offset", "6", "--max-bytes", "3", "--json")
        assert (rest.json()["offset"], rest.json()["next_offset"]) == (6, 9)
        assert rest.json()["text"].endswith("\nsec")
        for size in ("0", str(1024 * 1024 + 1)):  # a page is at most 1 MiB on both paths (thin alone refused it)
            page = cli(home, "bg", "read", task, "--session", name, "--max-bytes", size, "--json")
            assert page.code == 2 and "--max-bytes between 1 and 1048576" in page.json()["error"], page.stdout
        for offset in ("99999999999999999999999", "-1"):
            huge = cli(home, "bg", "read", task, "--session", name, "--offset", offset, "--json")
            assert huge.code == 2 and "offset" in huge.json()["error"], huge.stdout + huge.stderr

        stopped = cli(home, "bg", "stop", task, "--session", name, "--json")
        assert stopped.code == 0 and stopped.json()["outcome"] == "completed"
        assert stopped.json()["task"]["running"] is False
        assert stopped.json()["task"]["result"]["cause"] in ("cancelled", "signaled")

        ended = cli(home, "bg", "ls", "--session", name)
        assert ended.code == 0 and re.search(rf"^{task} +(signal 15|cancelled) ", ended.stdout, re.M), ended.stdout

        # An ended task is listed with how it ended (the table says "exited 3"; --json has its run result).
        three = cli(home, "--json", "bg", "start", "--session", name, "--", "exit 3").json()["task_id"]
        deadline = time.monotonic() + 30
        while True:
            tasks = {t["task_id"]: t for t in cli(home, "--json", "bg", "ls", "--session", name).json()["tasks"]}
            if not tasks[three]["running"] or time.monotonic() > deadline:
                break
        assert tasks[three]["result"]["cause"] == "exited" and tasks[three]["result"]["exit_code"] == 3
        assert tasks[task]["result"]["cause"] in ("cancelled", "signaled")
        table = cli(home, "bg", "ls", "--session", name).stdout
        assert re.search(rf"^{three} +exited 3 ", table, re.M), table

        # The artifact `bg start` named leads to the task's output on both paths: over a service, which mirrored
        # the task while it ran, it is that artifact; in-process the starting CLI was gone at once (its mirror
        # "detached"), and the id leads to the complete artifact the ended task was given.
        artifact = data["artifact_id"]
        if home.joinpath("service.sock").exists():
            listed_ended = cli(home, "--json", "bg", "ls", "--session", name).json()["tasks"]
            assert [t["artifact_id"] for t in listed_ended if t["task_id"] == task] == [artifact]
        paged = cli(home, "--json", "output", "read", artifact)
        assert paged.code == 0 and "first\nsecond" in paged.json()["text"], paged.stdout

        unknown = cli(home, "bg", "stop", "t999", "--session", name, "--json")
        assert unknown.code == 2 and "no background task" in unknown.json()["error"]


def test_the_artifact_bg_start_names_says_where_a_running_tasks_output_is(either_home: Path) -> None:
    """In-process, the CLI that started a task is gone at once and its mirror artifact with it: read while the task
    runs, that artifact says so and names the call that reads the task's output (it said 'empty source: the command
    wrote nothing'). Over a service the artifact mirrors the task and holds its output."""
    home = either_home
    with named_session(home) as name:
        started = cli(home, "--json", "bg", "start", "--session", name, "--create", "--", "echo early; sleep 60")
        assert started.code == 0, started.stdout
        task, artifact = started.json()["task_id"], started.json()["artifact_id"]
        deadline = time.monotonic() + 30
        while cli(home, "--json", "bg", "read", task, "--session", name).json()["end"] == 0:
            assert time.monotonic() < deadline
        paged = cli(home, "--json", "output", "read", artifact)
        assert paged.code == 0, paged.stdout
        if home.joinpath("service.sock").exists():
            assert "early" in paged.json()["text"]
        else:
            text = paged.json()["text"]
            assert f"task {task} is still running" in text and f"executor bg read {task}" in text, text
            assert "wrote nothing" not in text
        cli(home, "bg", "stop", task, "--session", name)


def test_stopping_a_session_stops_its_tasks_and_keeps_their_output(either_home: Path) -> None:
    """`session stop` with a background task running: the task is stopped first and the artifact `bg start` named
    leads to its whole output so far, marked finished; it stayed cut short, empty in-process, saying the task still
    ran and naming a read in a session that no longer existed."""
    home = either_home
    with named_session(home) as name:
        ticker = "for i in $(seq 1 1000); do echo line$i; sleep 0.05; done"
        started = cli(home, "--json", "bg", "start", "--session", name, "--create", "--", ticker)
        assert started.code == 0, started.stdout
        task, artifact = started.json()["task_id"], started.json()["artifact_id"]
        deadline = time.monotonic() + 30
        while "line3" not in cli(home, "bg", "read", task, "--session", name).stdout:
            assert time.monotonic() < deadline
        stopped = cli(home, "session", "stop", name)
        assert stopped.code == 0, stopped.stderr
        paged = cli(home, "--json", "output", "read", artifact)
        assert paged.code == 0, paged.stdout + paged.stderr
        text = paged.json()["text"]
        assert "line1\n" in text and "line3\n" in text, text
        assert "still running" not in text and "bg read" not in text, text


def test_an_idle_stop_by_gc_stops_the_tasks_and_keeps_their_output(tmp_path: Path) -> None:
    """`session gc` stopping a named session idle past its limit (a running task alone is not use) stops its
    background task first: the artifact `bg start` named holds what the task wrote, finished. It stayed cut short,
    saying the task still ran, while the output went with the container."""
    home = tmp_path
    with named_session(home) as name:
        assert cli(home, "session", "start", "--name", name, "--idle", "8").code == 0
        ticker = "for i in $(seq 1 1000); do echo line$i; sleep 0.05; done"
        started = cli(home, "--json", "bg", "start", "--session", name, "--", ticker)
        assert started.code == 0, started.stdout
        task, artifact = started.json()["task_id"], started.json()["artifact_id"]
        deadline = time.monotonic() + 30
        while "line3" not in cli(home, "bg", "read", task, "--session", name).stdout:
            assert time.monotonic() < deadline
        deadline = time.monotonic() + 60
        while name not in cli(home, "--json", "session", "gc").json()["idle_stopped"]:
            assert time.monotonic() < deadline, "gc never stopped the idle session"
        paged = cli(home, "--json", "output", "read", artifact)
        assert paged.code == 0, paged.stdout + paged.stderr
        text = paged.json()["text"]
        assert "line1\n" in text and "line3\n" in text, text
        assert "still running" not in text and "bg read" not in text, text


def test_background_tasks_need_a_session(either_home: Path) -> None:
    """Without --session, bg commands exit 2 before starting anything."""
    home = either_home
    ran = cli(home, "bg", "start", "--json", "--", "sleep 1")
    assert ran.code == 2 and "--session" in ran.json()["error"]
    missing = cli(home, "bg", "ls", "--session", "cli-test-never-started")
    assert missing.code == 2 and "no session" in missing.stderr


def _read_line(proc: subprocess.Popen[bytes], deadline: float) -> bytes:
    """One line of the follower's stdout, waiting (bounded) for it to arrive."""
    assert proc.stdout is not None
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        assert left > 0, f"no whole line in time; got {line!r}"
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if ready:
            byte = os.read(proc.stdout.fileno(), 1)
            assert byte, f"the follower ended early; got {line!r}"
            line += byte
    return line


def test_read_follow_prints_lines_as_they_come_and_exits_with_the_tasks_code(either_home: Path) -> None:
    """--follow prints each line while the task still runs (the task waits for a file only the test creates after
    seeing the line), then the rest, and exits with the task's own code, in-process and over a service."""
    home = either_home
    with named_session(home) as name:
        # The second line's pages in base64 hold ``+`` and ``/`` (``???`` and ``>>>`` at every alignment): the
        # follower must decode the service's alphabet, not drop those characters.
        second = "two é ???.???..??? >>>.>>>..>>>\n"
        script = f"echo one; while [ ! -e go ]; do sleep 0.05; done; printf '{second.rstrip()}\\n'; exit 3"
        started = cli(home, "bg", "start", "--session", name, "--create", "--json", "--", script)
        assert started.code == 0, started.stderr
        task = started.json()["task_id"]
        env = {**os.environ, "EXECUTOR_HOME": str(home)}
        with subprocess.Popen(
            [sys.executable, "-m", "executor.cli", "bg", "read", task, "--session", name, "--follow"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        ) as proc:
            try:
                deadline = time.monotonic() + 60
                assert _read_line(proc, deadline) == b"one\n"
                assert proc.poll() is None  # the task waits for the file: the follower does too
                assert cli(home, "exec", "--session", name, "--", "touch go").code == 0
                assert _read_line(proc, deadline) == second.encode()
                assert proc.wait(timeout=60) == 3
                assert proc.stdout is not None and proc.stdout.read() == b""
            finally:
                if proc.poll() is None:
                    proc.kill()


def test_read_follow_prints_any_bytes_exactly(either_home: Path) -> None:
    """--follow prints the task's bytes as they are, UTF-8 or not (a character cut across pages, invalid bytes,
    NUL), in-process and over a service."""
    home = either_home
    payload = bytes(range(256)) * 64 + "é".encode() * 5000 + b"\xff\xfe\x80 end\n"
    with named_session(home) as name:
        assert cli(home, "session", "start", "--name", name).code == 0
        assert cli(home, "write", "--session", name, "payload.bin", "--from", "-", stdin=payload).code == 0
        started = cli(home, "--json", "bg", "start", "--session", name, "--", "cat payload.bin")
        assert started.code == 0, started.stderr
        followed = cli(home, "bg", "read", started.json()["task_id"], "--session", name, "--follow")
        assert followed.code == 0, followed.stderr
        assert followed.stdout_bytes == payload


def test_read_follow_refuses_json(home: Path) -> None:
    """--follow prints raw bytes: with --json it is exit 2 and a JSON error."""
    ran = cli(home, "--json", "bg", "read", "t1", "--session", "x", "--follow")
    assert ran.code == 2 and "--follow" in ran.json()["error"]


def test_a_follow_whose_session_is_stopped_exits_130(either_home: Path) -> None:
    """`bg read --follow` of a task whose session another call stops ends as a command cancelled by it: 143 when it
    sees the task stopped first (the stop stops the session's tasks, SIGTERM, as `bg stop` does), else 130 (the
    session went away under it); it was 2 over a service, 125 in-process."""
    home = either_home
    with named_session(home) as name:
        ticker = "for i in $(seq 1 2000); do echo tick$i; sleep 0.05; done"
        started = cli(home, "--json", "bg", "start", "--session", name, "--create", "--", ticker)
        assert started.code == 0, started.stdout
        task = started.json()["task_id"]
        with subprocess.Popen(
            [sys.executable, "-m", "executor.cli", "bg", "read", task, "--session", name, "--follow"],
            env=cli_env(home),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        ) as follow:
            assert follow.stdout is not None and follow.stderr is not None
            assert follow.stdout.readline().startswith(b"tick")
            assert cli(home, "session", "stop", name).code == 0
            assert follow.wait(timeout=120) in (130, 143), follow.stderr.read()


def test_bg_read_pages_followed_by_next_offset_show_every_line_once(either_home: Path) -> None:
    """`bg read` pages of output several times the display budget, read from each one's next_offset, show every
    line once with no cut notice, and each names the bytes it shows (in-process and over a service alike)."""
    home = either_home
    with named_session(home) as name:
        started = cli(home, "bg", "start", "--create", "--session", name, "--json", "--", "seq 1 6000")
        assert started.code == 0, started.stderr
        task = started.json()["task_id"]
        lines: list[str] = []
        offset = 0
        deadline = time.monotonic() + 120
        while True:
            assert time.monotonic() < deadline, offset
            read = cli(home, "bg", "read", task, "--session", name, "--offset", str(offset), "--json")
            assert read.code == 0, read.stdout + read.stderr
            page = read.json()
            header, _, body = page["text"].partition("\n")
            assert "characters cut here" not in page["text"], page["text"][-300:]
            assert f"bytes {offset}-{page['next_offset']} of {page['end']};" in header, header
            lines += body.splitlines()
            if not page["running"] and page["next_offset"] == page["end"]:
                break
            if page["next_offset"] == offset:
                time.sleep(0.05)  # nothing new yet: poll
            else:
                assert page["next_offset"] == page["end"] or f"--offset {page['next_offset']}" in header, header
            offset = page["next_offset"]
        assert lines == [str(n) for n in range(1, 6001)]
