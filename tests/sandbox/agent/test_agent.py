"""The agent (agent.c) as a real process: bash semantics, the termination catalogue, tasks, protocol robustness.

Every test talks to the ASan/UBSan build over its unix socket; the fixture fails the test if a sanitizer fired.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
from pathlib import Path

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from executor.errors import AgentError, SandboxLost, TaskNotFound
from executor.models import RunResult
from executor.sandbox.agent.client import AgentClient, open_agent_unix
from executor.sandbox.agent.protocol import (
    PROTOCOL_VERSION,
    Fields,
    Frame,
    FrameDecoder,
    FrameType,
    Tag,
    TaskChunk,
    encode_fields,
    encode_frame,
)
from executor.testing.agent import (
    GID,
    UID,
    Capture,
    LiveAgent,
    children_of,
    pid_alive,
    seccomp_deny,
    start_agent,
    stop_agent,
)

_MAX = 1 << 20


class Raw:
    """A bare protocol connection, for what the client never sends."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder(_MAX)
        self.pending: list[Frame] = []

    @classmethod
    async def open(cls, live: LiveAgent, *, hello: bool = True) -> Raw:
        raw = cls(await trio.open_unix_socket(live.socket))
        if hello:
            await raw.send(FrameType.HELLO, 0, encode_fields([(Tag.VERSION, PROTOCOL_VERSION), (Tag.MAX_FRAME, _MAX)]))
            assert (await raw.frame()).type == FrameType.HELLO_OK
        return raw

    async def __aenter__(self) -> Raw:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stream.aclose()

    async def send(self, ftype: int, fid: int, payload: bytes = b"") -> None:
        await self.stream.send_all(encode_frame(ftype, fid, payload, max_frame=_MAX))

    async def frame(self) -> Frame:
        while not self.pending:
            data = await self.stream.receive_some(65536)
            if not data:
                raise EOFError("the agent closed the connection")
            self.pending += self.decoder.feed(data)
        return self.pending.pop(0)

    async def closed_by_agent(self) -> bool:
        """True when the agent closes the connection (frames before that are skipped)."""
        try:
            while True:
                await self.frame()
        except (EOFError, trio.BrokenResourceError):
            return True


async def run(client: AgentClient, live: LiveAgent, command: str, **kwargs: object) -> tuple[Capture, RunResult]:
    sink = Capture()
    with trio.fail_after(20):
        result = await client.run(live.spec(command, **kwargs), sink)
    return sink, result


async def wait_dead(pid: int, within_s: float = 3.0) -> bool:
    for _ in range(int(within_s / 0.02)):
        if not pid_alive(pid):
            return True
        await trio.sleep(0.02)
    return not pid_alive(pid)


async def task_chunk(client: AgentClient, task: str, *, until: str = "finished", within_s: float = 10.0) -> TaskChunk:
    """Read a task's stdout from 0 until it finished (or has data)."""
    for _ in range(int(within_s / 0.02)):
        chunk = await client.read_task(task, "stdout", 0)
        if (until == "finished" and not chunk.running) or (until == "data" and chunk.data):
            return chunk
        await trio.sleep(0.02)
    raise AssertionError(f"task {task} did not get to {until} within {within_s}s")


# ---------------------------------------------------------------- bash semantics


async def test_exit_code_and_streams(client: AgentClient, live_agent: LiveAgent) -> None:
    """`exit 3` is reported as exited 3 with each stream captured separately."""
    sink, result = await run(client, live_agent, "echo out; echo err >&2; exit 3")
    assert (result.cause, result.exit_code, result.signal) == ("exited", 3, None)
    assert (sink.out, sink.err) == (b"out\n", b"err\n")
    assert result.stream_bytes == {"stdout": 4, "stderr": 4}
    assert result.max_rss_kb > 0 and result.cpu_ms >= 0


async def test_kill_9_self_is_signaled(client: AgentClient, live_agent: LiveAgent) -> None:
    """`kill -9 $$` is reported as signaled with signal 9, not as an exit code."""
    _, result = await run(client, live_agent, "kill -9 $$")
    assert (result.cause, result.exit_code, result.signal) == ("signaled", None, 9)


async def test_exit_137_stays_exited(client: AgentClient, live_agent: LiveAgent) -> None:
    """`exit 137` is an exit, never mistaken for a kill or an OOM."""
    _, result = await run(client, live_agent, "exit 137")
    assert (result.cause, result.exit_code, result.signal) == ("exited", 137, None)


