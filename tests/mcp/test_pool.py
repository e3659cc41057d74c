"""The MCP session pool: a held session goes away (stopped elsewhere, idle-stopped, died) under the calls using it."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from mcp import Client
from mcp_types import CallToolResult, TextContent

from executor.config import Settings
from executor.mcp.server import open_surface
from executor.session import open_executor
from executor.testing import FakeExecutor

pytestmark = pytest.mark.timeout(120)


def _text(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


def _facts(result: CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None, _text(result)
    return dict(result.structured_content)


async def test_a_named_session_removed_elsewhere_is_not_replaced_by_an_empty_one_unannounced() -> None:
    """After the held named session is removed by another process, the next call says so and runs nothing; the call
    after it starts a new session under the name."""
    executor = FakeExecutor()
    async with (
        open_surface(executor, transport="stdio", session_name="ci") as surface,
        Client(surface.server) as client,
    ):
        assert not (await client.call_tool("bash", {"command": "echo first"})).is_error
        first = executor.kept["ci"]
        await executor.stop_session("ci")  # another process's `executor session stop ci`
        first.lost.set()
        await trio.testing.wait_all_tasks_blocked()
        refused = await client.call_tool("bash", {"command": "echo lost"})
        assert refused.is_error and _facts(refused)["error"] == "SessionStopped", _text(refused)
        assert _text(refused).startswith("session 'ci' was stopped and removed while this server used it")
        assert "ci" not in executor.kept
        assert not (await client.call_tool("bash", {"command": "echo again"})).is_error
    assert first.ran == ["echo first"]
    assert executor.kept["ci"] is not first and executor.kept["ci"].ran == ["echo again"]


def _journal_events(home: Path) -> list[dict[str, Any]]:
    events = []
    for journal in home.glob("sessions/*/journal.ndjson"):
        for line in journal.read_text().splitlines():
            if line.strip():
                events.append(json.loads(line))
    return events


async def _another_started(home: Path, first: str) -> None:
    """Wait until an action other than ``first`` started executing (its id is not known until its call ends)."""
    while True:
        events = _journal_events(home)
        if any(e.get("type") == "execution_started" and e.get("action_id") != first for e in events):
            return
        await trio.sleep(0.05)


@pytest.mark.docker
async def test_a_named_session_stopped_by_another_process_ends_the_running_call_cancelled(
    base_image: str, home: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`executor session stop NAME` from another process while a call runs in the MCP server's named session: the
    call ends with its own cancelled result, journaled as finished; the next call says the session was removed."""
    name = "mcp-stop-" + secrets.token_hex(3)
    env = {key: value for key, value in os.environ.items() if not key.startswith("EXECUTOR_")}
    env["EXECUTOR_HOME"] = str(home)
    try:
        async with (
            open_executor(settings, surface="mcp", pool="off") as executor,
            open_surface(executor, transport="stdio", session_name=name) as surface,
            Client(surface.server) as client,
        ):
            # The race, held open: the running call, told its agent went away, asks whether the session was stopped
            # and waits here until everything else the loss set off (the pool letting the session go) has settled.
            settled = trio.Event()
            was_stopped = executor.backend.was_stopped

            async def held_was_stopped(session_id: str) -> bool:
                await settled.wait()
                return await was_stopped(session_id)

            monkeypatch.setattr(executor.backend, "was_stopped", held_was_stopped)
            first = await client.call_tool("bash", {"command": "echo one > kept.txt"})
            assert not first.is_error, _text(first)
            results: list[CallToolResult] = []

            async def long_call() -> None:
                results.append(await client.call_tool("bash", {"command": "sleep 60; echo two"}))

            with trio.fail_after(90):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(long_call)
                    await _another_started(home, _facts(first)["action_id"])
                    stopped = await trio.run_process(
                        [sys.executable, "-m", "executor.cli", "session", "stop", name],
                        env=env,
                        capture_stdout=True,
                        capture_stderr=True,
                        check=False,
                    )
                    assert stopped.returncode == 0, stopped.stderr.decode(errors="replace")
                    await trio.testing.wait_all_tasks_blocked(cushion=0.2)
                    settled.set()
            (result,) = results
            facts = _facts(result)
            assert facts["outcome"] == "cancelled", _text(result)
            assert "stopped" in _text(result) and "JournalError" not in _text(result)
            events = _journal_events(home)
            finished = [e for e in events if e.get("type") == "execution_finished"]
            assert facts["action_id"] in {e["action_id"] for e in finished}, events

            refused = await client.call_tool("bash", {"command": "echo three"})
            assert refused.is_error and _facts(refused)["error"] == "SessionStopped", _text(refused)
            again = await client.call_tool("bash", {"command": "test -e kept.txt && echo kept || echo new"})
            assert not again.is_error and "new" in _text(again), _text(again)
    finally:
        with trio.move_on_after(60) as cleanup:
            cleanup.shield = True
            async with open_executor(settings) as executor:
                with contextlib.suppress(LookupError):
                    await executor.stop_session(name)
