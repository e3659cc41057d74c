"""The host's own bound on every agent call: a paused container or a stopped agent never hangs a caller.

Each test freezes a real session (``docker pause``: the cgroup freezer; or SIGSTOP of the agent, PID 1) in the
middle of a call, on both transports, and thaws it in ``finally``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any, Literal

import pytest
import trio

from executor.config import Settings, load_settings
from executor.errors import ConfigError, SessionNotFound, SessionUnhealthy
from executor.sandbox.docker import DockerBackend
from executor.session import Executor, Session, open_executor

pytestmark = pytest.mark.docker

Freeze = Literal["pause", "sigstop"]


def _settings(home: Path, tmp_path_factory: pytest.TempPathFactory, transport: str) -> Settings:
    build = tmp_path_factory.getbasetemp() / "agent-build-shared"
    return load_settings(
        overrides={
            "home": str(home),
            "agent": {"build_dir": str(build), "transport": transport, "host_margin_s": 1.0},
            "bash": {"grace_ms": 300, "drain_ms": 300},
        }
    )


@asynccontextmanager
async def _frozen(ex: Executor, session: Session, how: Freeze) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """Yield a function that freezes the session's container; whatever happens, it is thawed on exit."""
    backend = ex.backend
    assert isinstance(backend, DockerBackend)
    api = backend.engine.client.api
    container = session.info.container_id
    frozen = False

    async def freeze() -> None:
        nonlocal frozen
        if how == "pause":
            await trio.to_thread.run_sync(api.pause, container)
        else:
            await trio.to_thread.run_sync(lambda: api.kill(container, signal="SIGSTOP"))
        frozen = True

    try:
        yield freeze
    finally:
        if frozen:
            with trio.CancelScope(shield=True), trio.move_on_after(30):
                if how == "pause":
                    await trio.to_thread.run_sync(api.unpause, container)
                else:
                    await trio.to_thread.run_sync(lambda: api.kill(container, signal="SIGCONT"))


def _has_output(home: Path, needle: bytes) -> bool:
    return any(needle in part.read_bytes() for part in home.rglob("stdout.part"))


async def _wait_for_output(home: Path, needle: bytes) -> None:
    with trio.fail_after(30):
        while True:
            if await trio.to_thread.run_sync(_has_output, home, needle):
                return
            await trio.sleep(0.02)


@pytest.mark.parametrize(("transport", "how"), [("socket", "pause"), ("exec", "pause"), ("socket", "sigstop")])
async def test_a_frozen_run_ends_unresponsive_keeps_its_output_and_marks_the_session(
    home: Path, tmp_path_factory: pytest.TempPathFactory, transport: str, how: Freeze
) -> None:
    """Freezing the sandbox 'before' was printed ends the run as unresponsive past deadline + grace + drain +
    margin, with 'before' kept; the next call, and any later attach, fail at once with SessionUnhealthy until the
    session is stopped."""
    settings = _settings(home, tmp_path_factory, transport)
    name = f"t-unresp-{transport}-{how}"
    try:
        await _freeze_a_run(settings, home, name, how)
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(30):
            async with open_executor(settings) as ex:
                with suppress(SessionNotFound):
                    await ex.stop_session(name)


async def _freeze_a_run(settings: Settings, home: Path, name: str, how: Freeze) -> None:
    with trio.fail_after(120):
        async with (
            open_executor(settings) as ex,
            ex.open_session(name=name, keep=True) as session,
            _frozen(ex, session, how) as freeze,
        ):
            result: list[Any] = []

            async def run() -> None:
                result.append(await session.bash("echo before; sleep 30", timeout_ms=2000))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(run)
                await _wait_for_output(home, b"before\n")
                await freeze()
            (done,) = result
            assert done.outcome == "unresponsive"
            assert done.run is not None and done.run.cause == "unresponsive"
            assert done.run.stream_bytes.get("stdout") == len(b"before\n")
            assert done.exit_code is None
            assert done.text.startswith("[sandbox unresponsive: no answer from the agent")
            assert done.artifact_id is not None
            page = await session.read_output(done.artifact_id, stream="stdout")
            assert "before" in page.text
            with pytest.raises(SessionUnhealthy, match=r"^the session is unhealthy: the agent did not answer"):
                await session.bash("echo after")
            with pytest.raises(SessionUnhealthy, match=rf"^session {name} is unhealthy since .*executor session stop"):
                async with ex.attach_session(name):
                    pass
        # a new process (here: a new executor on the same home) refuses the session too, until it is stopped
        async with open_executor(settings) as ex:
            with pytest.raises(SessionUnhealthy, match=rf"^session {name} is unhealthy"):
                async with ex.attach_session(name):
                    pass
            await ex.stop_session(name)
            assert not list((home / "run").glob("*.unhealthy"))
            async with ex.attach_session(name, create=True) as fresh:
                assert (await fresh.bash("echo fresh")).outcome == "completed"
            await ex.stop_session(name)


@pytest.mark.parametrize("transport", ["socket", "exec"])
async def test_every_other_agent_call_is_bounded_too(
    home: Path, tmp_path_factory: pytest.TempPathFactory, transport: str
) -> None:
    """A task operation on a paused session raises SessionUnhealthy after the margin instead of hanging (the message
    names the call that met the frozen agent first: this one, or the task mirror's read)."""
    settings = _settings(home, tmp_path_factory, transport)
    with trio.fail_after(90):
        async with open_executor(settings) as ex, ex.open_session() as session:
            started = await session.start_task("echo tick; sleep 60")
            assert started.outcome == "completed"
            async with _frozen(ex, session, "pause") as freeze:
                await freeze()
                # The task's mirror polls the agent too: whichever call met the frozen agent first is named (on a
                # slow host its READ often does), and the session is unhealthy for every call after it.
                with pytest.raises(SessionUnhealthy, match=r"did not answer a (LIST|READ) request within 1\.0s"):
                    await session.list_tasks()
                with pytest.raises(SessionUnhealthy):
                    await session.write_file("x.txt", b"x")


def test_host_margin_default_and_rejection() -> None:
    """agent.host_margin_s defaults to 10 s and refuses 0 and negative values at load time."""
    assert load_settings().agent.host_margin_s == 10.0
    for bad in (0, -1, 10_000):
        with pytest.raises(ConfigError, match=r"agent\.host_margin_s"):
            load_settings(overrides={"agent": {"host_margin_s": bad}})
