"""The service end to end: a real ``executor serve`` subprocess on the real engine, driven through executor.client."""

from __future__ import annotations

import asyncio
import io
import json
import re
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from executor.client import AsyncClient, Client
from executor.config import load_settings
from executor.errors import (
    ApprovalNotFound,
    ArtifactNotFound,
    CommandRejected,
    ConfigError,
    ExecutorError,
    ImageNotFound,
    PathRejected,
    SessionNameTaken,
    SessionNotFound,
    TaskNotFound,
    Unauthorized,
)
from executor.service.wire import ChunkEvent
from executor.session import ToolResult, open_executor
from executor.testing.cli import cli
from tests.service.conftest import TOKEN_A, TOKEN_B, ServiceProcess, new_name

pytestmark = [pytest.mark.docker, pytest.mark.timeout(240)]

ASKED = "touch asked-{tag} && crontab -l"
"""A command the default policy asks about (crontab-and-services); it leaves a marker file if it runs."""


def test_a_command_gives_the_same_result_in_process_and_over_the_client(
    shared_service: ServiceProcess, home: Path
) -> None:
    """The same commands give equal facts in-process (Session.bash) and over executor.client: raw stream bytes (not
    UTF-8 ones included), whole flags, outcome, exit code; a call the gate stops carries empty streams and no flag."""
    ran = "echo out | iconv -t UTF-16; echo err >&2; exit 3"  # not UTF-8: a byte-order mark, then UTF-16
    asked = ASKED.format(tag="same")

    async def in_process() -> tuple[ToolResult, ToolResult]:
        async with open_executor(load_settings(overrides={"home": str(home)})) as ex, ex.open_session() as session:
            return await session.bash(ran), await session.bash(asked, approval_handler=None)

    local = trio.run(in_process)
    with shared_service.client() as client:
        session = client.create_session().id
        remote = (client.exec(session, ran), client.exec(session, asked, approvals="none"))

    def facts(result: ToolResult) -> tuple[object, ...]:
        return (
            type(result),
            result.tool,
            result.outcome,
            result.exit_code,
            result.stdout,
            result.stderr,
            result.stdout_whole,
            result.stderr_whole,
            result.stdout_dropped,
        )

    assert [facts(r) for r in local] == [facts(r) for r in remote]
    assert facts(local[0])[1:] == ("bash", "failed", 3, "out\n".encode("utf-16"), b"err\n", True, True, 0)
    assert facts(local[1])[1:] == ("bash", "blocked", None, b"", b"", None, None, 0)


def test_exec_streams_chunks_before_the_command_ends(shared_service: ServiceProcess) -> None:
    """The first line reaches the client while the command still waits; the result carries both raw streams."""
    with shared_service.client() as client:
        session = client.create_session().id
        command = "echo first; echo warn >&2; while [ ! -e go ]; do sleep 0.05; done; echo second; exit 3"
        seen: list[Any] = []
        with client.stream_exec(session, command) as events:
            for event in events:
                seen.append(event)
                if isinstance(event, ChunkEvent) and event.data == b"first\n":
                    # Only a chunk delivered before the end lets the command end at all.
                    assert client.exec(session, "touch go").outcome == "completed"
        result = seen[-1].result
        assert result.outcome == "failed" and result.exit_code == 3
        assert result.stdout == b"first\nsecond\n" and result.stderr == b"warn\n"
        assert result.stdout_whole and result.stderr_whole
        assert result.run is not None and result.run.cause == "exited"
        streamed = b"".join(e.data for e in seen if isinstance(e, ChunkEvent) and e.stream == "stdout")
        assert streamed == b"first\nsecond\n"
        page = client.read_output(session, result.artifact_id, stream="stdout")
        assert "second" in page.text
        found = client.search_output(session, result.artifact_id, pattern="sec.nd")
        assert found.data is not None and found.data["matches"]


def test_exec_frames_carry_raw_bytes_then_the_json_result(shared_service: ServiceProcess) -> None:
    """Asked for with Accept, the exec stream is binary frames: raw stdout (1) and stderr (2) bytes exactly, then
    one JSON result (3) without the raw streams when the request says result_streams false; ndjson stays the
    default."""
    import struct

    from executor.cli.thin.transport import Target, open_connection
    from executor.service.wire import EXEC_FRAMES

    with shared_service.client() as client:
        session = client.create_session().id
    conn = open_connection(Target("test", unix_path=str(shared_service.socket)), timeout=60)
    try:
        command = "printf a; head -c 1 /dev/zero; printf b; printf err >&2; exit 4"
        body = {"command": command, "result_streams": False, "approvals": "none"}
        response = conn.send("POST", f"/v1/sessions/{session}/exec", body, accept=EXEC_FRAMES)
        assert response.getheader("content-type") == EXEC_FRAMES
        frames: list[tuple[int, bytes]] = []
        while not response.done:
            header = response.read(8)
            if not header:
                break
            kind, size = struct.unpack(">B3xI", header)
            assert header[1:4] == b"\0\0\0"
            frames.append((kind, response.read(size)))
        assert b"".join(data for kind, data in frames if kind == 1) == b"a\0b"
        assert b"".join(data for kind, data in frames if kind == 2) == b"err"
        (last_kind, last), *_ = frames[::-1]
        result = json.loads(last)["result"]
        assert (last_kind, result["outcome"], result["exit_code"]) == (3, "failed", 4)
        assert (result["stdout"], result["stdout_whole"]) == ("", True)
        plain = conn.send("POST", f"/v1/sessions/{session}/exec", {"command": "echo hi"})
        assert (plain.getheader("content-type") or "").startswith("application/x-ndjson")
        lines = [json.loads(line) for line in plain.read().splitlines()]
        assert lines[0] == {"kind": "chunk", "stream": "stdout", "data": "aGkK"} and lines[-1]["kind"] == "result"
    finally:
        conn.close()