async def test_read_sees_eof_at_once(client: AgentClient, live_agent: LiveAgent) -> None:
    """Without caller stdin, `read x` gets EOF at once (stdin is /dev/null)."""
    sink, result = await run(client, live_agent, 'read x; echo "rc=$?"')
    assert sink.out == b"rc=1\n"
    assert result.cause == "exited"  # not held until the 5 s deadline


async def test_stdin_bytes_streamed_then_closed(client: AgentClient, live_agent: LiveAgent) -> None:
    """Caller stdin larger than one frame reaches the command whole, then EOF."""
    data = os.urandom(3 * _MAX + 17)
    sink, result = await run(client, live_agent, "sha256sum", stdin=data)
    assert result.exit_code == 0
    assert sink.out.split()[0].decode() == hashlib.sha256(data).hexdigest()


async def test_runs_as_session_user_in_cwd(client: AgentClient, live_agent: LiveAgent) -> None:
    """Commands run as the session uid/gid, no supplementary groups, in the given cwd, with the workspace chowned."""
    sink, _ = await run(client, live_agent, "id -u; id -g; id -G; pwd")
    assert sink.out.decode().split() == [str(UID), str(GID), str(GID), str(live_agent.workspace)]
    assert live_agent.workspace.stat().st_uid == UID


async def test_environment_scrubbed_defaults_then_caller(client: AgentClient, live_agent: LiveAgent) -> None:
    """Credential-shaped host names are gone, the defaults are set, and caller entries win even on secret names."""
    sink, _ = await run(client, live_agent, "env", env={"GH_TOKEN": "from-caller", "TERM": "xterm"})
    env = dict(line.split("=", 1) for line in sink.out.decode().splitlines() if "=" in line)
    assert "MY_API_KEY" not in env and "sk-host-secret" not in sink.out.decode()
    assert env["GH_TOKEN"] == "from-caller"
    assert env["TERM"] == "xterm"
    assert (env["NO_COLOR"], env["PAGER"], env["GIT_PAGER"]) == ("1", "cat", "cat")
    assert env["HOME"] == str(live_agent.home)
    assert re.fullmatch(r"\d+-[0-9a-f]+-\d+", env["EXECUTOR_RUN_TAG"])


async def test_agent_wipes_its_own_environment_block(client: AgentClient, live_agent: LiveAgent) -> None:
    """The agent's /proc/PID/environ holds only NUL bytes (gVisor lets any user read it), yet commands get the env."""
    block = await trio.Path(f"/proc/{live_agent.proc.pid}/environ").read_bytes()
    assert block and block.strip(b"\0") == b""
    sink, _ = await run(client, live_agent, "echo $PATH")
    assert sink.out.decode().strip() == "/usr/local/bin:/usr/bin:/bin"


async def test_command_environment_is_built_from_the_allow_list(asan_agent: Path) -> None:
    """The agent's own environ reaches commands only through the allow-list: loader, shell start-up and other
    names are dropped, PATH loses every folder the session can write, and operator names (--pass-env) pass."""
    hostile = {
        "LD_PRELOAD": "/nonexistent.so",
        "BASH_ENV": "/tmp/x.sh",
        "PYTHONSTARTUP": "/tmp/s.py",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
        "OPERATOR_SETTING": "kept",
        "RANDOM_IMAGE_VAR": "dropped",
    }
    live = start_agent(asan_agent, env=hostile, extra_args=["--pass-env", "OPERATOR_SETTING,NOT_SET"])
    try:
        async with open_agent_unix(live.socket, timeout_s=10) as agent_client:
            sink, result = await run(agent_client, live, "env")
    finally:
        assert stop_agent(live) == 0
        shutil.rmtree(live.root, ignore_errors=True)
    assert result.exit_code == 0
    env = dict(line.split("=", 1) for line in sink.out.decode().splitlines() if "=" in line)
    for name in ("LD_PRELOAD", "BASH_ENV", "PYTHONSTARTUP", "RANDOM_IMAGE_VAR", "ASAN_OPTIONS"):
        assert name not in env, name
    assert (env["LANG"], env["LC_ALL"], env["TZ"], env["OPERATOR_SETTING"]) == ("C.UTF-8", "C.UTF-8", "UTC", "kept")
    assert env["PATH"] == "/usr/local/bin:/usr/bin:/bin"


async def test_image_path_loses_folders_the_session_can_write(asan_agent: Path) -> None:
    """A PATH naming the workspace, /tmp or a relative folder keeps only its other folders; nothing left means the
    default PATH."""
    live = start_agent(asan_agent, env={"PATH": "/tmp/bin:.::/usr/bin:relative:/var/tmp/x:/bin"})
    try:
        async with open_agent_unix(live.socket, timeout_s=10) as agent_client:
            sink, _ = await run(agent_client, live, 'printf %s "$PATH"')
    finally:
        assert stop_agent(live) == 0
        shutil.rmtree(live.root, ignore_errors=True)
    assert sink.out.decode() == "/usr/bin:/bin"


