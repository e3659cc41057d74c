"""executor.client against a real service on the real engine: exec streams carry raw bytes exactly, each stream
apart, and a consumer slower than the command loses nothing (the client holds the read back, the service spools)."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import pytest
import trio

from executor.client import AsyncClient, Client
from executor.service.wire import ChunkEvent, ResultEvent
from tests.service.conftest import ServiceProcess

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

T = TypeVar("T")
_OUT_BYTES = 5 * 1024 * 1024 + 17
_ERR_BYTES = 3 * 1024 * 1024 + 5
_COMMAND = "cat out.bin; cat err.bin >&2"
_WAIT_S = 120.0
_CALL_S = 120.0
"""Bound on each non-streaming call: creating a session on a loaded 2-core host can take more than the default."""


def _make_files(client: Client) -> tuple[str, dict[str, str]]:
    """A session holding out.bin and err.bin of random bytes; their sha256 as the container computed it."""
    session = client.create_session().id
    made = client.exec(
        session,
        f"head -c {_OUT_BYTES} /dev/urandom > out.bin && head -c {_ERR_BYTES} /dev/urandom > err.bin && "
        "sha256sum out.bin err.bin",
    )
    assert made.outcome == "completed", made.text
    sums: dict[str, str] = {}
    for line in made.stdout.decode().splitlines():
        digest, name = line.split()
        sums[name] = digest
    return session, {"stdout": sums["out.bin"], "stderr": sums["err.bin"]}


def _wait_idle(client: Client) -> None:
    deadline = time.monotonic() + _WAIT_S
    while client.health().running:
        assert time.monotonic() < deadline, "the command did not end while its reader read nothing"
        time.sleep(0.05)


async def _await_idle(client: AsyncClient) -> None:
    with anyio.fail_after(_WAIT_S):
        while True:
            if not (await client.health()).running:
                return
            await anyio.sleep(0.05)


def _check(received: dict[str, Any], counts: dict[str, int], final: Any, sums: dict[str, str]) -> None:
    assert counts == {"stdout": _OUT_BYTES, "stderr": _ERR_BYTES}
    assert {name: digest.hexdigest() for name, digest in received.items()} == sums
    assert isinstance(final, ResultEvent)
    result = final.result
    assert result.outcome == "completed" and result.exit_code == 0
    assert (result.stdout_dropped, result.stderr_dropped) == (0, 0)
    assert result.run is not None and result.run.stream_bytes == {"stdout": _OUT_BYTES, "stderr": _ERR_BYTES}


def test_a_slow_sync_consumer_gets_every_byte_of_each_stream(spooling_service: ServiceProcess) -> None:
    """A blocking consumer that reads nothing until the command ended, then reads slowly, gets every random byte of
    stdout and of stderr, each apart (sha256), and a result that says nothing was dropped."""
    with spooling_service.client(timeout_s=_CALL_S) as client, spooling_service.client(timeout_s=_CALL_S) as watcher:
        session, sums = _make_files(client)
        received = {"stdout": hashlib.sha256(), "stderr": hashlib.sha256()}
        counts = {"stdout": 0, "stderr": 0}
        final = None
        with client.stream_exec(session, _COMMAND) as events:
            _wait_idle(watcher)
            for event in events:
                if isinstance(event, ChunkEvent):
                    received[event.stream].update(event.data)
                    counts[event.stream] += len(event.data)
                    time.sleep(0.001)
                else:
                    assert event.kind == "result", event
                    final = event
        _check(received, counts, final, sums)
        again = client.exec(session, _COMMAND)
        assert hashlib.sha256(again.stdout).hexdigest() != sums["stdout"]  # the result holds only its bounded head
        assert not again.stdout_whole and again.stdout_dropped == 0
        client.stop_session(session)


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_a_slow_async_consumer_gets_every_byte_of_each_stream(spooling_service: ServiceProcess, loop: str) -> None:
    """The async client under asyncio and under trio: the same slow consumer gets the same bytes."""
    with spooling_service.client(timeout_s=_CALL_S) as client:
        session, sums = _make_files(client)

    async def consume() -> tuple[dict[str, Any], dict[str, int], Any]:
        received = {"stdout": hashlib.sha256(), "stderr": hashlib.sha256()}
        counts = {"stdout": 0, "stderr": 0}
        final = None
        async with (
            AsyncClient(socket=spooling_service.socket, timeout_s=_CALL_S) as aclient,
            AsyncClient(socket=spooling_service.socket, timeout_s=_CALL_S) as watcher,
            aclient.stream_exec(session, _COMMAND) as events,
        ):
            await _await_idle(watcher)
            async for event in events:
                if isinstance(event, ChunkEvent):
                    received[event.stream].update(event.data)
                    counts[event.stream] += len(event.data)
                    await anyio.sleep(0.001)
                else:
                    final = event
        return received, counts, final

    _check(*_run(loop, consume), sums)
    with spooling_service.client(timeout_s=_CALL_S) as client:
        client.stop_session(session)


def _run(loop: str, main: Callable[[], Awaitable[T]]) -> T:
    if loop == "trio":
        return trio.run(main)

    async def wrapped() -> T:
        return await main()

    return asyncio.run(wrapped())


def test_exec_results_match_the_stream(spooling_service: ServiceProcess) -> None:
    """Client.exec returns the result event of the framed stream: raw bytes (NUL, invalid UTF-8) exactly."""
    with spooling_service.client(timeout_s=_CALL_S) as client:
        session = client.create_session().id
        out = "printf a; head -c 1 /dev/zero; printf b; echo /w== | base64 -d"
        result = client.exec(session, f"{out}; printf e >&2; head -c 1 /dev/zero >&2; exit 5", approvals="none")
        assert (result.outcome, result.exit_code) == ("failed", 5)
        assert (result.stdout, result.stderr) == (b"a\0b\xff", b"e\0")
        client.stop_session(session)


def _calls(text: str, name: str) -> list[dict[str, Any]]:
    """The keyword arguments of each ``name(...)`` call a result's text shows as a hint."""
    import ast
    import re

    found = []
    for match in re.finditer(rf"\b{name}\((.*?)\)(?:$|\s|;)", text, flags=re.MULTILINE):
        call = ast.parse(f"f({match.group(1)})", mode="eval").body
        assert isinstance(call, ast.Call) and not call.args
        found.append({kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg is not None})
    return found


