"""The termination and bash-semantics catalogue of issue 3, in a real session container (agent as PID 1), under runc
and under gVisor (runsc)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from executor.config import Settings, load_settings
from executor.gate.approvals import ApprovalRequest
from executor.session import Executor, Session, ToolResult, open_executor
from executor.testing.runtimes import require_runtime

pytestmark = pytest.mark.docker

_COUNT = (
    'n=0; for p in /proc/[0-9]*; do case "$(cat $p/cmdline 2>/dev/null | tr "\\0" " ")" in "sleep {tag}"*)'
    " n=$((n+1));; esac; done; echo alive=$n"
)


def _alive(tag: str) -> str:
    return _COUNT.replace("{tag}", tag)


async def _until_ended(session: Session, task_id: str) -> None:
    """Poll (under a deadline) until the background task has ended."""
    with trio.fail_after(30):
        while True:
            if not (await session.read_task(task_id)).data["running"]:  # type: ignore[index]
                return
            await trio.sleep(0.05)


@pytest.fixture
def container_settings(runtime: str, base_image: str, home: Path, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Settings with quick kill bounds, a private home and one shared agent build, under each runtime."""
    build = tmp_path_factory.getbasetemp() / "agent-build-shared"
    return load_settings(
        overrides={
            "home": str(home),
            "agent": {"build_dir": str(build)},
            "bash": {"grace_ms": 300, "drain_ms": 300},
            "profiles": {"default": {"runtime": runtime}},
        }
    )


@pytest.fixture
async def executor(container_settings: Settings) -> AsyncIterator[Executor]:
    """An executor on the real engine."""
    async with open_executor(container_settings) as ex:
        yield ex


@pytest.fixture
async def session(executor: Executor) -> AsyncIterator[Session]:
    """A fresh session container (removed afterwards)."""
    async with executor.open_session() as opened:
        yield opened


async def test_plain_causes_in_a_container(session: Session) -> None:
    """exit 3, kill -9 $$ and exit 137 each get their own cause; `read x` sees EOF at once."""
    three = await session.bash("exit 3")
    assert three.run is not None and (three.run.cause, three.exit_code) == ("exited", 3)
    killed = await session.bash("kill -9 $$")
    assert killed.run is not None and (killed.run.cause, killed.run.signal) == ("signaled", 9)
    plain = await session.bash("exit 137")
    assert plain.run is not None and (plain.run.cause, plain.run.exit_code) == ("exited", 137)
    with trio.fail_after(5):
        read = await session.bash("read x; echo got=[$x] rc=$?")
    assert "got=[] rc=1" in read.text


async def test_a_command_that_starts_with_a_dash_is_a_command(session: Session) -> None:
    """A command starting with '-' is the shell's command, not one of its options (``bash -c -- CMD``), short or long
    enough to travel on stdin."""
    for command in ("-x", "--version", "-" + " " * 200_000 + "x"):
        ran = await session.bash(command)
        assert ran.run is not None and ran.run.exit_code == 127, (command[:20], ran.text)
        assert b"command not found" in ran.stderr
    assert (await session.bash('echo "$#"')).stdout == b"0\n"


async def test_term_ignoring_group_dies_at_the_deadline(session: Session) -> None:
    """A TERM-ignoring child is killed with the group at the deadline (not left to run its 301 s)."""
    with trio.fail_after(60):
        result = await session.bash("trap '' TERM; (trap '' TERM; sleep 301) & sleep 301", timeout_ms=500)
    assert result.outcome == "timeout"
    assert "alive=0" in (await session.bash(_alive("301"))).text


async def test_background_job_with_redirected_stdio_is_killed(session: Session) -> None:
    """A job with redirected stdio that outlives the shell is listed and killed when the command ends."""
    result = await session.bash("sleep 302 >/dev/null 2>&1 </dev/null & echo started")
    assert result.outcome == "completed"
    assert result.run is not None and result.run.orphans_killed, result.run
    # The job is in the shell's process group, so the group's kill and the leftover sweep race for it: a sweep that
    # lists it after the group's KILL reads no command line (a zombie has none), one before its exec reads the shell's
    # copy of the command. Never another process's.
    assert all(p.cmd == "" or "sleep 302" in p.cmd for p in result.run.orphans_killed), result.run.orphans_killed
    assert "alive=0" in (await session.bash(_alive("302"))).text


