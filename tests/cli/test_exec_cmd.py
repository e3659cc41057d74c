"""`executor exec` end to end, in-process and over a running service (the thin path): the command's status, the
gate's codes, timeouts, the raw streams, --view and the --json shape."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from executor.sandbox.docker.backend import home_identity
from executor.testing.cli import Ran, cli, cli_env, named_session, serving

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
    "stdout_whole",
    "stderr",
    "stderr_whole",
    "session",
}


SESSION_KEYS = {"id", "name", "image", "profile", "state", "created_at", "owner", "idle_limit_s", "idle_s"}


@pytest.mark.docker
def test_throwaway_session_gives_the_json_shape_and_is_removed(either_home: Path) -> None:
    """Without --session the command runs in a session that is gone afterwards; --json has the stable shape."""
    home = either_home
    ran = cli(home, "exec", "--json", "--", "echo", "hello world")
    assert ran.code == 0, ran.stderr
    data = ran.json()
    assert set(data) == RESULT_KEYS
    assert (data["outcome"], data["exit_code"], data["command_exit_code"]) == ("completed", 0, 0)
    assert "hello world" in data["text"]
    assert (data["stdout"], data["stdout_whole"], data["stderr"], data["stderr_whole"]) == (
        "hello world\n",
        True,
        "",
        True,
    )
    assert set(data["session"]) == SESSION_KEYS and data["session"]["name"] is None
    assert data["artifact_id"].startswith(data["session"]["id"] + ".a")
    assert data["run"]["cause"] == "exited" and data["run"]["stream_bytes"]["stdout"] == len("hello world\n")
    left = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"name=executor-{data['session']['id']}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert left.stdout.strip() == ""


@pytest.mark.docker
def test_exit_codes_in_a_named_session(either_home: Path) -> None:
    """A named session must exist (or --create it); the raw streams go to stdout and stderr; each way a command
    ends has its own exit code and outcome, and the executor's own endings say why on stderr in one line."""
    home = either_home
    with named_session(home) as name:
        missing = cli(home, "exec", "--session", name, "--", "true")
        assert missing.code == 2 and missing.stdout == ""
        assert f"no session {name!r}: add --create" in missing.stderr and missing.stderr.count("\n") == 1
        missing_json = cli(home, "exec", "--json", "--session", name, "--", "true")
        assert missing_json.code == 2 and missing_json.json()["outcome"] == "error"
        assert "--create" in missing_json.json()["error"]
        for create in ((), ("--create",)):  # an id is never created, nor is a name of its shape suggested
            by_id = cli(home, "exec", "--session", "s-0123456789ab", *create, "--", "true")
            assert by_id.code == 2 and by_id.stderr.count("\n") == 1, by_id.stderr
            assert "session ls" in by_id.stderr and "--name s-0123456789ab" not in by_id.stderr

        failed = cli(home, "exec", "--session", name, "--create", "--", "echo out; echo err >&2; exit 3")
        assert (failed.code, failed.stdout, failed.stderr) == (3, "out\n", "err\n")
        viewed = cli(home, "exec", "--session", name, "--view", "--", "echo out; exit 3")
        assert viewed.code == 3
        assert viewed.stdout.startswith("[exit 3 after ") and "out" in viewed.stdout and "artifact" in viewed.stdout

        own_124 = cli(home, "--json", "exec", "--session", name, "--", "exit 124")
        assert own_124.code == 124
        assert (own_124.json()["outcome"], own_124.json()["command_exit_code"]) == ("failed", 124)

        timeout = cli(home, "exec", "--session", name, "--timeout-ms", "300", "--json", "--", "sleep 30")
        assert timeout.code == 124
        data = timeout.json()
        assert (data["outcome"], data["exit_code"], data["run"]["cause"]) == ("timeout", 124, "timeout")
        assert data["text"].startswith("[timed out after 300 ms")
        timeout_raw = cli(home, "exec", "--session", name, "--timeout-ms", "300", "--", "echo started; sleep 30")
        assert (timeout_raw.code, timeout_raw.stdout) == (124, "started\n")
        assert re.fullmatch(r"executor: timeout: \[timed out after 300 ms[^\n]*\n", timeout_raw.stderr)

        signaled = cli(home, "exec", "--session", name, "--", "kill -TERM $$")
        assert signaled.code == 128 + 15

        denied = cli(home, "exec", "--session", name, "--json", "--", "rm -rf /")
        assert denied.code == 77
        data = denied.json()
        assert set(data) == RESULT_KEYS
        assert (data["outcome"], data["run"], data["artifact_id"]) == ("denied", None, None)
        assert (data["stdout"], data["stdout_whole"], data["stderr"], data["stderr_whole"]) == ("", True, "", True)
        assert "recursive-delete-of-root-or-home" in data["text"]
        denied_raw = cli(home, "exec", "--session", name, "--", "rm -rf /")
        assert (denied_raw.code, denied_raw.stdout) == (77, "")
        assert denied_raw.stderr.startswith("executor: denied: ") and denied_raw.stderr.count("\n") == 1
        assert "recursive-delete-of-root-or-home" in denied_raw.stderr  # the rule, not only "nothing ran"

        blocked = cli(home, "exec", "--session", name, "--json", "--", "git reset --hard HEAD~3")
        assert blocked.code == 75
        assert (blocked.json()["outcome"], blocked.json()["run"]) == ("blocked", None)
        assert blocked.json()["text"].startswith("BLOCKED")
        blocked_raw = cli(home, "exec", "--session", name, "--", "git reset --hard HEAD~3")
        assert (blocked_raw.code, blocked_raw.stdout) == (75, "")
        assert blocked_raw.stderr.startswith("executor: blocked: BLOCKED") and blocked_raw.stderr.count("\n") == 1

        over_cap = cli(home, "exec", "--session", name, "--timeout-ms", "99999999", "--json", "--", "true")
        assert over_cap.code == 2
        assert over_cap.json()["outcome"] == "error" and "bash.max_timeout_ms" in over_cap.json()["error"]
        negative = cli(home, "exec", "--session", name, "--timeout-ms", "-5", "--", "true")
        assert (negative.code, negative.stderr) == (2, "error: timeout_ms must be positive, got -5\n")

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
        assert (fed.code, fed.stdout) == (0, "hi\nfrom stdin")