async def test_output_split_mid_utf8_is_byte_exact(client: AgentClient, live_agent: LiveAgent) -> None:
    """A code point split across two writes, and 2 MB of random bytes, arrive byte for byte."""
    sink, _ = await run(client, live_agent, r"printf '\xe2\x82'; sleep 0.05; printf '\xac\n'")
    assert sink.out == "€\n".encode()
    sink, result = await run(client, live_agent, "head -c 2000000 /dev/urandom > blob; cat blob")
    assert sink.out == (live_agent.workspace / "blob").read_bytes()
    assert result.stream_bytes["stdout"] == 2_000_000


async def test_explicit_argv_and_errors(client: AgentClient, live_agent: LiveAgent) -> None:
    """An explicit argv runs without a shell; a missing cwd is refused with the reason."""
    sink = Capture()
    result = await client.run(live_agent.spec(""), sink, argv=["/bin/echo", "a  b", "$HOME"])
    assert (result.exit_code, sink.out) == (0, b"a  b $HOME\n")
    with pytest.raises(AgentError, match="chdir"):
        await client.run(live_agent.spec("true", cwd="/nonexistent"), Capture())


# ---------------------------------------------------------------- termination catalogue


async def test_timeout_kills_term_ignoring_group(client: AgentClient, live_agent: LiveAgent) -> None:
    """A group that ignores SIGTERM is SIGKILLed after the grace period and reported as a timeout."""
    sink, result = await run(client, live_agent, "trap '' TERM; sleep 30 & echo $!; wait", timeout_ms=300, grace_ms=300)
    assert result.cause == "timeout"
    assert result.duration_ms >= 550  # the grace was given; that the sleep was not waited for is wait_dead's
    assert await wait_dead(int(sink.out))


async def test_kill_escalates_when_the_shell_exits(client: AgentClient, live_agent: LiveAgent) -> None:
    """Once the shell exits on SIGTERM, a TERM-ignoring child is SIGKILLed at once, not after the grace."""
    command = "(trap '' TERM; exec sleep 30) & echo $!; trap 'exit 0' TERM; wait"
    sink, result = await run(client, live_agent, command, timeout_ms=300, grace_ms=10_000)
    assert result.cause == "timeout"
    assert result.duration_ms < 10_000  # before the grace ran out
    assert await wait_dead(int(sink.out))


async def test_background_job_with_redirected_stdio(client: AgentClient, live_agent: LiveAgent) -> None:
    """A job that redirected its stdio and outlives the shell does not hold the call, and is killed and listed."""
    sink, result = await run(client, live_agent, "sleep 30 >/dev/null 2>&1 & echo $!")
    pid = int(sink.out)
    assert result.cause == "exited" and not result.drain_cut
    assert result.duration_ms < 30_000  # the call did not wait for the job
    assert pid in [p.pid for p in result.orphans_killed]
    # Listed by pid: under load the job may not have exec'd sleep yet when it is found (its cmdline still bash's).
    assert pid in [p.pid for p in result.orphans_left]
    assert await wait_dead(pid)


async def test_orphans_kept_when_asked(client: AgentClient, live_agent: LiveAgent) -> None:
    """With kill_orphans off, leftovers are listed but left running."""
    sink, result = await run(client, live_agent, "sleep 30 >/dev/null 2>&1 & echo $!", kill_orphans=False)
    pid = int(sink.out)
    assert [p.pid for p in result.orphans_left] == [pid] and result.orphans_killed == ()
    assert pid_alive(pid)
    os.kill(pid, 9)


async def test_process_substitution_holding_stdout(client: AgentClient, live_agent: LiveAgent) -> None:
    """A grandchild holding the stdout pipe costs at most the drain bound, is cut, and is killed."""
    sink, result = await run(client, live_agent, "echo hi > >(echo $BASHPID; exec sleep 30)", drain_ms=300)
    pid = int(sink.out.split()[0])
    assert result.drain_cut
    assert result.duration_ms < 30_000  # the holder was not waited for
    assert await wait_dead(pid)


async def test_setsid_double_fork_found_by_tag(client: AgentClient, live_agent: LiveAgent) -> None:
    """A setsid double-forked daemon leaves the group but carries the run tag, so it is found and killed."""
    command = "setsid -f sh -c 'exec sleep 33' >/dev/null 2>&1 </dev/null; sleep 0.2"
    _, result = await run(client, live_agent, command)
    killed = [p for p in result.orphans_killed if p.cmd == "sleep 33"]
    assert len(killed) == 1
    assert await wait_dead(killed[0].pid)