async def test_process_substitution_grandchild_cannot_hang_the_call(session: Session) -> None:
    """A grandchild holding stdout through a process substitution is bounded by the drain, then killed."""
    with trio.fail_after(10):
        result = await session.bash("cat <(sleep 303; echo late) & echo now")
    assert "now" in result.text
    assert "alive=0" in (await session.bash(_alive("303"))).text


async def test_setsid_double_fork_is_found_and_killed(session: Session) -> None:
    """A setsid double-forked daemon leaves the group but is found by its run tag and killed."""
    result = await session.bash("setsid bash -c 'sleep 304 & exit 0' </dev/null >/dev/null 2>&1 & exit 0")
    assert result.run is not None and any("sleep 304" in p.cmd for p in result.run.orphans_killed)
    assert "alive=0" in (await session.bash(_alive("304"))).text


async def test_an_escapee_outside_the_group_is_found_by_its_tag_and_the_session_lives_on(session: Session) -> None:
    """A process that left the run's process group and session before the run ended is found by its run tag (the
    agent reads its environ as the session user: under runsc through its effective ids, setfsuid being missing there)
    and killed; the agent survives, and so does a background task of the session running meanwhile."""
    task = await session.start_task("sleep 307")
    task_id = str((task.data or {})["task_id"])
    result = await session.bash(
        "setsid bash -c 'echo $$ > /tmp/escaped; exec sleep 306' </dev/null >/dev/null 2>&1 &"
        " while [ ! -s /tmp/escaped ]; do sleep 0.01; done; echo out"
    )
    assert result.outcome == "completed" and result.run is not None, result.text
    assert any("sleep 306" in p.cmd for p in result.run.orphans_killed), result.run
    after = await session.bash(_alive("306"))
    assert after.outcome == "completed" and "alive=0" in after.text
    assert (await session.read_task(task_id)).data["running"] is True  # type: ignore[index]
    await session.stop_task(task_id)


async def test_a_full_task_buffer_gives_up_a_finished_tasks_output_not_a_running_ones(
    container_settings: Settings,
) -> None:
    """The agent's private tmpfs holds the background tasks' buffers: once finished tasks fill it, a new task's
    output is kept by dropping the oldest finished task's (reported dropped), not lost whole for every later task."""
    settings = container_settings.model_copy(
        update={
            "agent": container_settings.agent.model_copy(
                update={"private_tmpfs_bytes": 1024 * 1024, "detached_buffer_bytes": 400 * 1024}
            )
        }
    )

    async def started(session: Session, command: str) -> str:
        task_id = str(((await session.start_task(command)).data or {})["task_id"])
        await _until_ended(session, task_id)
        return task_id

    async with open_executor(settings) as ex, ex.open_session() as session:
        first = await started(session, "head -c 400000 /dev/zero; head -c 400000 /dev/zero >&2")
        second = await started(session, "head -c 400000 /dev/zero | tr '\\0' b")
        page = await session.read_task_bytes(second, max_bytes=500_000)
        assert (page.offset, page.end, len(page.data)) == (0, 400_000, 400_000)
        assert page.data == b"b" * 400_000
        dropped = await session.read_task_bytes(first, max_bytes=500_000)
        assert dropped.end == 400_000 and dropped.data == b"" and dropped.offset == 400_000


