"""The service's core in process, against the real engine: races between its idle stop and new work, held open."""

from __future__ import annotations

import secrets
from contextlib import suppress
from pathlib import Path

import pytest
import trio
import trio.testing

from executor.config import Settings
from executor.errors import SessionNotFound, SessionNotRunning
from executor.sandbox.usage import Usage, read_usage
from executor.service import core
from executor.service.core import open_service
from executor.session import ToolResult, open_executor

pytestmark = [pytest.mark.docker, pytest.mark.timeout(120)]


async def test_work_arriving_during_an_idle_stop_is_refused_never_accepted_then_killed(
    base_image: str, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exec that reaches a named session while its idle stop ends its tasks waits for the stop and is told the
    session is not running (how to start it again); nothing of it ran."""
    name = "svcore-" + secrets.token_hex(3)
    async with open_executor(settings, pool="off") as executor:
        try:
            async with open_service(executor, settings) as service:
                held = await service.create(owner=None, profile=None, image=None, name=name, idle_s=1.0)
                # The idle stop, once decided, is held inside its first wait (ending the session's tasks, up to
                # docker.stop_timeout_s for a task that ignores SIGTERM) until the new work has come.
                ending, go = trio.Event(), trio.Event()
                end_tasks = held.session.end_tasks

                async def held_end_tasks() -> None:
                    ending.set()
                    await go.wait()
                    await end_tasks()

                monkeypatch.setattr(held.session, "end_tasks", held_end_tasks)
                outcome: list[object] = []

                async def exec_now() -> None:
                    try:
                        found = await service.get(name, None)
                        async with service.using(found) as session:
                            result = await session.bash("echo started; sleep 1; echo finished")
                        outcome.append(result)
                    except SessionNotFound as exc:
                        outcome.append(exc)

                with trio.fail_after(60):
                    await ending.wait()
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(exec_now)
                        await trio.testing.wait_all_tasks_blocked(cushion=0.5)
                        go.set()
                (answer,) = outcome
                assert isinstance(answer, SessionNotRunning), answer
                assert str(answer).startswith(f"session {name} is not running")
        finally:
            with trio.move_on_after(60) as cleanup:
                cleanup.shield = True
                with suppress(SessionNotFound):
                    await executor.stop_session(name)


async def test_work_arriving_while_an_idle_stop_is_decided_keeps_the_session(
    base_image: str, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exec accepted while the idle stop reads the session's usage file calls that stop off: the command ends by
    itself and the session keeps running."""
    name = "svcore-" + secrets.token_hex(3)
    async with open_executor(settings, pool="off") as executor:
        try:
            async with open_service(executor, settings) as service:
                held = await service.create(owner=None, profile=None, image=None, name=name, idle_s=1.0)
                reading, go = trio.Event(), trio.Event()

                def held_read_usage(path: Path, *, hold: bool = False) -> tuple[Usage, int | None]:
                    read = read_usage(path, hold=hold)
                    trio.from_thread.run_sync(reading.set)
                    trio.from_thread.run(go.wait)
                    return read

                monkeypatch.setattr(core, "read_usage", held_read_usage)
                results: list[ToolResult] = []
                accepted = trio.Event()

                async def exec_now() -> None:
                    async with service.using(await service.get(name, None)) as session:
                        accepted.set()
                        results.append(await session.bash("echo started; sleep 1; echo finished"))

                with trio.fail_after(60):
                    await reading.wait()
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(exec_now)
                        await accepted.wait()
                        go.set()
                (result,) = results
                assert result.outcome == "completed" and result.stdout == b"started\nfinished\n", result
                assert service.held.get(held.session.id) is held and not held.stopping
                assert (await executor.backend.find_session(name)).state == "running"
        finally:
            with trio.move_on_after(60) as cleanup:
                cleanup.shield = True
                with suppress(SessionNotFound):
                    await executor.stop_session(name)