@pytest.mark.docker
def test_bad_input_exits_2_before_any_session(either_home: Path) -> None:
    """A malformed option is refused with exit 2 and a JSON error, and no session is started for it."""
    home = either_home
    bad_env = cli(home, "exec", "--json", "--env", "NOEQUALS", "--", "true")
    assert bad_env.code == 2
    assert bad_env.json() == {"outcome": "error", "error": "--env 'NOEQUALS' is not KEY=VALUE", "exit_code": 2}
    bad_focus = cli(home, "exec", "--focus-mode", "loud", "--", "true")
    assert bad_focus.code == 2 and "--focus-mode 'loud'" in bad_focus.stderr
    ls = cli(home, "--json", "session", "ls")
    assert ls.json()["sessions"] == []


@pytest.mark.docker
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


@pytest.mark.docker
def test_output_streams_live_and_byte_exact(either_home: Path) -> None:
    """Each line reaches the CLI's stdout when the command prints it (the command then waits for a file this test
    creates only after seeing that line), and binary output of several MiB arrives byte for byte on both streams."""
    import hashlib
    import sys
    import time

    from executor.testing.cli import cli_env

    home = either_home
    with named_session(home) as name:
        assert cli(home, "session", "start", "--name", name).code == 0
        script = "echo first; while [ ! -e go ]; do sleep 0.05; done; echo second"
        proc = subprocess.Popen(
            [sys.executable, "-m", "executor.cli", "exec", "--session", name, "--", script],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=cli_env(home),
        )
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline() == b"first\n"
            assert proc.poll() is None  # still waiting for the file: the line came live
            assert cli(home, "exec", "--session", name, "--", "touch go").code == 0
            rest, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert (proc.returncode, rest, err) == (0, b"second\n", b"")

        size = 3 * 1024 * 1024  # under the service's per-stream buffer: nothing can be dropped
        made = cli(home, "exec", "--session", name, "--", f"head -c {size} /dev/urandom > blob; sha256sum < blob")
        digest = made.stdout.split()[0]
        started = time.monotonic()
        both = cli(home, "exec", "--session", name, "--", "cat blob; cat blob >&2")
        assert both.code == 0, both.stderr[-500:]
        assert len(both.stdout_bytes) == len(both.stderr_bytes) == size, time.monotonic() - started
        assert hashlib.sha256(both.stdout_bytes).hexdigest() == digest
        assert hashlib.sha256(both.stderr_bytes).hexdigest() == digest
        as_json = cli(home, "--json", "exec", "--session", name, "--", "head -c 2000000 blob")
        data = as_json.json()
        assert data["stdout_whole"] is False and data["stdout"]  # bounded, and says so
        # The kept head is the blob's head (UTF-8 with U+FFFD for invalid bytes; its last character may be a
        # sequence the bound cut): random bytes carry every base64 character across the wire.
        kept = data["stdout"][:-1]
        assert len(kept) > 1000 and both.stdout_bytes.decode("utf-8", "replace").startswith(kept)