async def test_stopping_a_task_stops_what_it_left_running(session: Session) -> None:
    """A task keeps what it started while it runs and after its shell ends, but stopping it stops all of it: a
    finished task's leftover in its group, and a running task's setsid child (found by its tag)."""
    ended = str(((await session.start_task("sleep 331 & echo started")).data or {})["task_id"])
    with trio.fail_after(30):
        while True:
            if not ((await session.read_task(ended)).data or {})["running"]:
                break
            await trio.sleep(0.05)
    assert "alive=1" in (await session.bash(_alive("331"))).text  # kept while nobody stops the task
    stopped = await session.stop_task(ended)
    assert stopped.result is not None and any("sleep 331" in p.cmd for p in stopped.result.orphans_killed)
    assert "alive=0" in (await session.bash(_alive("331"))).text

    running = str(((await session.start_task("setsid sleep 332 & sleep 1000")).data or {})["task_id"])
    with trio.fail_after(30):
        while True:
            if "alive=1" in (await session.bash(_alive("332"))).text:
                break
            await trio.sleep(0.05)
    await session.stop_task(running)
    assert "alive=0" in (await session.bash(_alive("332"))).text
    assert "alive=0" in (await session.bash(_alive("1000"))).text


def _skip_mass_daemons_under_runsc(runtime: str) -> None:
    if runtime == "runsc":
        # Seen here with the agent before and after the report cap was lifted alike: a command that starts 100 or
        # more setsid daemons under gVisor loses the sandbox (the run ends as sandbox_lost), 20 do not.
        pytest.skip("a hundred setsid daemons lose the gVisor sandbox itself (agent-independent)")


async def test_every_leftover_is_killed_however_many_and_the_result_counts_them_all(
    session: Session, runtime: str
) -> None:
    """A command that leaves 450 setsid daemons (far more than the 64 a result lists) has every one killed, and the
    result and its view give the true count while listing 64."""
    _skip_mass_daemons_under_runsc(runtime)
    started = await session.bash(
        "for i in $(seq 450); do setsid sleep 1234 </dev/null >/dev/null 2>&1 & done;"
        f" until {_alive('1234')} | grep -q alive=450; do sleep 0.05; done"  # all out of the group: escapees
    )
    assert started.run is not None, started.text
    assert "alive=0" in (await session.bash(_alive("1234"))).text
    run = started.run
    assert (run.orphans_left_total, run.orphans_killed_total) == (450, 450), run
    assert (len(run.orphans_left), len(run.orphans_killed)) == (64, 64)
    assert "[450 process(es) left running by the command:" in started.text
    assert "386 more not listed; 450 of the 450 killed" in started.text


async def test_stopping_a_task_kills_all_it_left_however_many(session: Session, runtime: str) -> None:
    """Stopping an ended task that left 300 setsid daemons kills all of them, not only the first 64 it listed."""
    _skip_mass_daemons_under_runsc(runtime)
    task = await session.start_task(
        "for i in $(seq 300); do setsid sleep 1235 </dev/null >/dev/null 2>&1 & done;"
        f" until {_alive('1235')} | grep -q alive=300; do sleep 0.05; done"
    )
    task_id = str((task.data or {})["task_id"])
    await _until_ended(session, task_id)
    assert "alive=300" in (await session.bash(_alive("1235"))).text  # kept while nobody stops the task
    stopped = await session.stop_task(task_id)
    assert stopped.result is not None and stopped.result.orphans_killed_total == 300, stopped.result
    assert "alive=0" in (await session.bash(_alive("1235"))).text


async def test_a_command_has_the_session_alone_again_once_a_stopped_tasks_leftovers_are_gone(
    session: Session,
) -> None:
    """A task that kept a daemon keeps later commands from owning untagged processes only while that daemon lives: once
    stopping the task killed it, a later command's `env -i` daemon is its leftover again, killed and listed."""
    task = await session.start_task("setsid sleep 1236 </dev/null >/dev/null 2>&1 & echo bg")
    task_id = str((task.data or {})["task_id"])
    await _until_ended(session, task_id)
    stopped = await session.stop_task(task_id)
    assert stopped.result is not None and any("sleep 1236" in p.cmd for p in stopped.result.orphans_killed)
    later = await session.bash("setsid env -i sleep 1237 </dev/null >/dev/null 2>&1 & echo ok")
    assert later.run is not None and any("sleep 1237" in p.cmd for p in later.run.orphans_killed), later.run
    assert "alive=0" in (await session.bash(_alive("1237"))).text