def test_bad_input_is_the_executors_own_exception(shared_service: ServiceProcess) -> None:
    """Unknown sessions, artifacts, tasks and approvals, and refused commands raise the executor's exceptions."""
    with shared_service.client() as client:
        with pytest.raises(SessionNotFound, match="no session 's-000000000000'"):
            client.exec("s-000000000000", "true")
        session = client.create_session().id
        with pytest.raises(CommandRejected):
            client.exec(session, "true", timeout_ms=10**12)
        with pytest.raises(ArtifactNotFound):
            client.read_output(session, f"{session}.a999")
        with pytest.raises(TaskNotFound):
            client.read_task(session, "t99")
        with pytest.raises(ApprovalNotFound):
            client.answer("ap-0000000000000000", approve=True)


def test_what_does_not_exist_is_a_400_or_404_naming_it(shared_service: ServiceProcess) -> None:
    """A cwd, image or profile that does not exist, or an env value no process can receive, is refused (400) naming
    it, before any stream begins; an unknown session is a 404; the session stays usable."""
    with shared_service.client() as client:
        session = client.create_session().id
        with pytest.raises(CommandRejected, match=r"^cwd '/nonexistent' cannot be entered in the session"):
            client.exec(session, "true", cwd="/nonexistent")
        with pytest.raises(CommandRejected, match=r"^cwd '/workspace/missing' cannot be entered"):
            client.start_task(session, "sleep 1", cwd="missing")
        with pytest.raises(ImageNotFound, match=r"no image named 'no-such-image'.*known image folders: .*base"):
            client.create_session(image="no-such-image")
        with pytest.raises(ConfigError, match=r"no profile named 'nope'; known profiles: "):
            client.create_session(profile="nope")
        with pytest.raises(SessionNotFound, match=r"no session 's-000000000000'; "):
            client.session("s-000000000000")
        with pytest.raises(CommandRejected, match=r"environment value of 'A' contains a NUL"):
            client.exec(session, "true", env={"A": "x\0y"})
        with pytest.raises(CommandRejected, match=r"environment value of 'A' contains a NUL"):
            client.start_task(session, "true", env={"A": "x\0y"})
        # Past what the agent's frame carries: refused, and the session stays (it was lost with it).
        with pytest.raises(CommandRejected, match=r"bash\.max_env_bytes"):
            client.exec(session, "true", env={f"V{i}": "x" * 100_000 for i in range(30)})
        with pytest.raises(CommandRejected, match=r"cwd is longer than a path"):
            client.start_task(session, "true", cwd="/" + "d" * 3_000_000)
        with pytest.raises(PathRejected, match=r"contains a NUL"):
            client.download_tar(session, "a\0b")
        for escaping in ("../../..", "/workspace/../etc"):
            with pytest.raises(CommandRejected, match=r"leads out of the workspace"):
                client.exec(session, "pwd", cwd=escaping)
            with pytest.raises(CommandRejected, match=r"leads out of the workspace"):
                client.start_task(session, "pwd", cwd=escaping)
        assert client.exec(session, "pwd", cwd="/tmp").stdout == b"/tmp\n"
    with httpx2.Client(transport=httpx2.HTTPTransport(uds=str(shared_service.socket))) as raw:
        answer = raw.post(f"http://x/v1/sessions/{session}/exec", json={"command": "true", "cwd": "/nonexistent"})
    assert answer.status_code == 400 and answer.json()["error"]["type"] == "CommandRejected"
    with httpx2.Client(transport=httpx2.HTTPTransport(uds=str(shared_service.socket))) as raw:
        for image in ("../containers/json", "a/../../b:1", "Bad Name"):
            answer = raw.post("http://x/v1/sessions", json={"image": image})
            assert answer.status_code == 400, answer.text
            assert answer.json()["error"]["message"].startswith(f"{image!r} is not an image reference")


def test_upload_build_download(shared_service: ServiceProcess, tmp_path: Path) -> None:
    """A folder goes in as a tar, a build runs on it, and its output folder comes back byte for byte."""
    src = tmp_path / "src"
    (src / "lib").mkdir(parents=True)
    (src / "build.sh").write_text("mkdir -p out && for f in lib/*.txt; do tr a-z A-Z < $f > out/$(basename $f); done\n")
    (src / "lib" / "one.txt").write_text("hello\n")
    (src / "lib" / "two.txt").write_text("world\n")
    with shared_service.client() as client:
        session = client.create_session().id
        unpacked = client.upload(session, src, "proj")
        assert unpacked.outcome == "completed", unpacked.text
        built = client.exec(session, "bash build.sh && ls out", cwd="proj")
        assert built.outcome == "completed" and built.stdout == b"one.txt\ntwo.txt\n"
        dest = tmp_path / "back"
        client.download(session, "proj/out", dest)
        assert (dest / "out" / "one.txt").read_text() == "HELLO\n"
        assert (dest / "out" / "two.txt").read_text() == "WORLD\n"
        with tarfile.open(fileobj=io.BytesIO(client.download_tar(session, "proj/lib/one.txt"))) as tar:
            assert tar.getnames() == ["one.txt"]


