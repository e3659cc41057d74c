"""`executor exec` end to end: the command's status, the gate's codes, timeouts and the --json shape."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from executor.testing.cli import cli, named_session

pytestmark = pytest.mark.timeout(240)

RESULT_KEYS = {
    "outcome",
    "exit_code",
    "command_exit_code",
    "artifact_id",
    "action_id",
    "text",
    "run",
    "stdout",
    "stdout_complete",
    "stderr",
    "stderr_complete",
    "session",
}


@pytest.mark.docker
def test_throwaway_session_prints_the_view_and_is_removed(home: Path) -> None:
    """Without --session the command runs in a session that is gone afterwards; --json has the stable shape."""
    ran = cli(home, "exec", "--json", "--", "echo", "hello world")
    assert ran.code == 0, ran.stderr
    data = ran.json()
    assert set(data) == RESULT_KEYS
    assert (data["outcome"], data["exit_code"], data["command_exit_code"]) == ("completed", 0, 0)
    assert "hello world" in data["text"]
    assert data["artifact_id"].startswith(data["session"] + ".a")
    assert data["run"]["cause"] == "exited" and data["run"]["stream_bytes"]["stdout"] == len("hello world\n")
    left = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"name=executor-{data['session']}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert left.stdout.strip() == ""


@pytest.mark.docker
def test_exit_codes_in_a_named_session(home: Path) -> None:
    """A named session is created on first use; each way a command ends has its own exit code and outcome."""
    with named_session(home) as name:
        failed = cli(home, "exec", "--session", name, "--", "echo out; exit 3")
        assert failed.code == 3
        assert failed.stdout.startswith("[exit 3 after ") and "out" in failed.stdout

        own_124 = cli(home, "--json", "exec", "--session", name, "--", "exit 124")
        assert own_124.code == 124
        assert (own_124.json()["outcome"], own_124.json()["command_exit_code"]) == ("failed", 124)

        timeout = cli(home, "exec", "--session", name, "--timeout-ms", "300", "--json", "--", "sleep 30")
        assert timeout.code == 124
        data = timeout.json()
        assert (data["outcome"], data["exit_code"], data["run"]["cause"]) == ("timeout", 124, "timeout")
        assert data["text"].startswith("[timed out after 300 ms")

        signaled = cli(home, "exec", "--session", name, "--", "kill -TERM $$")
        assert signaled.code == 128 + 15

        denied = cli(home, "exec", "--session", name, "--json", "--", "rm -rf /")
        assert denied.code == 77
        data = denied.json()
        assert set(data) == RESULT_KEYS
        assert (data["outcome"], data["run"], data["artifact_id"]) == ("denied", None, None)
        assert "recursive-delete-of-root-or-home" in data["text"]

        blocked = cli(home, "exec", "--session", name, "--json", "--", "git reset --hard HEAD~3")
        assert blocked.code == 75
        assert (blocked.json()["outcome"], blocked.json()["run"]) == ("blocked", None)
        assert blocked.json()["text"].startswith("BLOCKED")

        over_cap = cli(home, "exec", "--session", name, "--timeout-ms", "99999999", "--json", "--", "true")
        assert over_cap.code == 2
        assert over_cap.json()["outcome"] == "error" and "bash.max_timeout_ms" in over_cap.json()["error"]

        fed = cli(
            home,
            "exec",
            "--session",
            name,
            "--stdin",
            "-",
            "--env",
            "GREETING=hi",
            "--",
            'echo "$GREETING"; cat',
            stdin=b"from stdin",
        )
        assert fed.code == 0 and "hi\nfrom stdin" in fed.stdout


def test_bad_input_exits_2_before_any_session(home: Path) -> None:
    """A malformed option is refused with exit 2 and a JSON error, and no session is started for it."""
    bad_env = cli(home, "exec", "--json", "--env", "NOEQUALS", "--", "true")
    assert bad_env.code == 2
    assert bad_env.json() == {"outcome": "error", "error": "--env 'NOEQUALS' is not KEY=VALUE", "exit_code": 2}
    bad_focus = cli(home, "exec", "--focus-mode", "loud", "--", "true")
    assert bad_focus.code == 2 and "--focus-mode 'loud'" in bad_focus.stderr
    assert not (home / "sessions").exists() or not any((home / "sessions").iterdir())


def test_a_paused_session_gives_exit_125_unresponsive_then_a_clear_error(home: Path) -> None:
    """The issue's reproduction: `docker pause` 'before' was printed: the call ends (outcome unresponsive, exit
    125, the output kept) instead of hanging, and the next call on that session says it is unhealthy."""
    import os
    import sys
    import time

    env = {**os.environ, "EXECUTOR_HOME": str(home), "EXECUTOR_AGENT__HOST_MARGIN_S": "1"}
    with named_session(home) as name:
        assert cli(home, "session", "start", "--name", name).code == 0
        container = f"executor-{cli(home, '--json', 'session', 'ls').json()['sessions'][0]['id']}"
        argv = [sys.executable, "-m", "executor.cli", "--json", "exec", "--session", name, "--timeout-ms", "2000"]
        proc = subprocess.Popen(
            [*argv, "--", "echo before; sleep 30"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        paused = False
        try:
            deadline = time.monotonic() + 60
            while not any(b"before" in p.read_bytes() for p in home.rglob("stdout.part")):
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.02)
            subprocess.run(["docker", "pause", container], check=True, capture_output=True, timeout=30)
            paused = True
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
            if paused:
                subprocess.run(["docker", "unpause", container], capture_output=True, timeout=30)
        assert proc.returncode == 125, err
        data = json.loads(out)
        assert (data["outcome"], data["exit_code"], data["run"]["cause"]) == ("unresponsive", 125, "unresponsive")
        assert "before" in data["text"]
        after = cli(home, "--json", "exec", "--session", name, "--", "true")
        assert after.code == 125
        assert re.match(rf"^session {name} is unhealthy since .*executor session stop {name}", after.json()["error"])