async def test_a_kept_daemon_still_running_keeps_later_commands_from_owning_untagged_processes(
    session: Session,
) -> None:
    """While a task's kept daemon lives (it may start workers at any time), a later command does not take an untagged
    process started during it: the daemon's worker lives on."""
    daemon = "while :; do if [ -e /tmp/spawn ]; then rm /tmp/spawn; env -i sleep 1238 & fi; sleep 0.02; done\n"
    assert (await session.bash(f"printf '%s' '{daemon}' > /tmp/daemon.sh")).outcome == "completed"
    task = await session.start_task("setsid bash /tmp/daemon.sh </dev/null >/dev/null 2>&1 & echo bg")
    task_id = str((task.data or {})["task_id"])
    await _until_ended(session, task_id)
    later = await session.bash(f"touch /tmp/spawn; until {_alive('1238')} | grep -q alive=1; do sleep 0.02; done")
    assert later.run is not None and not any("sleep 1238" in p.cmd for p in later.run.orphans_killed), later.run
    assert "alive=1" in (await session.bash(_alive("1238"))).text
    await session.stop_task(task_id)


async def test_an_untagged_daemon_is_killed_when_its_command_ends(session: Session) -> None:
    """Daemons started without the run tag (`env -i`, `env -u EXECUTOR_RUN_TAG`, setsid'd out of the group) by a
    command that had the session to itself are its leftovers all the same: killed when it ends, and listed."""
    started = await session.bash(
        "env -i setsid sleep 305 </dev/null >/dev/null 2>&1 & "
        "env -u EXECUTOR_RUN_TAG setsid sleep 306 </dev/null >/dev/null 2>&1 & sleep 0.3"
    )
    assert started.run is not None
    killed = " ".join(proc.cmd for proc in started.run.orphans_killed)
    assert "sleep 305" in killed and "sleep 306" in killed, started.run
    assert "alive=0" in (await session.bash(_alive("305"))).text
    assert "alive=0" in (await session.bash(_alive("306"))).text


async def test_an_untagged_daemon_of_a_running_task_outlives_other_commands(session: Session) -> None:
    """While a background task runs no command has the session to itself: the task's untagged daemon is nobody's
    leftover when another command ends (the session's sweep takes it when the session closes)."""
    task = await session.start_task("env -i setsid sleep 307 </dev/null >/dev/null 2>&1 & sleep 1000")
    with trio.fail_after(30):
        while True:
            if "alive=1" in (await session.bash(_alive("307"))).text:
                break
            await trio.sleep(0.05)
    other = await session.bash("true")
    assert other.run is not None and not any("sleep 307" in p.cmd for p in other.run.orphans_killed)
    assert "alive=1" in (await session.bash(_alive("307"))).text
    await session.stop_task(str((task.data or {})["task_id"]))
    swept = await session._client.sweep()
    assert any("sleep 307" in proc.cmd for proc in swept)


async def test_untagged_daemons_of_overlapping_commands_are_killed_when_the_session_goes_quiet(
    session: Session,
) -> None:
    """Two commands overlap, so neither has the session to itself and an `env -i` daemon of either cannot be told
    apart while the other runs: it is killed, and listed, when the last of them ends (not left to the session's end)."""
    async with trio.open_nursery() as nursery:
        results: dict[str, ToolResult] = {}

        async def run(name: str, command: str) -> None:
            results[name] = await session.bash(command)

        nursery.start_soon(
            run, "long", "touch /tmp/long-started; while [ ! -e /tmp/daemon-started ]; do sleep 0.02; done; sleep 0.3"
        )
        nursery.start_soon(
            run,
            "daemon",
            "while [ ! -e /tmp/long-started ]; do sleep 0.02; done;"
            " env -i setsid sleep 309 </dev/null >/dev/null 2>&1 &"
            f" until {_alive('309')} | grep -q alive=1; do sleep 0.02; done; touch /tmp/daemon-started",
        )
    daemon, long = results["daemon"].run, results["long"].run
    assert daemon is not None and long is not None
    assert not any("sleep 309" in p.cmd for p in daemon.orphans_killed), daemon  # the other command was live
    assert any("sleep 309" in p.cmd for p in long.orphans_killed), long  # the last to end made the session quiet
    assert "alive=0" in (await session.bash(_alive("309"))).text