async def test_env_i_daemon_caught_at_once_alone_or_when_the_session_goes_quiet(
    client: AgentClient, live_agent: LiveAgent
) -> None:
    """An `env -i` setsid daemon carries no tag. Started by a run that has the session to itself it is that run's
    leftover by its start time, killed when the run ends; started while another run is live it cannot be told apart
    from that run's, and is killed when the last of them ends (listed there), not left to the session's sweep."""
    command = "setsid -f env -i sleep {n} >/dev/null 2>&1 </dev/null; sleep 0.2"
    _, alone = await run(client, live_agent, command.format(n=34))
    assert [p.cmd for p in alone.orphans_killed] == ["sleep 34"], alone
    ended: list[RunResult] = []

    async def other() -> None:
        ended.append((await run(client, live_agent, "sleep 1"))[1])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)
        await trio.testing.wait_all_tasks_blocked()  # the other run's frame went first: it is live
        _, shared = await run(client, live_agent, command.format(n=35))
        assert not ended, "the other run ended first: the test needs it to end last"
    assert not any(p.cmd == "sleep 35" for p in shared.orphans_killed)
    killed = [p for p in ended[0].orphans_killed if p.cmd == "sleep 35"]
    assert len(killed) == 1, ended[0]
    assert await wait_dead(killed[0].pid)
    assert not any(p.cmd == "sleep 35" for p in await client.sweep())


async def test_the_quiet_sweep_spares_new_children_of_a_kept_daemon(client: AgentClient, live_agent: LiveAgent) -> None:
    """A background task keeps its leftovers: its untagged daemon, started before two commands overlap, goes on
    forking workers during them; when the session goes quiet the sweep takes what the overlapping commands left, not
    the daemon's new workers (review: it killed them)."""
    task = await client.start_task(
        live_agent.spec(
            # The daemon is in its own session before the task's shell ends (sleep 0.3): the task's scan then sees
            # it as it will stay, and it starts ticks before the overlap (/proc start times count 10 ms ticks).
            "env -i setsid sh -c 'while :; do sleep 0.4; done' </dev/null >/dev/null 2>&1 & sleep 0.3; echo started",
            kill_orphans=False,
            timeout_ms=None,
        )
    )
    await task_chunk(client, task)
    ended: list[RunResult] = []

    async def other() -> None:
        ended.append((await run(client, live_agent, "sleep 1.2"))[1])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)
        await trio.testing.wait_all_tasks_blocked()  # the other run's frame went first: it is live
        await run(client, live_agent, "setsid -f env -i sleep 36 >/dev/null 2>&1 </dev/null; sleep 0.2")
    killed = [p.cmd for p in ended[0].orphans_killed]
    assert "sleep 36" in killed, ended[0]  # the overlapping command's daemon: taken when the session went quiet
    assert not any(cmd.startswith("sleep 0.4") or "while" in cmd for cmd in killed), killed
    swept = [p.cmd for p in await client.sweep()]
    assert any("while" in cmd for cmd in swept), swept  # the daemon lived until the session's sweep


_NON_DUMPABLE = "import ctypes, os, sys, time\nctypes.CDLL(None).prctl(4, 0, 0, 0, 0)\n{body}"
"""A python program made non-dumpable (prctl PR_SET_DUMPABLE 0): the kernel gives its /proc files to root."""


def _script(live: LiveAgent, name: str, text: str) -> str:
    path = live.workspace / name
    path.write_text(text)
    path.chmod(0o644)
    return str(path)


async def test_a_non_dumpable_or_leaderless_escapee_is_still_a_leftover(
    client: AgentClient, live_agent: LiveAgent
) -> None:
    """An untagged daemon whose /proc files are root's (non-dumpable) was skipped as not the session user's; one
    whose main thread exited (a zombie leader, its other threads running) was skipped as dead. Both ran on after
    their run said nothing was left. Each is now a leftover of the run that had the session alone, killed."""
    pidfile = live_agent.workspace / "pid"
    hidden = _script(
        live_agent,
        "nd.py",
        _NON_DUMPABLE.format(body=f"open({str(pidfile)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)\n"),
    )
    leaderless = _script(
        live_agent,
        "zl.py",
        "import ctypes, os, threading, time\n"
        f"open({str(pidfile)!r}, 'w').write(str(os.getpid()))\n"
        "threading.Thread(target=time.sleep, args=(60,)).start()\ntime.sleep(0.1)\n"
        "ctypes.CDLL(None).pthread_exit(None)\n",
    )
    for script in (hidden, leaderless):
        pidfile.unlink(missing_ok=True)
        command = (
            f"env -i setsid python3 {script} >/dev/null 2>&1 </dev/null & "
            f"while [ ! -s {pidfile} ]; do sleep 0.05; done; sleep 0.3"
        )
        _, result = await run(client, live_agent, command)
        pid = int(pidfile.read_text())
        assert pid in [p.pid for p in result.orphans_killed], (script, result)
        assert await wait_dead(pid), script