@pytest.mark.docker
def test_an_ask_is_answered_at_the_terminal(either_home: Path) -> None:
    """With stdin and stderr on a terminal, an ask is shown there and a 'y' runs the command (in-process, and over
    the service through the exec stream's approval event); 'n' denies it (exit 77)."""
    import os
    import pty
    import select
    import sys
    import time

    from executor.testing.cli import cli_env

    home = either_home

    def answered(name: str, answer: bytes) -> tuple[int, bytes, bytes]:
        master, slave = pty.openpty()
        proc = subprocess.Popen(
            [sys.executable, "-m", "executor.cli", "exec", "--session", name, "--", "git reset --hard HEAD~3"],
            stdin=slave,
            stdout=subprocess.PIPE,
            stderr=slave,
            env=cli_env(home),
        )
        os.close(slave)
        shown = b""
        try:
            deadline = time.monotonic() + 120
            while b"[y/N]" not in shown:
                assert time.monotonic() < deadline and proc.poll() is None, shown
                ready, _, _ = select.select([master], [], [], 0.5)
                if ready:
                    shown += os.read(master, 4096)
            os.write(master, answer + b"\n")
            out, _ = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
            os.close(master)
        return proc.returncode, out, shown

    with named_session(home) as name:
        assert cli(home, "session", "start", "--name", name).code == 0
        code, out, shown = answered(name, b"y")
        assert b"=== approval needed ===" in shown and b"git reset --hard HEAD~3" in shown
        assert code == 128 and out == b""  # it ran: git says there is no repository (on stderr, the terminal)
        code, out, _ = answered(name, b"n")
        assert code == 77 and out == b""