async def test_a_background_tasks_untagged_daemon_outlives_the_quiet_after_it(session: Session) -> None:
    """A background task keeps its leftovers (a server it daemonized lives on): its untagged daemon is not taken when
    the session goes quiet after it overlapped a command, nor by a later command of its own."""
    task = await session.start_task("env -i setsid sleep 310 </dev/null >/dev/null 2>&1 & sleep 0.5")
    task_id = str((task.data or {})["task_id"])
    assert (await session.bash("sleep 0.1")).outcome == "completed"  # overlaps the task
    await _until_ended(session, task_id)
    later = await session.bash("sleep 0.05")
    assert later.run is not None and not any("sleep 310" in p.cmd for p in later.run.orphans_killed)
    assert "alive=1" in (await session.bash(_alive("310"))).text
    swept = await session._client.sweep()
    assert any("sleep 310" in proc.cmd for proc in swept)


async def test_stopping_an_ended_task_takes_only_what_it_left(session: Session) -> None:
    """A task that had the session alone owns what was started since its shell, but only until the next command
    starts: stopping it once it ended took every process started after it (another task, a running command)."""
    first = await session.start_task("echo a")
    first_id = str((first.data or {})["task_id"])
    await _until_ended(session, first_id)
    second = await session.start_task("sleep 60; echo b-finished")
    second_id = str((second.data or {})["task_id"])
    outcome: dict[str, ToolResult] = {}

    async def foreground() -> None:
        outcome["fg"] = await session.bash("touch /tmp/fg-started; sleep 1; echo fg-finished")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(foreground)
        with trio.fail_after(30):
            while True:
                if "yes" in (await session.bash("test -e /tmp/fg-started && echo yes")).text:
                    break
                await trio.sleep(0.05)
        stopped = await session.stop_task(first_id)
    assert stopped.result is not None and not stopped.result.orphans_killed, stopped.result
    assert outcome["fg"].outcome == "completed" and "fg-finished" in outcome["fg"].text, outcome["fg"].text
    running = {task.task_id for task in await session.list_tasks() if task.running}
    assert second_id in running
    await session.stop_task(second_id)


async def test_many_short_children_leave_no_zombies(session: Session) -> None:
    """200 short-lived background children leave no zombie behind (the agent is init)."""
    await session.bash("for i in $(seq 200); do (sleep 0.01 &); done; sleep 0.5")
    zombies = await session.bash("grep -l '^State:.*Z' /proc/[0-9]*/status 2>/dev/null | wc -l")
    assert zombies.text.splitlines()[2].strip() == "0"


async def test_output_split_mid_utf8_is_stored_byte_exact(session: Session) -> None:
    """A code point split across writes is stored exactly."""
    result = await session.bash("echo 8J8= | base64 -d; sleep 0.05; echo mIAgZG9uZQo= | base64 -d")
    assert result.artifact_id is not None
    page = session.artifacts.read_output(result.artifact_id, stream="stdout")
    assert page.data == "😀 done\n".encode()


async def test_host_secrets_never_reach_the_command(session: Session) -> None:
    """Secrets in the executor's own environment are absent from a command's environment."""
    os.environ["EXECUTOR_TEST_API_KEY"] = "sk-should-never-leak"
    try:
        result = await session.bash("env")
    finally:
        del os.environ["EXECUTOR_TEST_API_KEY"]
    assert "sk-should-never-leak" not in result.text
    assert result.artifact_id is not None
    env_text = session.artifacts.read_output(result.artifact_id, stream="stdout", line_count=500).data
    assert b"sk-should-never-leak" not in env_text
    assert b"NO_COLOR=1" in env_text and b"PAGER=cat" in env_text