def test_write_creates_parents_and_sets_a_mode(shared_service: ServiceProcess) -> None:
    """A write with parents=True creates the folders; mode is applied after the staged write."""
    with shared_service.client() as client:
        session = client.create_session().id
        written = client.write(session, "deep/er/run.sh", "echo ran\n", parents=True, mode="755")
        assert written.outcome == "completed", written.text
        assert written.data is not None and written.data["mode_set"] == "755"
        ran = client.exec(session, "stat -c %a deep/er/run.sh && ./deep/er/run.sh")
        assert ran.stdout == b"755\nran\n"
        # A mode the policy refuses (setuid): the file is still written, and the result is the write's, saying so.
        refused = client.write(session, "suid.sh", "echo s\n", mode="4755")
        assert (refused.tool, refused.outcome) == (written.tool, "denied"), refused.text
        assert refused.action_id is not None and refused.data is not None and refused.data["mode_set"] is None
        assert refused.data["mode_action_id"] not in (None, refused.action_id)
        assert "the file was written, but its mode was not set to 4755: the chmod was denied" in refused.text
        assert client.exec(session, "stat -c %a suid.sh").stdout == b"644\n"


def test_approval_answered_out_of_band(shared_service: ServiceProcess) -> None:
    """An ask waits; a second client lists it and approves it once; a denied one leaves nothing behind. The id
    answered is the one the session's journal records the ask and its answer under."""
    with shared_service.client() as client, shared_service.client() as approver:
        session = client.create_session().id
        for approve in (True, False):
            tag = "yes" if approve else "no"
            outcome: list[Any] = []
            answered = ""
            with client.stream_exec(session, ASKED.format(tag=tag)) as events:
                for event in events:
                    if event.kind == "approval":
                        pending = [a for a in approver.approvals() if a.approval_id == event.approval_id]
                        assert pending and "crontab" in pending[0].summary
                        approver.answer(event.approval_id, approve=approve)
                        answered = event.approval_id
                        with pytest.raises(ApprovalNotFound):
                            approver.answer(event.approval_id, approve=approve)
                    outcome.append(event)
            journal = shared_service.home / "sessions" / session / "journal.ndjson"
            records = [json.loads(line) for line in journal.read_text().splitlines()]
            asks = {(r["type"], r.get("outcome")) for r in records if r.get("approval_id") == answered}
            assert asks == {("approval_requested", None), ("approval_resolved", "approved" if approve else "denied")}
            # Who answered is journaled: here a caller of the unix socket (over TCP, the token's owner id).
            (resolved,) = [r for r in records if r["type"] == "approval_resolved" and r["approval_id"] == answered]
            assert resolved["answered_by"] == "socket", resolved
            result = outcome[-1].result
            marker = client.exec(session, f"test -e asked-{tag} && echo present || echo absent").stdout
            if approve:
                assert result.outcome == "failed"  # it ran: crontab is not in the image
                assert marker == b"present\n"
            else:
                assert result.outcome == "denied"
                assert marker == b"absent\n"


def test_approvals_none_comes_back_blocked(shared_service: ServiceProcess) -> None:
    """With approvals='none' an ask is blocked at once and nothing runs."""
    with shared_service.client() as client:
        session = client.create_session().id
        result = client.exec(session, ASKED.format(tag="blocked"), approvals="none")
        assert result.outcome == "blocked"
        assert client.exec(session, "ls asked-blocked 2>/dev/null | wc -l").stdout == b"0\n"


def test_two_tokens_see_only_their_own(shared_service: ServiceProcess) -> None:
    """Over TCP each token owns its sessions and asks; another token gets "not found", no token gets 401."""
    with shared_service.tcp_client(TOKEN_A) as a, shared_service.tcp_client(TOKEN_B) as b:
        mine = a.create_session().id
        ran = a.exec(mine, "echo a")
        assert ran.stdout == b"a\n" and ran.artifact_id is not None
        with pytest.raises(SessionNotFound):
            b.read_output(mine, ran.artifact_id)
        assert mine in {s.id for s in a.list_sessions()}
        assert mine not in {s.id for s in b.list_sessions()}
        for call in (
            lambda: b.exec(mine, "echo b"),
            lambda: b.session(mine),
            lambda: b.stop_session(mine),
            lambda: b.list_tasks(mine),
        ):
            with pytest.raises(SessionNotFound):
                call()
        done = threading.Event()

        def ask() -> None:
            try:
                a.exec(mine, ASKED.format(tag="tok"))
            finally:
                done.set()

        thread = threading.Thread(target=ask)
        thread.start()
        try:
            deadline = time.monotonic() + 30
            while not a.approvals() and time.monotonic() < deadline:
                done.wait(0.05)
            asks = a.approvals()
            assert asks and not b.approvals()
            with pytest.raises(ApprovalNotFound):
                b.answer(asks[0].approval_id, approve=True)
            a.answer(asks[0].approval_id, approve=False)
        finally:
            thread.join(timeout=60)
        with Client(shared_service.url) as nobody, pytest.raises(Unauthorized, match=r"^a valid bearer token is"):
            nobody.list_sessions()
        with Client(shared_service.url, token="x" * 20) as wrong, pytest.raises(PermissionError, match="bearer"):
            wrong.health()


def test_a_tokens_named_session_is_stopped_by_that_token(shared_service: ServiceProcess) -> None:
    """DELETE by the owning token removes its named session, held by the service or not (it answered 204 and kept
    the container, since the executor was asked as nobody); another token gets "not found" and changes nothing."""
    with shared_service.tcp_client(TOKEN_A) as a, shared_service.tcp_client(TOKEN_B) as b:
        for name in ("tok-stop-held", "tok-stop-cold"):
            made = a.create_session(name=name)
            if name.endswith("held"):
                assert a.exec(made.id, "true").outcome == "completed"
            with pytest.raises(SessionNotFound):
                b.stop_session(name)
            assert a.session(name).id == made.id
            a.stop_session(name)
            with pytest.raises(SessionNotFound):
                a.session(name)
            assert made.id not in {s.id for s in a.list_sessions()}


