"""The service's lifetime: SIGTERM mid-command (grace, then kill), SIGKILL (nothing left running, named sessions
found again), and the settings that bound it."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest

from executor.errors import ExecutorError, ServiceUnavailable, SessionNotFound, SpawnFailed
from executor.sandbox.usage import read_usage, usage_path
from tests.service.conftest import ServiceProcess, new_name, service_env

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

COUNT_SLEEPERS = (
    "n=0; for p in /proc/[0-9]*; do grep -qa 'sleep 30[0]' $p/cmdline 2>/dev/null && n=$((n+1)); done; echo $n"
)
"""Counts processes running ``sleep 300`` in the session (the image has no procps; the bracket keeps the counting
shell's own command line from matching)."""


def _poll(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _engine_objects(session_id: str) -> str:
    """The ids of the containers and volumes the engine still has for a session (empty when none)."""
    label = f"label=executor.session={session_id}"
    found = [
        subprocess.run([*cmd, "--filter", label], capture_output=True, text=True, check=True, timeout=30).stdout
        for cmd in (["docker", "ps", "-aq"], ["docker", "volume", "ls", "-q"])
    ]
    return "".join(found).strip()


def _stop_named(service: ServiceProcess, name: str) -> None:
    """Remove a named session the test made, through the service if it runs, else in-process (the CLI)."""
    try:
        with service.client() as client:
            client.stop_session(name)
    except (ServiceUnavailable, SessionNotFound):
        subprocess.run(
            [sys.executable, "-m", "executor.cli", "session", "stop", name],
            env=service.env,
            capture_output=True,
            timeout=120,
            check=False,
        )


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def test_sigterm_lets_short_commands_finish_and_kills_long_ones(service_factory: Any) -> None:
    """After SIGTERM a command inside the grace period completes, one past it is cancelled with its whole process
    group killed, and the service exits 0; its named session is found again by the next start."""
    service: ServiceProcess = service_factory(service__shutdown_grace_s="4")
    service.start()
    name = new_name()
    client = service.client()
    client.create_session(name=name)
    try:
        short_thread, short = _in_thread(lambda: client.exec(name, "sleep 1; echo short-done"))
        long_thread, long = _in_thread(lambda: client.exec(name, "sleep 300 & sleep 300; echo never"))
        _poll(lambda: client.health().running == 2, 30, "both commands to run")
        service.signal(signal.SIGTERM)
        short_thread.join(60)
        long_thread.join(60)
        assert service.wait(60) == 0, "".join(service.stderr)
        assert short["value"].outcome == "completed" and short["value"].stdout == b"short-done\n"
        assert long["value"].outcome == "cancelled"
        assert b"never" not in long["value"].stdout
        assert long["value"].action_id and long["value"].artifact_id  # what ran is named, as in any other result
        client.close()
        service.start()
        with service.client() as again:
            assert name in {s.name for s in again.list_sessions()}
            assert again.exec(name, COUNT_SLEEPERS).stdout == b"0\n"
    finally:
        _stop_named(service, name)


def test_new_work_is_refused_while_draining(service_factory: Any) -> None:
    """Once SIGTERM is received, a new exec is refused (503: the service takes no new work)."""
    service: ServiceProcess = service_factory(service__shutdown_grace_s="30")
    service.start()
    with service.client() as client:
        session = client.create_session().id
        thread, box = _in_thread(lambda: client.exec(session, "sleep 2"))
        _poll(lambda: client.health().running == 1, 30, "the command to run")
        service.signal(signal.SIGTERM)
        _poll(lambda: client.health().status == "draining", 10, "draining")
        with pytest.raises(ExecutorError, match="shutting down"):
            client.exec(session, "true")
        thread.join(60)
        assert box["value"].outcome == "completed"
    assert service.wait(60) == 0


def test_sigkill_leaves_nothing_running_and_named_sessions_come_back(service_factory: Any) -> None:
    """A SIGKILLed service's unnamed session stops by itself (the agent's orphan exit) and the restarted service's
    sweep removes its container and workspace (nothing is left on the engine); its named session is found again by
    its labels and still works."""
    # The sweep every second, and an orphaned workspace old enough to go after 5 s (300 s by default; not 0, which
    # would let the sweep take a container being created for one still in Created).
    service: ServiceProcess = service_factory(
        agent__orphan_exit_s="2", sessions__idle_check_s="1", docker__gc_min_age_s="5"
    )
    service.start()
    name = new_name()
    client = service.client()
    client.create_session(name=name)
    unnamed = client.create_session().id
    try:
        thread, box = _in_thread(lambda: client.exec(unnamed, "sleep 300"))
        _poll(lambda: client.health().running == 1, 30, "the command to run")
        service.signal(signal.SIGKILL)
        service.wait(30)
        thread.join(30)
        assert isinstance(box.get("error"), ServiceUnavailable)

        def gone() -> bool:
            try:
                client.session(unnamed)
            except SessionNotFound:
                return True
            return False

        client.close()
        # Not the start-up clean-up (which finds the container still running, or not): the running service's sweep.
        service.env["EXECUTOR_DOCKER__GC_ON_START"] = "false"
        service.start()
        client = service.client()
        _poll(gone, 90, "the unnamed session to be removed")
        assert _engine_objects(unnamed) == ""
        assert name in {s.name for s in client.list_sessions()}
        assert client.exec(name, "echo back").stdout == b"back\n"
        client.close()
    finally:
        _stop_named(service, name)


def test_bounds_from_settings(service_factory: Any) -> None:
    """approval_timeout_s denies an unanswered ask, result_stream_max_bytes bounds the raw streams,
    download_max_bytes bounds a download, idle_s stops an idle session, and sessions.idle_s is the default limit."""
    service: ServiceProcess = service_factory(
        service__approval_timeout_s="1",
        service__result_stream_max_bytes="16",
        sessions__idle_s="777",
        service__download_max_bytes="2048",
    )
    service.start()
    with service.client() as client:
        session = client.create_session()
        assert session.idle_limit_s == 777
        asked = client.exec(session.id, "touch x && crontab -l")
        assert asked.outcome == "denied"
        long = client.exec(session.id, "seq 1 100")
        assert len(long.stdout) == 16 and not long.stdout_whole and long.stderr_whole
        client.exec(session.id, "mkdir big && head -c 8192 /dev/zero > big/zeros")
        with pytest.raises(ExecutorError, match=r"service\.download_max_bytes"):
            client.download_tar(session.id, "big")
        short = client.create_session(idle_s=1)
        _poll(lambda: short.id not in {s.id for s in client.list_sessions()}, 60, "the idle session to stop")


def test_tcp_without_tokens_is_refused_at_start(tmp_path: Any) -> None:
    """``executor serve`` with service.tcp and no tokens exits 2 with a one-line error."""
    env = service_env(tmp_path, service__tcp="true")
    done = subprocess.run(
        [sys.executable, "-m", "executor.cli", "serve"], env=env, capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert b"service.tcp" in done.stderr and b"Traceback" not in done.stderr


def test_a_port_in_use_names_the_address(base_image: str) -> None:
    """A TCP port something else holds ends ``executor serve`` with exit 125 naming the address and the settings
    that choose it (it said only 'Address already in use')."""
    import socket

    home = Path(tempfile.mkdtemp(prefix="exs-", dir="/tmp"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = service_env(
            home, service__tcp="true", service__port=str(port), service__tokens='["a-token-of-24-chars-xyz"]'
        )
        try:
            done = subprocess.run(
                [sys.executable, "-m", "executor.cli", "serve"], env=env, capture_output=True, timeout=120, check=False
            )
        finally:
            shutil.rmtree(home, ignore_errors=True)
    assert done.returncode == 125, done.stderr
    assert f"127.0.0.1:{port}".encode() in done.stderr and b"service.port" in done.stderr, done.stderr
    assert b"Traceback" not in done.stderr


def test_a_second_service_on_the_same_home_is_refused(service_factory: Any) -> None:
    """One service per home: a second ``executor serve`` on a live socket exits 125 and says why."""
    service: ServiceProcess = service_factory()
    service.start()
    done = subprocess.run(
        [sys.executable, "-m", "executor.cli", "serve"], env=service.env, capture_output=True, timeout=120, check=False
    )
    assert done.returncode == 125
    assert b"already" in done.stderr and b"one service per EXECUTOR_HOME" in done.stderr
    elsewhere = {**service.env, "EXECUTOR_SERVICE__SOCKET": str(service.home / "other.sock")}
    other = subprocess.run(
        [sys.executable, "-m", "executor.cli", "serve"], env=elsewhere, capture_output=True, timeout=120, check=False
    )
    assert other.returncode == 125, other.stderr  # another socket, the same home: still one service
    assert b"a service already runs for" in other.stderr
    with service.client() as client:
        assert client.health().status == "ok"


def test_services_started_at_once_on_one_home_leave_one_running(tmp_path: Any) -> None:
    """Two ``executor serve`` started at the same moment on one home: one serves, the other exits 125 (both used to
    pass the socket probe and run, one of them reachable by nobody)."""
    env = service_env(tmp_path)
    starts = [
        subprocess.Popen(
            [sys.executable, "-m", "executor.cli", "serve"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    try:
        deadline = time.monotonic() + 120
        while all(start.poll() is None for start in starts):
            assert time.monotonic() < deadline, "neither service refused"
            time.sleep(0.05)
        refused = next(start for start in starts if start.poll() is not None)
        assert refused.returncode == 125
        assert refused.stderr is not None and b"one service per EXECUTOR_HOME" in refused.stderr.read()
        serving = next(start for start in starts if start is not refused)
        assert serving.poll() is None
    finally:
        for start in starts:
            if start.poll() is None:
                start.send_signal(signal.SIGTERM)
                start.wait(timeout=120)
            if start.stderr is not None:
                start.stderr.close()


def test_a_restarted_service_finds_a_named_sessions_stored_idle_limit_and_enforces_it(service_factory: Any) -> None:
    """A named session's idle limit is stored with it: after a restart the service reports it (with owner and idle
    time) without holding the session, and stops it once idle, keeping its workspace."""
    service: ServiceProcess = service_factory(sessions__idle_check_s="1")
    name = new_name()
    service.start()
    try:
        with service.client() as client:
            # Long enough to outlast the restart below (seconds under load), short enough to wait for.
            view = client.create_session(name=name, idle_s=15)
            assert view.idle_limit_s == 15 and view.owner is None
            assert client.exec(name, "true").outcome == "completed"
        service.stop()
        service.start()
        with service.client() as client:
            found = client.session(name)
            assert not found.held and found.idle_limit_s == 15 and found.state == "running"
            assert found.idle_s is not None and found.idle_s >= 0
            _poll(lambda: client.session(name).idle_s is None, 90, "the idle named session's container to go")
            stopped = client.session(name)
            assert stopped.idle_s is None and stopped.idle_limit_s == 15
    finally:
        _stop_named(service, name)


def test_a_held_named_session_idle_past_its_limit_keeps_its_workspace(service_factory: Any) -> None:
    """The service stops a named session it holds once idle past the limit given at creation; its workspace stays, and
    the name starts it again with its files."""
    service: ServiceProcess = service_factory()
    name = new_name()
    service.start()
    try:
        with service.client() as client:
            client.create_session(name=name, idle_s=2)
            assert client.exec(name, "echo kept > note").outcome == "completed"
            # Its container is gone (idle_s is None then), not merely stopping.
            _poll(lambda: client.session(name).idle_s is None, 60, "the idle held session's container to go")
            assert not client.session(name).held
            again = client.create_session(name=name)
            assert again.idle_limit_s == 2 and client.exec(name, "cat note").stdout == b"kept\n"
    finally:
        _stop_named(service, name)


def test_a_session_at_its_pids_limit_answers_503_until_its_processes_end(service_factory: Any) -> None:
    """A command the session cannot start (its pids limit is full) is a 503 naming SpawnFailed, not a 400: nothing
    is wrong with the request, and once the processes that fill the limit end the same request runs."""
    service: ServiceProcess = service_factory(profiles__default__pids="32")
    service.start()
    with service.client() as client:
        session = client.create_session().id
        task = client.start_task(session, "for i in $(seq 1 64); do sleep 300 & done; wait")
        assert task.data is not None
        refused: list[SpawnFailed] = []

        def spawn_refused() -> bool:
            try:
                client.exec(session, "true")
            except SpawnFailed as exc:
                refused.append(exc)
                return True
            return False

        _poll(spawn_refused, 60, "the task to fill the pids limit")
        assert "fork" in str(refused[0]) and "pids limit" in str(refused[0])
        with httpx2.Client(transport=httpx2.HTTPTransport(uds=str(service.socket))) as raw:
            answer = raw.post(f"http://x/v1/sessions/{session}/exec", json={"command": "true"})
        assert answer.status_code == 503 and answer.json()["error"]["type"] == "SpawnFailed", answer.text[:2000]
        client.stop_task(session, str(task.data["task_id"]))
        _poll(lambda: not spawn_refused(), 60, "the session to start processes again")
        assert client.exec(session, "echo back").stdout == b"back\n"


def test_a_cli_given_other_settings_than_the_services_refuses_to_use_it(service_factory: Any, tmp_path: Any) -> None:
    """Settings apply where a command runs: a thin CLI call given a settings file the service was not started with
    exits 2 naming it (the service would have run it without them, silently); the same file, or none, goes through."""
    mine = tmp_path / "service.toml"
    mine.write_text("[sessions]\nidle_s = 600\n")
    other = tmp_path / "stricter.toml"
    other.write_text("[sessions]\nidle_s = 600\n\n[gate]\ntrust = 1\n")
    service: ServiceProcess = service_factory(config=str(mine))
    service.start()
    env = {k: v for k, v in service.env.items() if k != "EXECUTOR_CONFIG"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "executor.cli", *args], env=env, capture_output=True, text=True, timeout=120
        )

    refused = cli("--config", str(other), "exec", "--", "echo", "ran")
    assert refused.returncode == 2, refused.stderr
    assert str(other) in refused.stderr and "ran" not in refused.stdout and "Traceback" not in refused.stderr
    same = cli("--config", str(mine), "exec", "--", "echo", "ran")
    assert (same.returncode, same.stdout) == (0, "ran\n"), same.stderr
    plain = cli("exec", "--", "echo", "ran")
    assert (plain.returncode, plain.stdout) == (0, "ran\n"), plain.stderr


def test_a_cli_whose_environment_sets_other_settings_than_the_services_refuses_to_use_it(service_factory: Any) -> None:
    """As for a settings file: a thin CLI call whose EXECUTOR_* settings (those deciding how commands run) differ
    from the service's exits 2 naming them; the same settings, or none, go through and run under the service's.
    Variables that only say where the service is (the home, the socket, EXECUTOR_URL/TOKEN) do not count."""
    service: ServiceProcess = service_factory(bash__timeout_ms="300")
    service.start()

    def cli(**extra: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in service.env.items() if k != "EXECUTOR_BASH__TIMEOUT_MS"}
        env.update(extra)
        return subprocess.run(
            [sys.executable, "-m", "executor.cli", "exec", "--", "sleep 3; echo ran"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    refused = cli(EXECUTOR_BASH__TIMEOUT_MS="400", EXECUTOR_GATE__TRUST="2")
    assert refused.returncode == 2, refused.stderr
    assert "EXECUTOR_BASH__TIMEOUT_MS, EXECUTOR_GATE__TRUST" in refused.stderr and "Traceback" not in refused.stderr
    assert "ran" not in refused.stdout
    same = cli(EXECUTOR_BASH__TIMEOUT_MS="300", EXECUTOR_URL=f"unix://{service.socket}")
    assert same.returncode == 124, same.stderr  # the thin path, under the service's (and the caller's) deadline
    plain = cli()
    assert plain.returncode == 124, plain.stderr


def test_a_held_session_is_not_idle_while_another_process_runs_in_it(service_factory: Any, tmp_path: Any) -> None:
    """The service stops a session it holds for idleness only when no process uses it: a command run in it
    in-process (another CLI) outlives the service's idle limit, and the session stops once that command ended."""
    service: ServiceProcess = service_factory()
    service.start()
    name = new_name()
    try:
        with service.client() as client:
            # The limit leaves the other process room to start on a loaded host (its in-process start-up takes
            # seconds there); its command still outlives the limit after the service's own use.
            session_id = client.create_session(name=name, idle_s=8).id
        in_process = {**service.env, "EXECUTOR_SERVICE__SOCKET": str(tmp_path / "no-service.sock")}
        with subprocess.Popen(
            [sys.executable, "-m", "executor.cli", "exec", "--session", name, "--", "sleep 16; echo survived"],
            env=in_process,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as other:
            try:
                # Its command runs (the session's usage file is held) before the service holds the session: started
                # after the service's use, the other process's start-up could outlast the idle limit on a slow host.
                usage = usage_path(service.home, session_id)
                _poll(lambda: read_usage(usage)[0].busy, 60, "the other process's command")
                with service.client() as client:
                    assert client.exec(name, "echo held").stdout == b"held\n"  # the service holds it from here on
                out, err = other.communicate(timeout=120)
            finally:
                if other.poll() is None:
                    other.kill()
        assert (other.returncode, out) == (0, "survived\n"), err
        with service.client() as client:
            _poll(lambda: name not in {s.name for s in client.list_sessions() if s.state == "running"}, 60, "idle stop")
    finally:
        _stop_named(service, name)


def test_a_restarted_service_removes_the_request_bodies_a_killed_one_left(service_factory: Any) -> None:
    """An upload's body is spooled to a file under the home while it is gated; a service killed meanwhile leaves it,
    and the next start removes it (other files there are not the service's to remove)."""
    service: ServiceProcess = service_factory()
    spools = service.home / "tmp"
    spools.mkdir(parents=True)
    left = spools / "upload-abc123"
    left.write_bytes(b"x" * 1024)
    other = spools / "notes.txt"
    other.write_bytes(b"mine")
    service.start()
    assert not left.exists() and other.exists()


def test_a_killed_thin_exec_takes_its_throwaway_session_with_it(service_factory: Any) -> None:
    """`executor exec` without --session over a service makes a session for that one command; SIGKILL of the CLI
    (no clean-up of its own can run) ends the exec stream early, and the service removes the session, which kills
    the command (it ran on, for the session's idle limit, before)."""
    service: ServiceProcess = service_factory()
    service.start()
    with (
        subprocess.Popen(
            [sys.executable, "-m", "executor.cli", "exec", "--", "echo started; sleep 300"],
            env=service.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        ) as proc,
        service.client() as client,
    ):
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"started\n"
        assert client.health().running == 1 and len(client.list_sessions()) == 1
        proc.kill()
        proc.wait(30)
        _poll(lambda: client.health().running == 0 and client.list_sessions() == [], 60, "the session to go")


def test_an_idle_stop_keeps_the_output_of_the_sessions_tasks(service_factory: Any) -> None:
    """A named session the service stops for idleness while a background task runs (a task alone is not use): the
    task is stopped first and its artifact holds what it wrote, as `session stop` does."""
    service: ServiceProcess = service_factory()
    service.start()
    name = new_name()
    with service.client() as client:
        view = client.create_session(name=name, idle_s=2)
        task = client.start_task(name, "for i in $(seq 1 1000); do echo tick$i; sleep 0.05; done")
        assert task.data is not None and task.artifact_id is not None
        task_id = str(task.data["task_id"])
        _poll(lambda: "tick3" in client.read_task(name, task_id).text, 30, "output")
        _poll(
            lambda: not any(s.id == view.id and s.state == "running" for s in client.list_sessions()),
            60,
            "the idle stop",
        )
        # Read from the host's artifact store (the session's container is gone; its workspace is kept).
        ran = subprocess.run(
            [sys.executable, "-m", "executor.cli", "--json", "output", "read", task.artifact_id],
            env={**service.env, "EXECUTOR_SERVICE__SOCKET": str(service.home / "none.sock")},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ran.returncode == 0, ran.stderr
        assert "tick1\n" in ran.stdout.replace("\\n", "\n") and "still running" not in ran.stdout, ran.stdout