async def test_task_read_by_offsets_across_a_host_reconnect(executor: Executor) -> None:
    """A background task keeps writing while no host is connected; a new connection reads on by offsets."""
    async with executor.open_session(keep=True) as first:
        started = await first.start_task("for i in $(seq 1 6); do echo line $i; sleep 0.2; done")
        task_id = str((started.data or {})["task_id"])
        chunk = await first.read_task(task_id, offset=0)
        offset = int(str((chunk.data or {})["next_offset"]))
        sid = first.id
    try:
        await trio.sleep(1.5)
        async with executor.attach_session(sid) as again:
            with trio.fail_after(10):
                while True:
                    later = await again.read_task(task_id, offset=offset)
                    data = later.data or {}
                    if not data["running"] and data["next_offset"] == data["end"]:
                        break
                    await trio.sleep(0.2)
            rest = await again.read_task(task_id, offset=offset)
            assert "line 6" in rest.text
            assert int(str((rest.data or {})["offset"])) == offset
            # The first mirror ended with the first connection; the ended task now has one complete artifact.
            (info,) = [t for t in await again.list_tasks() if t.task_id == task_id]
            assert info.artifact_id is not None and info.artifact_id != started.artifact_id
            whole = again.artifacts.read_output(info.artifact_id, stream="stdout")
            assert whole.data == b"".join(b"line %d\n" % i for i in range(1, 7))
            assert again.artifacts.record(info.artifact_id).status == "ok"
            assert again.artifacts.record(str(started.artifact_id)).status == "detached"
    finally:
        await executor.stop_session(sid)


async def test_exec_transport_runs_commands_without_host_mounts(
    base_image: str, home: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The remote-engine path (exec bridge, agent in a derived layer) runs commands too."""
    build = tmp_path_factory.getbasetemp() / "agent-build-shared"
    settings = load_settings(overrides={"home": str(home), "agent": {"build_dir": str(build), "transport": "exec"}})
    async with open_executor(settings) as ex, ex.open_session() as session:
        assert session.info.transport == "exec"
        result = await session.bash("echo over-the-bridge; cat /proc/1/cmdline | tr '\\0' ' '")
        assert "over-the-bridge" in result.text and "/.executor/agent init" in result.text


@pytest.mark.parametrize(("runtime_name", "transport"), [("runc", "socket"), ("runc", "exec"), ("runsc", "exec")])
async def test_a_command_cannot_reach_its_supervisor(
    runtime_name: str,
    transport: str,
    engine_runtimes: frozenset[str],
    base_image: str,
    home: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The session user can neither connect to the agent's socket nor read PID 1's environment, under either runtime."""
    require_runtime(runtime_name, engine_runtimes)
    build = tmp_path_factory.getbasetemp() / "agent-build-shared"
    settings = load_settings(
        overrides={
            "home": str(home),
            "agent": {"build_dir": str(build), "transport": transport},
            "profiles": {"default": {"runtime": runtime_name}},
        }
    )
    probe = (
        "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('/.executor/run/agent.sock'); "
        "print('CONNECTED')\" 2>&1 | tail -n 1; "
        # Linux refuses the read; gVisor allows it, and the agent has wiped its environment block.
        "(cat /proc/1/environ 2>/dev/null | tr -d '\\0' | grep -q . && echo environ-read) || echo environ-denied; "
        "kill -0 1 2>/dev/null || echo kill-denied"
    )

    async def approve(request: ApprovalRequest) -> bool:
        return True  # inline python that opens sockets is an unknown write the gate asks about (issue 11)

    async with open_executor(settings) as ex, ex.open_session() as session:
        result = await session.bash(probe, approval_handler=approve)
    assert "CONNECTED" not in result.text
    assert "PermissionError" in result.text
    assert "environ-denied" in result.text and "kill-denied" in result.text


async def test_coreutils_stat_and_ls_work(session: Session) -> None:
    """`ls -l PATH` and `stat` work under both runtimes (runsc needs the statx shim: it refuses AT_NO_AUTOMOUNT)."""
    result = await session.bash("echo hi > f.txt; ls -l f.txt; stat -c 'size=%s' f.txt")
    assert result.outcome == "completed", result.text
    assert "size=3" in result.text and "f.txt" in result.text