@pytest.mark.docker
def test_stdin_and_content_up_to_the_bound_pass_on_both_paths(either_home: Path, tmp_path: Path) -> None:
    """The bound on input is the same in-process and over a service: ``bash.max_stdin_bytes`` (64 MiB) of stdin and
    ``write.max_bytes`` of content go through whole (their base64 in the service's JSON does not count against
    ``service.max_request_bytes``), and a byte more is exit 2 naming a setting that bounds it (over a service with
    the defaults, ``service.max_request_bytes`` is met first)."""
    home = either_home
    whole = tmp_path / "whole.bin"
    whole.write_bytes(bytes(range(256)) * (64 * 1024 * 1024 // 256))
    over = tmp_path / "over.bin"
    over.write_bytes(whole.read_bytes() + b"!")
    with named_session(home) as name:
        fed = cli(home, "exec", "--session", name, "--create", "--stdin", str(whole), "--", "md5sum | cut -c1-32")
        assert (fed.code, fed.stdout.strip()) == (0, hashlib.md5(whole.read_bytes()).hexdigest())
        wrote = cli(home, "write", "--session", name, "copy.bin", "--from", str(whole))
        assert wrote.code == 0, wrote.stderr
        assert cli(home, "exec", "--session", name, "--", "wc -c < copy.bin").stdout == f"{64 * 1024 * 1024}\n"
        refused = cli(home, "exec", "--session", name, "--stdin", str(over), "--", "wc -c")
        assert refused.code == 2 and re.search(r"max_stdin_bytes|max_request_bytes", refused.stderr), refused.stderr
        refused = cli(home, "write", "--session", name, "copy.bin", "--from", str(over))
        assert refused.code == 2 and re.search(r"write\.max_bytes|max_request_bytes", refused.stderr), refused.stderr


@pytest.mark.docker
def test_a_body_the_service_refuses_early_is_exit_2(base_image: str, tmp_path: Path) -> None:
    """A service that refuses a body from its declared length answers 413 before reading it and closes: the thin
    CLI reads that answer (exit 2 naming ``service.max_request_bytes``), not "the service went away" (125)."""
    home = Path(tempfile.mkdtemp(prefix="exc-", dir="/tmp"))
    big = tmp_path / "big.bin"
    big.write_bytes(b"z" * (32 * 1024 * 1024))
    try:
        with serving(home, service__max_request_bytes="64KiB"), named_session(home) as name:
            for args in (
                ("exec", "--session", name, "--create", "--stdin", str(big), "--", "wc -c"),
                ("write", "--session", name, "big.bin", "--from", str(big)),
            ):
                refused = cli(home, *args)
                assert refused.code == 2, refused.stderr
                assert "service.max_request_bytes" in refused.stderr and refused.stderr.count("\n") == 1
    finally:
        cli(home, "session", "gc")
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.docker
def test_options_end_at_the_first_command_word(either_home: Path) -> None:
    """As with ``docker exec``, options end where the command begins, in-process and over a service alike: later
    words that look like options (``--session``, ``-la``, ``--``) belong to the command."""
    home = either_home
    with named_session(home) as name:
        assert cli(home, "session", "start", "--name", name).code == 0
        marked = cli(home, "exec", "--session", name, "--", "touch here")
        assert marked.code == 0, marked.stderr
        echoed = cli(home, "exec", "echo", "hi", "--session", name)
        assert (echoed.code, echoed.stdout) == (0, f"hi --session {name}\n")
        listed = cli(home, "exec", "--session", name, "ls", "-la")
        assert listed.code == 0 and re.search(r" here\n", listed.stdout), listed.stderr
        dashes = cli(home, "exec", "--session", name, "echo", "a", "--", "b")
        assert (dashes.code, dashes.stdout) == (0, "a -- b\n")
        started = cli(home, "--json", "bg", "start", "--session", name, "echo", "bg", "--session", "elsewhere")
        assert started.code == 0, started.stderr
        task = started.json()["task_id"]
        followed = cli(home, "bg", "read", task, "--session", name, "--follow")
        assert followed.stdout == "bg --session elsewhere\n", followed.stderr


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def _started_exec(home: Path, preexec_fn: Callable[[], None] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """An `executor exec` of a long command in a throwaway session, once the command runs (its output streams live
    and the session's container exists)."""
    with subprocess.Popen(
        [sys.executable, "-m", "executor.cli", "exec", "--", "echo started; sleep 300"],
        env=cli_env(home),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=preexec_fn,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"started\n"
        assert home_containers(home) != []
        yield proc


@pytest.mark.docker
@pytest.mark.parametrize(
    ("signum", "sigint_ignored"), [(signal.SIGTERM, False), (signal.SIGHUP, False), (signal.SIGTERM, True)]
)
def test_sigterm_or_sighup_ends_an_exec_as_ctrl_c_does(either_home: Path, signum: int, sigint_ignored: bool) -> None:
    """A CI job cancelled (SIGTERM) or a terminal closed (SIGHUP) ends `executor exec` as Ctrl-C does: exit 130 and
    its throwaway session removed, which kills the command (they were left running, for an hour over a service).
    So does SIGTERM to a background job of a script, which starts with Ctrl-C ignored (it left its session
    running and printed tracebacks)."""
    home = either_home
    with _started_exec(home, preexec_fn=_ignore_sigint if sigint_ignored else None) as proc:
        assert proc.stderr is not None
        proc.send_signal(signum)
        assert proc.wait(timeout=120) == 130
        assert b"Traceback" not in proc.stderr.read()
    deadline = time.monotonic() + 60
    while home_containers(home):
        assert time.monotonic() < deadline, "the throwaway session was left behind"
        time.sleep(0.2)


@pytest.mark.docker
def test_ctrl_c_pressed_again_during_the_clean_up_still_removes_the_session(home: Path) -> None:
    """Ctrl-C held down (SIGINT after SIGINT until the CLI exits) ends the call with 130 and still removes its
    throwaway session: the second one used to land in the removal, which stopped half-way and left the container and
    its volume behind."""
    with _started_exec(home) as proc:
        assert proc.stderr is not None
        deadline = time.monotonic() + 120
        while proc.poll() is None:
            assert time.monotonic() < deadline, "the CLI did not exit"
            proc.send_signal(signal.SIGINT)
            time.sleep(0.02)  # a key held down repeats: the signals keep coming until the process is gone
        # 130, or killed by the signal itself (a shell's $? is 130 either way) when one lands as Python exits.
        assert proc.returncode in (130, -signal.SIGINT)
        assert b"Traceback" not in proc.stderr.read()
    assert home_containers(home) == [], "the throwaway session was left behind"


def home_containers(home: Path) -> list[str]:
    """The ids of the containers of ``home``'s sessions (by their home label), but for a service's warm pools."""
    found = subprocess.run(
        [
            "docker",
            "ps",
            "-a",
            "--format",
            '{{.ID}} {{.Label "executor.pool"}}',
            "--filter",
            f"label=executor.home={home_identity(home)}",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return [line.split()[0] for line in found.stdout.splitlines() if len(line.split()) == 1]


@pytest.mark.docker
def test_concurrent_create_of_one_name_starts_one_session(either_home: Path) -> None:
    """Callers racing to `--create` one name (several processes; a service among them when it runs) all run their
    command in the one session that name gets, new or recreated on its kept workspace: never two containers for a
    name, and never 'add --create' to a caller that said it (they were four containers and three errors)."""
    home = either_home
    in_process = {"EXECUTOR_SERVICE__SOCKET": str(home / "no-service.sock")}

    def race(command: str) -> list[Ran]:
        results: list[Ran] = []

        def one(index: int) -> None:
            results.append(
                cli(home, "exec", "--session", name, "--create", "--", command, env=in_process if index % 2 else None)
            )

        threads = [threading.Thread(target=one, args=(index,)) for index in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return results

    with named_session(home) as name:
        first = race("echo kept > kept.txt; hostname")
        assert [r.code for r in first] == [0] * 6, [r.stderr for r in first]
        assert len({r.stdout for r in first}) == 1  # one container: one hostname
        assert len(home_containers(home)) == 1
        subprocess.run(["docker", "stop", "-t", "1", *home_containers(home)], check=True, timeout=60)
        again = race("cat kept.txt")
        assert [(r.code, r.stdout) for r in again] == [(0, "kept\n")] * 6, [r.stderr for r in again]
        assert len(home_containers(home)) == 1


@pytest.mark.docker
def test_stdout_that_cannot_be_written_ends_the_call_as_docker_exec_does(either_home: Path) -> None:
    """Our stdout's reader going away (``| head``) ends the call with 141 at once (it ran on, writing nowhere, until
    the command's deadline, then exited 0); a full disk is exit 125 saying so (it was 0, the output lost); stdout
    closed from the start still runs the command (its code, its stderr), as docker exec does (it was a traceback)."""
    import os

    home = either_home
    env = cli_env(home)
    base = [sys.executable, "-m", "executor.cli", "exec", "--session"]
    with named_session(home) as name:
        assert cli(home, "session", "start", "--name", name).code == 0
        began = time.monotonic()
        reader = subprocess.Popen([*base, name, "--", "yes"], env=env, stdout=subprocess.PIPE)
        assert reader.stdout is not None
        assert reader.stdout.readline() == b"y\n"
        reader.stdout.close()
        assert reader.wait(timeout=90) == 141
        assert time.monotonic() - began < 60  # not the command's 120 s deadline
        with Path("/dev/full").open("wb") as full:
            done = subprocess.run(
                [*base, name, "--", "echo hi"], env=env, stdout=full, stderr=subprocess.PIPE, timeout=120
            )
        assert done.returncode == 125 and b"cannot write the command's output to stdout" in done.stderr
        closed = subprocess.run(
            [*base, name, "--", "echo hi; echo e >&2; exit 4"],
            env=env,
            stderr=subprocess.PIPE,
            preexec_fn=lambda: os.close(1),
            timeout=120,
        )
        assert (closed.returncode, closed.stderr) == (4, b"e\n"), closed.stderr


@pytest.mark.docker
def test_closed_stdout_or_stderr_still_ends_with_the_commands_code(either_home: Path) -> None:
    """Started with stderr closed (``2>&-``) the call printed stdout and exited 1 over a service (a write to the
    missing stderr raised); ``--json`` with stdout closed printed tracebacks. Both now exit with the command's code
    and print nothing about themselves, on both paths."""
    import os

    home = either_home
    env = cli_env(home)
    with named_session(home) as name:
        assert cli(home, "session", "start", "--name", name).code == 0
        script = "echo out; echo err >&2; exit 6"
        no_stderr = subprocess.run(
            [sys.executable, "-m", "executor.cli", "exec", "--session", name, "--", script],
            env=env,
            stdout=subprocess.PIPE,
            preexec_fn=lambda: os.close(2),
            timeout=120,
        )
        assert (no_stderr.returncode, no_stderr.stdout) == (6, b"out\n")
        no_stdout = subprocess.run(
            [sys.executable, "-m", "executor.cli", "--json", "exec", "--session", name, "--", script],
            env=env,
            stderr=subprocess.PIPE,
            preexec_fn=lambda: os.close(1),
            timeout=120,
        )
        assert no_stdout.returncode == 6 and b"Traceback" not in no_stdout.stderr, no_stdout.stderr


@pytest.mark.docker
def test_arguments_that_are_not_utf8_are_bad_input_on_both_paths(either_home: Path) -> None:
    """A command, an environment value, a write path or a search pattern holding bytes that are not UTF-8 is exit 2
    naming it, on both paths (over a service it was 125, 'internal error', or the service's JSON parser's words)."""
    home = either_home
    bad = b"\xff".decode("utf-8", "surrogateescape")
    with named_session(home) as name:
        assert cli(home, "session", "start", "--name", name).code == 0
        ran = cli(home, "--json", "exec", "--session", name, "--", "seq 3")
        artifact = ran.json()["artifact_id"]
        for args in (
            ["exec", "--session", name, "--", f"echo {bad}"],
            ["exec", "--session", name, "--env", f"A={bad}", "--", "true"],
            ["write", "--session", name, f"x{bad}"],
            ["output", "search", artifact, "--pattern", bad],
        ):
            refused = cli(home, *args, stdin=b"")
            assert refused.code == 2, (args, refused.stdout, refused.stderr)
            assert "not valid UTF-8" in refused.stderr, (args, refused.stderr)