async def test_an_interrupted_runs_untagged_daemon_is_its_own_though_the_next_run_starts_at_once(
    client: AgentClient, live_agent: LiveAgent
) -> None:
    """Ctrl-C, then the next command at once, while the interrupted one is still in its kill grace: the next run
    no longer takes the session from it, so its `env -i` daemon (started before the next run) is still its leftover,
    killed; the next run's own processes are not the interrupted run's."""
    pidfile = live_agent.workspace / "daemon"
    pidfile.unlink(missing_ok=True)
    command = f"env -i setsid sleep 39 >/dev/null 2>&1 </dev/null & echo $! > {pidfile}; trap '' TERM; sleep 100"
    interrupted = trio.CancelScope()

    async def first() -> None:
        with interrupted:
            await client.run(live_agent.spec(command, grace_ms=2000), Capture())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(first)
        for _ in range(200):  # the daemon is started
            if pidfile.exists() and pidfile.read_text().strip():
                break
            await trio.sleep(0.05)
        interrupted.cancel()  # Ctrl-C: the agent starts its TERM, grace, KILL
        await trio.sleep(0.1)
        _, after = await run(client, live_agent, "sleep 0.2; echo next")  # within the first run's grace
    assert after.exit_code == 0
    daemon = int(pidfile.read_text())
    assert await wait_dead(daemon, within_s=10.0), "the interrupted run's env -i daemon outlived it"


async def test_many_short_children_leave_no_zombies(client: AgentClient, live_agent: LiveAgent) -> None:
    """200 short-lived background children are all reaped: no zombie stays under the agent."""
    _, result = await run(client, live_agent, "for i in $(seq 200); do (true &); done; sleep 0.1")
    assert result.exit_code == 0
    for _ in range(60):
        if not any(state == "Z" for _, state in children_of(live_agent.proc.pid)):
            break
        await trio.sleep(0.05)
    assert not any(state == "Z" for _, state in children_of(live_agent.proc.pid))


async def test_cancel_cause_over_the_wire(live_agent: LiveAgent) -> None:
    """A CANCEL frame kills the group and the result says cancelled."""
    async with await Raw.open(live_agent) as raw:
        payload = encode_fields(
            [(Tag.CMD, "echo $$; sleep 30"), (Tag.CWD, str(live_agent.workspace)), (Tag.GRACE_MS, 200)]
        )
        await raw.send(FrameType.RUN, 5, payload)
        with trio.fail_after(10):
            assert (await raw.frame()).type == FrameType.STARTED
            out = await raw.frame()
            assert out.type == FrameType.OUT
            await raw.send(FrameType.CANCEL, 5)
            result = await raw.frame()
        assert result.type == FrameType.RESULT
        assert Fields(result.payload).text(Tag.CAUSE) == "cancelled"
        assert await wait_dead(int(out.payload))


async def test_cancelled_caller_kills_the_run(client: AgentClient, live_agent: LiveAgent) -> None:
    """A caller cancelled by its cancel scope gets Cancelled, and the command's group is gone by then."""
    sink = Capture()
    with trio.move_on_after(0.5) as scope:
        await client.run(live_agent.spec("echo $$; sleep 30", grace_ms=200), sink)
    assert scope.cancelled_caught
    pid = int(sink.out)
    assert not pid_alive(pid)
    _, result = await run(client, live_agent, "echo still-usable")
    assert result.exit_code == 0


async def test_host_disconnect_kills_foreground_run(live_agent: LiveAgent) -> None:
    """When the host connection drops, the agent kills that connection's foreground runs."""
    async with await Raw.open(live_agent) as raw:
        payload = encode_fields([(Tag.CMD, "echo $$; sleep 30"), (Tag.CWD, str(live_agent.workspace))])
        await raw.send(FrameType.RUN, 1, payload)
        with trio.fail_after(10):
            await raw.frame()
            out = await raw.frame()
    pid = int(out.payload)
    assert await wait_dead(pid, 5.0)


# ---------------------------------------------------------------- connections and protocol