def test_a_name_in_use_is_a_conflict_that_names_no_one_elses_session(
    shared_service: ServiceProcess, tmp_path: Path
) -> None:
    """A name another token's live session holds is a 409 that names neither that session nor its owner; the
    owner's own second create is a 409 naming its session; a malformed name is a 422."""
    name = new_name()
    with shared_service.tcp_client(TOKEN_A) as a, shared_service.tcp_client(TOKEN_B) as b:
        made = a.create_session(name=name)
        try:
            with pytest.raises(SessionNameTaken) as theirs:
                b.create_session(name=name)
            assert str(theirs.value) == f"session name {name!r} is in use; pick another name"
            with pytest.raises(SessionNameTaken, match=made.id):
                a.create_session(name=name)
            # The thin CLI as token B with --create: told the name is in use (exit 2), not "no session".
            assert shared_service.url is not None
            as_b = {"EXECUTOR_URL": shared_service.url, "EXECUTOR_TOKEN": TOKEN_B}
            ran = cli(tmp_path, "exec", "--session", name, "--create", "--", "true", env=as_b)
            assert (ran.code, ran.stderr) == (2, f"error: session name {name!r} is in use; pick another name\n")
        finally:
            a.stop_session(name)
    with httpx2.Client(transport=httpx2.HTTPTransport(uds=str(shared_service.socket))) as raw:
        other = new_name()
        assert raw.post("http://x/v1/sessions", json={"name": other}).status_code == 201
        try:
            again = raw.post("http://x/v1/sessions", json={"name": other})
            assert (again.status_code, again.json()["error"]["type"]) == (409, "SessionNameTaken")
            malformed = raw.post("http://x/v1/sessions", json={"name": "-bad name"})
            assert malformed.status_code == 422 and "name" in malformed.json()["error"]["message"]
        finally:
            raw.delete(f"http://x/v1/sessions/{other}")


def test_clients_that_abort_their_request_bodies_leave_the_service_running(shared_service: ServiceProcess) -> None:
    """A client that sends part of a body and hangs up (a declared length, or a chunked upload) gets no answer and
    the service goes on (the app's 500 raced the server's own answer on the same socket and ended the service)."""
    import socket

    with shared_service.client() as client:
        session = client.create_session().id
        heads = [
            f'POST /v1/sessions/{session}/exec HTTP/1.1\r\nhost: x\r\ncontent-length: 100000\r\n\r\n{{"command":',
            f"PUT /v1/sessions/{session}/files?path=x HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
            "400\r\n" + "\0" * 1024 + "\r\n",
        ]
        for k in range(40):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
                raw.connect(str(shared_service.socket))
                raw.sendall(heads[k % 2].encode())
                time.sleep(0.02)  # let the service start reading the body before the client goes
        assert client.health()
        assert client.exec(session, "echo alive").stdout == b"alive\n"


def test_background_task_followed(shared_service: ServiceProcess) -> None:
    """A task's pages arrive as it prints, the follow ends with the task, and stop/list work."""
    with shared_service.client() as client:
        session = client.create_session().id
        started = client.start_task(session, "for i in 1 2 3; do echo line$i; sleep 0.2; done")
        assert started.data is not None
        task_id = str(started.data["task_id"])
        with client.follow_task(session, task_id) as pages:
            texts = [page.text for page in pages]
        assert "line3" in "".join(texts) and "finished" in texts[-1]
        long = client.start_task(session, "sleep 300")
        long_id = str((long.data or {})["task_id"])
        assert long_id in {t.task_id for t in client.list_tasks(session) if t.running}
        stopped = client.stop_task(session, long_id)
        assert not stopped.running and stopped.run is not None


def test_task_pages_followed_by_next_offset_carry_every_byte_once(shared_service: ServiceProcess) -> None:
    """A task's output several times the display budget, read page by page from next_offset (and followed), comes
    whole and in order with no cut notice; each page's raw bytes are the ones its text shows, its header's range."""
    output = "".join(f"{n}\n" for n in range(1, 12001)).encode()
    with shared_service.client() as client:
        session = client.create_session().id
        started = client.start_task(session, "seq 1 12000")
        task_id = str((started.data or {})["task_id"])
        deadline = time.monotonic() + 60
        got, offset = b"", 0
        while True:
            assert time.monotonic() < deadline, offset
            page = client.read_task(session, task_id, offset=offset)
            data = page.data or {}
            header, _, body = page.text.partition("\n")
            assert "characters cut here" not in page.text, page.text[-300:]
            assert f"bytes {offset}-{data['next_offset']} of {data['end']};" in header, header
            assert page.stdout == body.encode() and offset + len(page.stdout) == data["next_offset"], header
            got += page.stdout
            if not data["running"] and data["next_offset"] == data["end"]:
                break
            if data["next_offset"] == offset:
                time.sleep(0.05)  # nothing new yet: poll
            offset = int(str(data["next_offset"]))
        assert got == output
        with client.follow_task(session, task_id) as pages:
            followed = list(pages)
        assert b"".join(page.stdout for page in followed) == output and len(followed) >= 5
        for page in followed:
            assert "characters cut here" not in page.text and page.text.endswith(page.stdout.decode()), page.text[:200]