def test_every_hint_a_client_result_prints_is_a_call_it_can_make(spooling_service: ServiceProcess) -> None:
    """Results through executor.client name their recovery calls as this client's: the session first, then the
    rest; each is made as written and answers (the hints named the Python API's calls, without the session)."""
    with spooling_service.client() as client:
        session = client.create_session().id
        try:
            result = client.exec(session, "seq 1 50; echo oops >&2")
            reads = _calls(result.text, "read_output")
            searches = _calls(result.text, "search_output")
            assert reads and searches, result.text
            for kwargs in reads:
                assert kwargs["session"] == session
                page = client.read_output(**kwargs)
                assert page.outcome == "completed" and "11" in page.text.splitlines()[1], page.text
            for kwargs in searches:
                kwargs["pattern"] = "^4"
                assert "40" in client.search_output(**kwargs).text
        finally:
            client.stop_session(session)


def test_a_write_upload_or_task_the_gate_asks_about_waits_past_timeout_s_for_its_answer(
    spooling_service: ServiceProcess, tmp_path: Any
) -> None:
    """A write, an upload and a task start waiting for an approval are not cut by the client's timeout_s (a write
    outside the workspace failed after 30 s saying no service answers, while its approval stayed pending);
    approvals="none" gives the blocked result at once. Sync and async clients."""
    import threading

    folder = tmp_path / "up"
    (folder / ".vscode").mkdir(parents=True)
    (folder / ".vscode" / "tasks.json").write_text("{}")

    with spooling_service.client(timeout_s=1) as client, spooling_service.client() as approver:
        session = approver.create_session().id  # starting a container takes longer than 1 s

        def approve_later() -> None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                asks = approver.approvals()
                if asks:
                    time.sleep(1.5)  # past the asking client's timeout_s
                    approver.answer(asks[0].approval_id, approve=True)
                    return
                time.sleep(0.05)

        calls: list[Callable[[], Any]] = [
            lambda: client.write(session, "/tmp/x.txt", "x"),
            lambda: client.upload(session, folder, "."),
            lambda: client.start_task(session, "echo hi > /tmp/task.txt"),
        ]
        for call in calls:
            helper = threading.Thread(target=approve_later)
            helper.start()
            try:
                result = call()
            finally:
                helper.join(timeout=60)
            assert result.outcome == "completed", result
        blocked = client.write(session, "/tmp/y.txt", "y", approvals="none")
        assert blocked.outcome == "blocked", blocked
        assert client.upload(session, folder, ".", approvals="none").outcome == "blocked"

        async def async_write() -> str:
            async with AsyncClient(socket=spooling_service.socket, timeout_s=1) as aclient:
                waiter = asyncio.ensure_future(aclient.write(session, "/tmp/z.txt", "z"))
                await asyncio.to_thread(approve_later)
                return (await waiter).outcome

        assert asyncio.run(async_write()) == "completed"
        approver.stop_session(session)