async def test_two_connections_run_concurrently(live_agent: LiveAgent) -> None:
    """Two host connections to one agent both run commands at the same time: each waits to see the other's mark."""
    results: list[bytes] = []

    async def one(tag: str, other: str) -> None:
        # Run one at a time, the first would never see the second's mark (and would say "alone").
        command = f"touch {tag}; for i in $(seq 200); do [ -e {other} ] && break; sleep 0.05; done; "
        command += f"if [ -e {other} ]; then echo {tag}; else echo alone; fi"
        async with open_agent_unix(live_agent.socket) as c:
            sink, _ = await run(c, live_agent, command)
            results.append(sink.out)

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(one, "a", "b")
            nursery.start_soon(one, "b", "a")
    assert sorted(results) == [b"a\n", b"b\n"]


async def test_many_runs_multiplexed_on_one_connection(client: AgentClient, live_agent: LiveAgent) -> None:
    """Twenty concurrent runs on one connection each get their own output and result."""
    outs: dict[int, bytes] = {}

    async def one(i: int) -> None:
        sink, result = await run(client, live_agent, f"for j in 1 2 3; do echo {i}-$j; done; exit {i}")
        assert result.exit_code == i
        outs[i] = sink.out

    async with trio.open_nursery() as nursery:
        for i in range(20):
            nursery.start_soon(one, i)
    assert outs == {i: f"{i}-1\n{i}-2\n{i}-3\n".encode() for i in range(20)}


async def test_version_mismatch_is_refused(live_agent: LiveAgent) -> None:
    """A HELLO with another protocol version gets an ERROR naming both versions, then the connection closes."""
    async with await Raw.open(live_agent, hello=False) as raw:
        await raw.send(FrameType.HELLO, 0, encode_fields([(Tag.VERSION, 99), (Tag.MAX_FRAME, _MAX)]))
        with trio.fail_after(5):
            reply = await raw.frame()
            assert reply.type == FrameType.ERROR
            assert Fields(reply.payload).text(Tag.CODE) == "version"
            assert "agent speaks 1, host sent 99" in Fields(reply.payload).text(Tag.MSG)
            assert await raw.closed_by_agent()


@pytest.mark.parametrize(
    "junk",
    [
        pytest.param(b"\x00\x00\x00\x05\x7f\x00\x00\x00\x01", id="unknown-type"),
        pytest.param(b"\xff\xff\xff\xff\x02\x00\x00\x00\x01", id="huge-length"),
        pytest.param(b"\x00\x00\x00\x02\x02", id="length-below-header"),
        pytest.param(b"\x00\x00\x00\x05\x01\x00\x00\x00\x00", id="second-hello"),
    ],
)
async def test_malformed_frame_closes_only_that_connection(
    client: AgentClient, live_agent: LiveAgent, junk: bytes
) -> None:
    """A malformed frame closes its connection; the agent goes on serving the others."""
    async with await Raw.open(live_agent) as raw:
        await raw.stream.send_all(junk)
        with trio.fail_after(5):
            assert await raw.closed_by_agent()
        assert await client.ping(b"alive") == b"alive"


async def test_frame_before_hello_and_truncated_frame(client: AgentClient, live_agent: LiveAgent) -> None:
    """A request before the handshake closes the connection; a truncated frame then EOF harms nobody."""
    async with await Raw.open(live_agent, hello=False) as raw:
        await raw.send(FrameType.PING, 1, b"x")
        with trio.fail_after(5):
            assert await raw.closed_by_agent()
    async with await Raw.open(live_agent) as raw:
        await raw.stream.send_all(encode_frame(FrameType.PING, 1, b"abcdef", max_frame=_MAX)[:-3])
    assert await client.ping(b"ok") == b"ok"


async def test_bad_fields_get_an_error_and_keep_the_connection(live_agent: LiveAgent) -> None:
    """A RUN with a truncated or unknown field is refused with ERROR; the connection stays usable."""
    async with await Raw.open(live_agent) as raw:
        with trio.fail_after(5):
            await raw.send(FrameType.RUN, 1, b"\x01\x00\x00\x00\x09abc")
            reply = await raw.frame()
            assert (reply.type, Fields(reply.payload).text(Tag.CODE)) == (FrameType.ERROR, "bad_request")
            await raw.send(FrameType.RUN, 2, encode_fields([(Tag.CMD, "true"), (99, b"x")]))
            assert (await raw.frame()).type == FrameType.ERROR
            await raw.send(FrameType.PING, 3, b"still")
            assert (await raw.frame()).payload == b"still"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(junk=st.binary(min_size=1, max_size=600), after_hello=st.booleans())