def test_health_metrics_and_sessions(shared_service: ServiceProcess) -> None:
    """Health, Prometheus metrics with commands by outcome, and a session inspected then stopped."""
    with shared_service.client() as client:
        name = new_name()
        view = client.create_session(name=name, idle_s="none")
        try:
            assert view.name == name and view.held and view.idle_limit_s is None
            client.exec(name, "true")
            assert client.session(name).id == view.id
            metrics = client.metrics()
            assert 'executor_commands_total{outcome="completed"}' in metrics
            assert "executor_command_seconds_bucket" in metrics
            assert re.search(r'^executor_pool_warm_sessions\{profile="default"\} \d+$', metrics, re.MULTILINE)
            assert client.health().status == "ok"
        finally:
            client.stop_session(name)
        with pytest.raises(SessionNotFound):
            client.session(name)


def test_async_client_under_asyncio_and_trio(shared_service: ServiceProcess) -> None:
    """The async client streams an exec under asyncio and under trio, with the same results."""

    async def run() -> tuple[list[bytes], int | None]:
        async with AsyncClient(socket=shared_service.socket) as client:
            session = (await client.create_session()).id
            chunks: list[bytes] = []
            async with client.stream_exec(session, "echo one; echo two") as events:
                async for event in events:
                    if event.kind == "chunk":
                        chunks.append(event.data)
            result = await client.exec(session, "exit 4")
            with pytest.raises(SessionNotFound):
                await client.exec("s-000000000000", "true")
            await client.stop_session(session)
            return chunks, result.exit_code

    for outcome in (asyncio.run(run()), trio.run(run)):
        assert b"".join(outcome[0]) == b"one\ntwo\n"
        assert outcome[1] == 4


def test_a_gone_client_does_not_stop_the_command(shared_service: ServiceProcess) -> None:
    """Leaving an exec stream early leaves the command running into its artifact."""
    with shared_service.client() as client:
        session = client.create_session().id
        with client.stream_exec(session, "echo started; sleep 1; echo finished > done.txt") as events:
            for event in events:
                if event.kind == "chunk":
                    break
        waited = client.exec(session, "while [ ! -e done.txt ]; do sleep 0.05; done; cat done.txt", timeout_ms=30_000)
        assert waited.stdout == b"finished\n"


def test_request_size_is_bounded(service_factory: Any) -> None:
    """service.max_request_bytes bounds the bytes a request carries (a write's content, an exec's stdin), not their
    base64 in JSON: exactly the bound is taken, one byte more is a 413, and a body far past it is refused from its
    declared length, before it is read."""
    service = service_factory(service__max_request_bytes="2048")
    service.start()
    with service.client() as client:
        session = client.create_session().id
        for over in (2049, 32 * 1024 * 1024):
            with pytest.raises(ExecutorError, match=r"service\.max_request_bytes"):
                client.write(session, "big.txt", "x" * over)
            with pytest.raises(ExecutorError, match=r"service\.max_request_bytes"):
                client.exec(session, "wc -c", stdin=b"y" * over)
        assert client.write(session, "whole.txt", "x" * 2048).outcome == "completed"
        assert client.exec(session, "wc -c < whole.txt").stdout == b"2048\n"
        assert client.exec(session, "wc -c", stdin=b"y" * 2048).stdout == b"2048\n"


def test_unix_socket_is_private_and_openapi_is_valid(shared_service: ServiceProcess) -> None:
    """The socket is mode 0600 and the published OpenAPI document validates."""
    from openapi_spec_validator import validate

    assert shared_service.socket.stat().st_mode & 0o777 == 0o600
    with shared_service.client() as client:
        document = client.openapi()
    validate(document)
    assert "/v1/sessions/{session}/exec" in document["paths"]
    transport = httpx2.HTTPTransport(uds=str(shared_service.socket))
    with httpx2.Client(transport=transport, base_url="http://x") as raw:
        assert raw.get("/v1/nowhere").status_code == 404
        assert raw.post("/v1/sessions", content=b"{not json").status_code == 422


