"""Idle limits of named sessions: stored as a label, enforced by gc (and start-up clean-up) with the workspace kept."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import pytest
import trio

from executor.config import load_settings
from executor.sandbox.base import SessionInfo
from executor.sandbox.docker import DockerBackend
from executor.sandbox.docker.hardening import container_name, volume_name
from executor.sandbox.names import name_lock
from executor.sandbox.usage import UsageMark, usage_path
from executor.session import open_executor

pytestmark = pytest.mark.docker


async def _wait_idle(backend: DockerBackend, session_id: str, seconds: float) -> SessionInfo:
    with trio.fail_after(30):
        while True:
            info = await backend.find_session(session_id)
            if info.idle_for_s(datetime.now(UTC)) > seconds:
                return info
            await trio.sleep(0.2)


async def test_named_sessions_store_their_idle_limit(backend_factory: Any) -> None:
    """A named session stores sessions.idle_s by default, an explicit limit or none; an unnamed one stores none."""
    profile = load_settings().profile()
    async with backend_factory(sessions={"idle_s": "2h"}) as backend:
        assert isinstance(backend, DockerBackend)
        opened: list[SessionInfo] = []
        try:
            choices: list[tuple[str | None, float | Literal["none", "default"]]] = [
                ("idl-default", "default"),
                ("idl-five", 5.0),
                ("idl-none", "none"),
                (None, 7.0),
            ]
            for name, idle in choices:
                opened.append(
                    await backend.open_session(profile=profile, profile_name="default", name=name, idle_limit_s=idle)
                )
            listed = {info.id: info for info in await backend.list_sessions()}
        finally:
            for info in opened:
                await backend.stop_session(info.id)
    default, five, none, unnamed = (listed[info.id] for info in opened)
    assert default.idle_limit_s == 7200 and default.labels["executor.idle_limit_s"] == "7200"
    assert five.idle_limit_s == 5 and five.labels["executor.idle_limit_s"] == "5"
    assert none.idle_limit_s is None and none.labels["executor.idle_limit_s"] == "none"
    assert unnamed.idle_limit_s is None and "executor.idle_limit_s" not in unnamed.labels


async def test_gc_stops_an_idle_named_session_keeps_its_workspace_and_spares_a_busy_one(
    backend_factory: Any, home: Path
) -> None:
    """Past its limit a named session's container goes and its volume stays (listed workspace_only, same limit);
    one with a call running is never idle; the name starts it again with its stored limit."""
    profile = load_settings().profile()
    async with backend_factory() as backend:
        assert isinstance(backend, DockerBackend)
        idle = await backend.open_session(profile=profile, profile_name="default", name="idl-gc", idle_limit_s=1.0)
        busy = await backend.open_session(profile=profile, profile_name="default", name="idl-busy", idle_limit_s=1.0)
        try:
            await _wait_idle(backend, idle.id, 1.0)
            await _wait_idle(backend, busy.id, 1.0)
            with UsageMark(usage_path(home, busy.id)):
                report = await backend.gc()
                busy_now = await backend.find_session(busy.id)
            after = await backend.find_session("idl-gc")
            again = await backend.open_session(profile=profile, profile_name="default", name="idl-gc")
        finally:
            await backend.stop_session(idle.id)
            await backend.stop_session(busy.id)
    assert report.idle_stopped == ("idl-gc",)
    assert container_name(idle.id) in report.removed and volume_name(idle.id) in report.kept
    assert volume_name(idle.id) not in report.removed
    assert after.workspace_only and after.idle_limit_s == 1.0
    assert busy_now.state == "running" and busy_now.busy
    assert again.id == idle.id and again.idle_limit_s == 1.0


async def test_a_command_records_the_last_use_and_start_up_clean_up_enforces_the_limit(
    base_image: str, home: Path
) -> None:
    """A command through the pipeline sets last_used_at; a later executor start (gc_on_start) stops the session
    once it is idle past its limit, keeping its workspace."""
    settings = load_settings(overrides={"home": str(home)})
    async with open_executor(settings, pool="off") as ex:
        async with ex.attach_session("idl-cmd", create=True, idle_s=1.0) as session:
            assert session.info.last_used_at is None
            result = await session.bash("true")
            assert result.outcome == "completed"
        backend = ex.backend
        assert isinstance(backend, DockerBackend)
        used = await backend.find_session("idl-cmd")
    try:
        assert used.last_used_at is not None and used.last_used_at >= used.created_at
        with trio.fail_after(60):
            while True:
                async with open_executor(settings, pool="off") as ex:
                    info = await ex.backend.find_session("idl-cmd")
                if info.workspace_only:
                    break
                await trio.sleep(0.5)
    finally:
        async with open_executor(settings, pool="off") as ex:
            await ex.stop_session("idl-cmd")


async def test_an_idle_stop_leaves_a_session_whose_name_another_process_holds(backend_factory: Any, home: Path) -> None:
    """A process finding and reaching a session by its name holds the name's lock: the idle stop leaves it (it
    removed it between an attach's finding and reaching it, and the attach failed with 125), and takes it once
    the name is free."""
    profile = load_settings().profile()
    async with backend_factory() as backend:
        assert isinstance(backend, DockerBackend)
        info = await backend.open_session(profile=profile, profile_name="default", name="idl-held", idle_limit_s=1.0)
        try:
            await _wait_idle(backend, info.id, 1.0)
            async with name_lock(home, "idl-held"):
                held = await backend.stop_idle()
                while_held = await backend.find_session(info.id)
            freed = await backend.stop_idle()
        finally:
            await backend.stop_session(info.id)
    assert held.idle_stopped == () and while_held.state == "running"
    assert freed.idle_stopped == ("idl-held",)