async def test_random_bytes_never_crash_the_agent(live_agent: LiveAgent, junk: bytes, after_hello: bool) -> None:
    """Random bytes on a connection (before or after the handshake) never take the sanitizer build down."""
    async with await Raw.open(live_agent, hello=after_hello) as raw:
        await raw.stream.send_all(junk)
    with trio.fail_after(5):
        async with open_agent_unix(live_agent.socket) as probe:
            assert await probe.ping(b"p") == b"p"
    assert live_agent.proc.poll() is None


async def test_info(client: AgentClient, live_agent: LiveAgent) -> None:
    """INFO reports the session uid/gid, bash, and the agent's pid."""
    info = await client.info()
    assert (info.uid, info.gid, info.has_bash, info.pid, info.is_init) == (UID, GID, True, live_agent.proc.pid, False)
    assert info.protocol == PROTOCOL_VERSION


# ---------------------------------------------------------------- background tasks


async def test_task_read_by_offsets_across_reconnect(live_agent: LiveAgent) -> None:
    """A task keeps running and buffering without a host; a new connection reads it whole by offsets."""
    expected = b"".join(f"line{i}\n".encode() for i in range(1, 101))
    async with open_agent_unix(live_agent.socket) as first:
        task = await first.start_task(live_agent.spec("for i in $(seq 1 100); do echo line$i; sleep 0.002; done"))
    await trio.sleep(0.1)
    async with open_agent_unix(live_agent.socket) as second:
        got = bytearray()
        offset = 0
        with trio.fail_after(10):
            while True:
                chunk = await second.read_task(task, "stdout", offset, 64)
                assert chunk.offset == offset and chunk.start == 0
                got += chunk.data
                offset += len(chunk.data)
                if not chunk.running and offset == chunk.end:
                    break
                if not chunk.data:
                    await trio.sleep(0.02)
        assert bytes(got) == expected
        assert chunk.result is not None and chunk.result.exit_code == 0
        assert [t.task_id for t in await second.list_tasks()] == [task]


async def test_task_ring_drops_oldest(asan_agent: Path) -> None:
    """Past --detached-buffer bytes the oldest are dropped: start moves up and the tail stays exact."""
    live = start_agent(asan_agent, extra_args=["--detached-buffer", "4096"])
    try:
        async with open_agent_unix(live.socket) as c:
            task = await c.start_task(live.spec("seq 1 5000"))
            chunk = await task_chunk(c, task)
        full = b"".join(f"{i}\n".encode() for i in range(1, 5001))
        assert chunk.end == len(full)
        assert chunk.start == chunk.dropped == len(full) - 4096
        assert chunk.offset == chunk.start and chunk.data == full[-4096:]
    finally:
        assert stop_agent(live) == 0


async def test_stop_task_kills_its_group(client: AgentClient, live_agent: LiveAgent) -> None:
    """STOP kills a TERM-ignoring task after the grace and returns the cancelled result; unknown ids are refused."""
    task = await client.start_task(live_agent.spec("trap '' TERM; echo $$; sleep 30", grace_ms=200))
    chunk = await task_chunk(client, task, until="data")
    with trio.fail_after(5):
        result = await client.stop_task(task)
    assert result.cause == "cancelled"
    assert await wait_dead(int(chunk.data))
    assert (await client.stop_task(task)).cause == "cancelled"
    with pytest.raises(TaskNotFound):
        await client.read_task("t999", "stdout", 0)


async def test_task_stdin_inline(client: AgentClient, live_agent: LiveAgent) -> None:
    """A task's stdin travels inline and reaches the command."""
    task = await client.start_task(live_agent.spec("cat", stdin=b"fed\n"))
    chunk = await task_chunk(client, task)
    assert chunk.data == b"fed\n"


async def test_agent_death_mid_run_raises_sandbox_lost(asan_agent: Path) -> None:
    """When the agent dies under a running command, the caller gets SandboxLost, never a result."""
    live = start_agent(asan_agent)
    sink = Capture()
    try:
        async with open_agent_unix(live.socket) as c:

            async def kill_agent_soon() -> None:
                await trio.sleep(0.3)
                live.proc.kill()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(kill_agent_soon)
                with pytest.raises(SandboxLost, match="closed the connection"), trio.fail_after(10):
                    await c.run(live.spec("echo $$; sleep 30"), sink)
    finally:
        live.proc.wait(timeout=10)
        if sink.out.strip():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(sink.out), 9)
        shutil.rmtree(live.root, ignore_errors=True)


# --- failing closed -------------------------------------------------------------------------------------------

_SECCOMP_MACHINES = ("x86_64", "aarch64")