def test_api_fuzzed_from_its_openapi_document(service_factory: Any, tmp_path: Path) -> None:
    """Schemathesis, driven by the published document against a real session, finds no 5xx answer."""
    import shutil
    import subprocess
    import sys

    # Generated env entries are often ones the gate asks about; an ask that waits ("approvals": "wait") must give
    # up well inside the fuzzer's request timeout.
    shared_service: ServiceProcess = service_factory(
        service__tcp="true",
        service__port="0",
        service__tokens=f'["{TOKEN_A}", "{TOKEN_B}"]',
        service__approval_timeout_s="2",
    )
    shared_service.start()

    st = Path(sys.executable).parent / "st"
    if not st.exists():
        st = Path(shutil.which("st") or "st")
    with shared_service.tcp_client(TOKEN_A) as client:
        session = client.create_session().id
    config = tmp_path / "schemathesis.toml"
    config.write_text(f'[parameters]\n"path.session" = "{session}"\n', encoding="utf-8")
    done = subprocess.run(
        [
            str(st),
            "--config-file",
            str(config),
            "run",
            f"{shared_service.url}/v1/openapi.json",
            "-H",
            f"Authorization: Bearer {TOKEN_A}",
            "--checks",
            "not_a_server_error",
            "--exclude-operation-id",
            "createSession",
            "--exclude-operation-id",
            "stopSession",
            "--max-examples",
            "10",
            "--phases",
            "coverage,fuzzing",
            "--seed",
            "1",
            "-w",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=220,
        check=False,
        cwd=tmp_path,  # schemathesis keeps its state (.schemathesis/) in the working folder
    )
    assert done.returncode == 0, done.stdout[-4000:]
    assert "passed" in done.stdout


def test_mcp_endpoint_is_served_beside_the_api(shared_service: ServiceProcess) -> None:
    """With tokens set, /mcp answers an MCP initialize for a valid token and 401 without one."""
    assert shared_service.url is not None
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
    headers = {"accept": "application/json, text/event-stream"}
    with httpx2.Client(base_url=shared_service.url, timeout=30) as raw:
        assert raw.post("/mcp", json=initialize, headers=headers).status_code == 401
        answer = raw.post("/mcp", json=initialize, headers={**headers, "authorization": f"Bearer {TOKEN_A}"})
        assert answer.status_code == 200, answer.text
        assert "serverInfo" in answer.text


async def test_hints_over_the_services_mcp_endpoint_are_mcp_calls_that_succeed(shared_service: ServiceProcess) -> None:
    """The service's executor also serves the HTTP API, whose results speak the Python API's words: a result over
    /mcp still names MCP's tools (task_start said read_task(...), which is no MCP tool), and each hint succeeds."""
    from mcp_types import TextContent

    from executor.testing.hints import tool_calls
    from executor.testing.mcp_http import open_mcp_http_client

    assert shared_service.url is not None
    async with open_mcp_http_client(f"{shared_service.url}/mcp", TOKEN_A) as client:

        async def call(tool: str, arguments: dict[str, Any]) -> str:
            result = await client.call_tool(tool, arguments)
            text = "\n".join(block.text for block in result.content if isinstance(block, TextContent))
            assert not result.is_error, f"{tool}({arguments}) -> {text}"
            return text

        started = await call("task_start", {"command": "seq 1 300; sleep 30"})
        assert "task_read(" in started and "read_task(" not in started, started
        texts = [started, await call("bash", {"command": "seq 1 500"})]
        followed: set[str] = set()
        for text in texts:
            for tool, arguments in tool_calls(text):
                followed.add(tool)
                await call(tool, arguments)
        assert {"task_read", "read_output"} <= followed, followed


def test_a_slow_client_never_blocks_the_command(shared_service: ServiceProcess) -> None:
    """A client that reads nothing while 64 MiB stream out does not hold the command or the session: the command
    ends, another command runs, and the late reader still gets every byte (the service spooled them)."""
    size = 64 * 1024 * 1024
    with shared_service.client() as client, shared_service.client() as other:
        session = client.create_session().id
        with client.stream_exec(session, f"head -c {size} /dev/zero") as events:
            deadline = time.monotonic() + 120
            while other.health().running and time.monotonic() < deadline:
                assert other.exec(session, "echo alongside").stdout == b"alongside\n"
            assert other.health().running == 0
            streamed = dropped = 0
            for event in events:
                if event.kind == "chunk":
                    streamed += len(event.data)
                elif event.kind == "dropped":
                    dropped += event.bytes
                else:
                    result = event.result
        assert (streamed, dropped) == (size, 0)
        assert result.run is not None and result.run.stream_bytes["stdout"] == size
        assert not result.stdout_whole and result.stdout_dropped == 0


def test_a_client_behind_more_than_the_spool_loses_chunks_and_the_result_says_so(service_factory: Any) -> None:
    """Past service.stream_spool_bytes a late reader loses chunks: dropped events count them, and so does the
    result's stdout_dropped; what it got plus what was dropped is the whole stream."""
    service = service_factory(service__stream_buffer_bytes="65536", service__stream_spool_bytes="1048576")
    service.start()
    size = 8 * 1024 * 1024
    with service.client(timeout_s=120) as client, service.client(timeout_s=120) as other:
        session = client.create_session().id
        with client.stream_exec(session, f"head -c {size} /dev/zero") as events:
            deadline = time.monotonic() + 120
            while other.health().running:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            seen = list(events)
        dropped = sum(e.bytes for e in seen if e.kind == "dropped")
        streamed = sum(len(e.data) for e in seen if e.kind == "chunk")
        result = seen[-1].result
        assert dropped > 0 and streamed + dropped == size
        assert (result.stdout_dropped, result.stderr_dropped) == (dropped, 0)
        assert result.run is not None and result.run.stream_bytes["stdout"] == size
        client.stop_session(session)


def test_a_session_removed_behind_the_service_is_let_go(shared_service: ServiceProcess) -> None:
    """A held named session whose container someone else removed is let go as soon as its agent connection dies
    (not at its next request); a request for it then says it is not running, its workspace is kept, and how to
    recreate it; creating the name again recreates it on that workspace."""
    import subprocess

    with shared_service.client() as client:
        name = new_name()
        client.create_session(name=name)
        assert client.exec(name, "echo kept > f").outcome == "completed"
        # Behind the service's back: the engine removes the container (the CLI would ask the service itself).
        session_id = client.session(name).id
        subprocess.run(["docker", "rm", "-f", f"executor-{session_id}"], capture_output=True, timeout=120, check=True)
        deadline = time.monotonic() + 30
        while client.session(name).held:
            assert time.monotonic() < deadline, "the service still holds a session whose container is gone"
            time.sleep(0.05)
        with pytest.raises(SessionNotFound, match=r"not running .*workspace is kept.*--create"):
            client.exec(name, "true")
        assert client.create_session(name=name).id == session_id
        assert client.exec(name, "cat f").stdout == b"kept\n"
        client.stop_session(name)


def test_stopping_a_session_cancels_what_runs_in_it(shared_service: ServiceProcess) -> None:
    """DELETE of a session with a command running in it kills that command's process group: its stream ends with
    a ``cancelled`` result holding the output so far (not an error from a journal closed under it), and the
    session is gone."""
    with shared_service.client() as client, shared_service.client() as other:
        session = client.create_session().id
        with client.stream_exec(session, "echo started; sleep 60; echo never") as events:
            seen = []
            for event in events:
                seen.append(event)
                if event.kind == "chunk":
                    other.stop_session(session)
        assert seen[-1].kind == "result", seen[-1]
        result = seen[-1].result
        assert (result.outcome, result.stdout) == ("cancelled", b"started\n")
        assert result.artifact_id is not None
        # The session's own result, as in-process: its run says how it ended, its view holds the output.
        assert result.run is not None and result.run.cause == "cancelled", result
        assert result.text.startswith("[cancelled after ") and "started" in result.text, result.text
        with pytest.raises(ExecutorError, match="no session"):
            other.session(session)


def test_a_stopped_sessions_artifacts_still_read_through_the_service(
    shared_service: ServiceProcess, tmp_path: Path
) -> None:
    """A session removed while a command runs in it leaves that command's artifact, and a task's, readable and
    searchable over the service (executor.client and the thin CLI named by EXECUTOR_URL, with no home of its own to
    fall back on), as the README promises of ``output read|search`` once a session is gone."""
    with shared_service.client() as client, shared_service.client() as other:
        session = client.create_session(name=new_name()).id
        started = client.start_task(session, "echo from-the-task")
        task_artifact = started.artifact_id
        task_id = str((started.data or {})["task_id"])
        assert task_artifact is not None
        deadline = time.monotonic() + 60
        while (client.read_task(session, task_id).data or {}).get("running"):
            assert time.monotonic() < deadline, "the task did not end"
            time.sleep(0.05)
        with client.stream_exec(session, "echo before-the-stop; sleep 20") as events:
            for event in events:
                if event.kind == "chunk":
                    other.stop_session(session)
        assert event.kind == "result" and event.result.outcome == "cancelled", event
        artifact = event.result.artifact_id
        assert artifact is not None and artifact.startswith(session + ".")
        with pytest.raises(SessionNotFound):
            client.session(session)
        page = client.read_output(session, artifact)
        assert page.outcome == "completed" and "before-the-stop" in page.text, page.text
        found = client.search_output(session, artifact, pattern="before-the")
        assert (found.data or {}).get("matches"), found
        assert "from-the-task" in client.read_output(session, task_artifact).text
        with pytest.raises(ArtifactNotFound):
            client.read_output(session, f"{session}.a999")
        thin = {"EXECUTOR_URL": f"unix://{shared_service.socket}"}
        read = cli(tmp_path, "output", "read", artifact, env=thin)
        assert (read.code, "before-the-stop" in read.stdout) == (0, True), read
        searched = cli(tmp_path, "output", "search", artifact, "--pattern", "before-the", env=thin)
        assert searched.code == 0 and "before-the-stop" in searched.stdout, searched


def test_a_stopped_sessions_artifacts_are_still_only_its_owners(shared_service: ServiceProcess) -> None:
    """Once a token's session is gone, that token still reads its artifacts over TCP and another token still gets
    "not found"."""
    with shared_service.tcp_client(TOKEN_A) as a, shared_service.tcp_client(TOKEN_B) as b:
        session = a.create_session().id
        ran = a.exec(session, "echo mine")
        assert ran.artifact_id is not None
        a.stop_session(session)
        with pytest.raises(SessionNotFound):
            a.session(session)
        artifact = ran.artifact_id
        assert "mine" in a.read_output(session, artifact).text
        with pytest.raises(SessionNotFound):
            b.read_output(session, artifact)
        with pytest.raises(SessionNotFound):
            b.search_output(session, artifact, pattern="mine")


def test_http_contract_allow_on_405_and_a_gated_task_start_is_not_created(shared_service: ServiceProcess) -> None:
    """A 405 names every method its path takes in ``Allow``; a task start the gate stops (blocked) answers 200
    with its result, as exec and write do, and only a task that was made answers 201; headers past the server's
    bound are a 431."""
    with httpx2.Client(transport=httpx2.HTTPTransport(uds=str(shared_service.socket)), timeout=120) as raw:
        for method, path, allowed in (
            ("PATCH", "/v1/sessions", "GET, HEAD, POST"),
            ("TRACE", "/v1/health", "GET, HEAD"),
            ("PUT", "/v1/sessions/x/tasks/t1", "DELETE, GET, HEAD"),
        ):
            answer = raw.request(method, "http://x" + path)
            assert (answer.status_code, answer.headers.get("allow")) == (405, allowed), (method, path)
            assert answer.json()["error"]["type"] == "MethodNotAllowed"
        session = raw.post("http://x/v1/sessions", json={}).json()["id"]
        try:
            blocked = raw.post(
                f"http://x/v1/sessions/{session}/tasks", json={"command": ASKED.format(tag="t"), "approvals": "none"}
            )
            assert (blocked.status_code, blocked.json()["outcome"]) == (200, "blocked"), blocked.text
            assert not raw.get(f"http://x/v1/sessions/{session}/tasks").json()
            made = raw.post(f"http://x/v1/sessions/{session}/tasks", json={"command": "true"})
            assert (made.status_code, made.json()["outcome"]) == (201, "completed"), made.text
        finally:
            raw.delete(f"http://x/v1/sessions/{session}")
        huge = raw.get("http://x/v1/health", headers={"x-padding": "a" * (128 * 1024)})
        assert huge.status_code == 431  # bare from h11, or JSON from the app: test_request_heads_past_64_kib_are_431


def test_deeply_nested_json_is_a_400_on_every_json_endpoint_and_the_service_goes_on(
    shared_service: ServiceProcess,
) -> None:
    """A JSON body nested 200,000 deep (or just past service.max_json_depth) is refused with a 400 naming the setting
    on every route that parses one, MCP's included, before any parser recurses into it; the service still answers."""
    assert shared_service.url is not None
    with shared_service.client() as client:
        session = client.create_session().id
    deep = b'{"command": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    just_over = b'{"command": "true", "x": ' + b"[" * 64 + b"]" * 64 + b"}"  # 65 levels with the outer object
    at_limit = b'{"command": "true", "x": ' + b"[" * 63 + b"]" * 63 + b"}"
    routes = ["/v1/sessions", f"/v1/sessions/{session}/exec", f"/v1/sessions/{session}/write"]
    routes += [f"/v1/sessions/{session}/tasks", "/v1/approvals/ap-000000000000"]
    with httpx2.Client(transport=httpx2.HTTPTransport(uds=str(shared_service.socket)), timeout=60) as raw:
        for route in routes:
            for body in (deep, just_over):
                answer = raw.post(f"http://x{route}", content=body, headers={"content-type": "application/json"})
                assert answer.status_code == 400, (route, answer.text)
                error = answer.json()["error"]
                assert error["type"] == "ValidationError", error
                assert re.fullmatch(
                    r"the request body is refused: JSON nested \d+ levels deep; at most 64 \(service\.max_json_depth\)"
                    r" are accepted",
                    error["message"],
                ), error
        # At the limit the body is parsed as usual (here: a field the route does not take).
        answer = raw.post(f"http://x/v1/sessions/{session}/exec", content=at_limit)
        assert answer.status_code == 422, answer.text
    headers = {"accept": "application/json, text/event-stream", "authorization": f"Bearer {TOKEN_A}"}
    with httpx2.Client(base_url=shared_service.url, timeout=60) as mcp:
        answer = mcp.post("/mcp", content=b"[" * 200_000, headers={**headers, "content-type": "application/json"})
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["code"] == -32700
        assert "service.max_json_depth" in answer.json()["error"]["message"]
    with shared_service.client() as client:
        assert client.exec(session, "echo alive").stdout == b"alive\n"


def test_another_tokens_session_and_a_missing_one_get_the_same_404_on_every_route(
    shared_service: ServiceProcess,
) -> None:
    """On every route that takes a session, another token's session (by id or by name) and one that does not exist
    get byte-identical 404 answers but for the identifier: nothing tells which exist."""
    assert shared_service.url is not None
    name = new_name()
    with shared_service.tcp_client(TOKEN_A) as client:
        theirs = client.create_session(name=name).id
        ran = client.exec(theirs, "echo hi")
        artifact = ran.artifact_id or "a-000000000000"
    calls = [
        ("GET", "", None),
        ("DELETE", "", None),
        ("POST", "/exec", {"command": "true"}),
        ("POST", "/write", {"path": "x", "content": "eA=="}),
        ("GET", "/files?path=.", None),
        ("GET", f"/artifacts/{artifact}", None),
        ("GET", f"/artifacts/{artifact}/search?pattern=hi", None),
        ("GET", "/tasks", None),
        ("POST", "/tasks", {"command": "true"}),
        ("GET", "/tasks/t-000000000000", None),
        ("DELETE", "/tasks/t-000000000000", None),
    ]
    headers = {"authorization": f"Bearer {TOKEN_B}"}
    with httpx2.Client(base_url=shared_service.url, timeout=60, headers=headers) as raw:
        for method, tail, body in calls:
            answers = {}
            for ident in (theirs, "s-000000000000", name, "svct-missing0"):
                answer = raw.request(method, f"/v1/sessions/{ident}{tail}", json=body)
                answers[ident] = (answer.status_code, answer.text.replace(ident, "IDENT"))
            assert len(set(answers.values())) == 1, (method, tail, answers)
            status, text = answers[theirs]
            assert status == 404 and json.loads(text)["error"]["type"] == "SessionNotFound", (method, tail, text)
    with shared_service.tcp_client(TOKEN_A) as client:
        assert client.exec(theirs, "echo still").stdout == b"still\n"  # B's calls touched nothing
        client.stop_session(theirs)


def test_request_heads_past_64_kib_are_431_on_the_api_and_mcp(shared_service: ServiceProcess) -> None:
    """The documented 64 KiB bound on a request's line and headers holds exactly, whatever way the head arrives
    (it was ~128 KiB when it arrived whole): just under it is answered, just over it and up to 128 KiB is a 431, on
    the unix socket, over TCP and on /mcp; the service goes on."""
    assert shared_service.url is not None
    auth = {"authorization": f"Bearer {TOKEN_A}"}
    with (
        httpx2.Client(transport=httpx2.HTTPTransport(uds=str(shared_service.socket)), timeout=60) as unix,
        httpx2.Client(base_url=shared_service.url, timeout=60, headers=auth) as tcp,
    ):
        for size in (60 * 1024, 65 * 1024, 100 * 1024, 127 * 1024):
            padding = {"x-padding": "a" * size}
            expected = 200 if size < 64 * 1024 else 431
            for answer in (unix.get("http://x/v1/health", headers=padding), tcp.get("/v1/health", headers=padding)):
                assert answer.status_code == expected, (size, answer.status_code)
                if expected == 431 and answer.content:
                    assert answer.json()["error"]["type"] == "RequestHeaderFieldsTooLarge"
            mcp = tcp.post("/mcp", content=b"{}", headers={**padding, "content-type": "application/json"})
            assert (mcp.status_code == 431) == (expected == 431), (size, mcp.status_code)
        assert unix.get("http://x/v1/health").status_code == 200