@pytest.mark.skipif(os.uname().machine not in _SECCOMP_MACHINES, reason="seccomp table has x86_64 and aarch64")
def test_the_agent_stops_when_it_cannot_drop_its_capabilities(asan_agent: Path, tmp_path: Path) -> None:
    """A capset that fails stops the agent before it serves anyone: exit 3, a clear log line, no socket left."""
    import subprocess

    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    for name in ("ws", "home", "state"):
        (tmp_path / name).mkdir()
    sock = run / "agent.sock"
    args = [str(asan_agent), "init", "--listen", str(sock), "--uid", str(UID), "--gid", str(GID)]
    args += [
        "--workspace",
        str(tmp_path / "ws"),
        "--home",
        str(tmp_path / "home"),
        "--state-dir",
        str(tmp_path / "state"),
    ]
    done = subprocess.run(
        args,
        preexec_fn=seccomp_deny("capset"),
        env={"PATH": "/usr/bin:/bin", "ASAN_OPTIONS": "detect_leaks=0"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
        check=False,
    )
    log = done.stderr.decode(errors="replace")
    assert done.returncode == 3, log
    assert "capset: Operation not permitted" in log
    assert "cannot drop capabilities to KILL SETUID SETGID: refusing to serve" in log
    assert not sock.exists() and "listening on" not in log


_ESCAPEE = (
    "setsid -f sh -c 'echo $$ > escapee.pid; exec sleep 30' >/dev/null 2>&1 </dev/null; "
    "while [ ! -s escapee.pid ]; do :; done; echo started"
)
"""A setsid escapee leaves the run's group, so the agent reads its environ to find the run tag. The shell ends only
once the escapee is in its own session (it writes its pid after setsid), so the run cannot end through the group kill
alone."""


@pytest.mark.skipif(os.uname().machine not in _SECCOMP_MACHINES, reason="seccomp table has x86_64 and aarch64")
async def test_the_agent_stops_when_it_cannot_restore_its_filesystem_ids(asan_agent: Path) -> None:
    """An id switch that cannot be verified (setfsuid refused, and the effective ids it falls back to as well) stops
    the agent, sweeping what ran: exit 4."""
    live = start_agent(asan_agent, preexec_fn=seccomp_deny("setfsuid", "setfsgid", "setresuid", "setresgid"))
    try:
        lost = False
        try:
            with trio.fail_after(20):
                async with open_agent_unix(live.socket, timeout_s=10) as agent_client, trio.open_nursery() as nursery:
                    # Another run is live, so the escapee is found by its tag (its environ), not its start time.
                    nursery.start_soon(agent_client.run, live.spec("sleep 15"), Capture())
                    await trio.testing.wait_all_tasks_blocked()
                    await agent_client.run(live.spec(_ESCAPEE), Capture())
        except* (AgentError, SandboxLost):
            lost = True
        assert lost, "the run completed although the agent could not restore its filesystem ids"
        code = stop_agent(live)
        log = live.stderr()
        assert code == 4, log
        assert "cannot restore the filesystem ids to 0:0: exiting" in log
        assert not [pid for pid, _ in children_of(live.proc.pid)]
    finally:
        stop_agent(live)
        shutil.rmtree(live.root, ignore_errors=True)


@pytest.mark.skipif(os.uname().machine not in _SECCOMP_MACHINES, reason="seccomp table has x86_64 and aarch64")
async def test_without_setfsuid_the_agent_reads_an_escapee_through_its_effective_ids(asan_agent: Path) -> None:
    """Where setfsuid and setfsgid fail (gVisor's runsc answers them ENOSYS) the agent switches its effective ids to
    read an escapee's environ, finds it by its run tag, kills it, and comes back to serve the next run."""
    live = start_agent(asan_agent, preexec_fn=seccomp_deny("setfsuid", "setfsgid"))
    try:
        with trio.fail_after(20):
            async with open_agent_unix(live.socket, timeout_s=10) as agent_client, trio.open_nursery() as nursery:
                # Another run is live, so the escapee is found by its tag (its environ), not its start time.
                nursery.start_soon(agent_client.run, live.spec("sleep 15"), Capture())
                await trio.testing.wait_all_tasks_blocked()
                result = await agent_client.run(live.spec(_ESCAPEE), Capture())
                assert [p.cmd for p in result.orphans_killed] == ["sleep 30"], result
                again = await agent_client.run(live.spec("echo again"), Capture())
                assert again.exit_code == 0
                nursery.cancel_scope.cancel()
        assert live.proc.poll() is None, live.stderr()
    finally:
        stop_agent(live)
        shutil.rmtree(live.root, ignore_errors=True)
