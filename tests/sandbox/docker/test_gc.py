"""gc reaps our leftovers and nothing else; a failed open leaves nothing behind."""

from __future__ import annotations

import fcntl
import os
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest
import trio

from executor.config import load_settings
from executor.errors import EngineError, SandboxLost, SessionNotFound
from executor.ids import new_session_id
from executor.sandbox.docker import DockerBackend
from executor.sandbox.docker.hardening import container_name, volume_name
from executor.sandbox.names import name_lock

pytestmark = pytest.mark.docker


async def test_gc_reaps_our_created_leftover_and_spares_the_rest(backend_factory: Any, base_image: str) -> None:
    """An old labelled Created container is removed; a fresh one and an unlabelled one are left alone."""
    old, fresh = new_session_id(), new_session_id()
    long_ago = (datetime.now(UTC) - timedelta(hours=1)).isoformat(timespec="seconds")
    async with backend_factory() as backend:
        assert isinstance(backend, DockerBackend)
        api = backend.engine.client.api

        def create(name: str, labels: dict[str, str]) -> str:
            return str(api.create_container(base_image, ["true"], name=name, labels=labels)["Id"])

        home = {"executor.home": backend.home_id}
        ours_old = await trio.to_thread.run_sync(
            create, container_name(old), {"executor.session": old, "executor.created": long_ago, **home}
        )
        ours_fresh = await trio.to_thread.run_sync(
            create,
            container_name(fresh),
            {"executor.session": fresh, "executor.created": datetime.now(UTC).isoformat(), **home},
        )
        foreign = await trio.to_thread.run_sync(create, f"not-ours-{old}", {"someone.else": "1"})
        try:
            with trio.fail_after(30):
                removed = (await backend.gc()).removed
            names = {c["Id"]: c["State"] for c in await trio.to_thread.run_sync(lambda: api.containers(all=True))}
        finally:
            for leftover in (ours_fresh, foreign):
                await trio.to_thread.run_sync(partial(api.remove_container, leftover, force=True))
    assert container_name(old) in removed
    assert ours_old not in names
    assert names[ours_fresh] == "created" and names[foreign] == "created"
    assert container_name(fresh) not in removed


async def test_failed_open_leaves_nothing_behind(backend_factory: Any) -> None:
    """When the container cannot start (a home tmpfs inside /proc) its container, volume and run folder go."""
    profile = load_settings().profile().model_copy(update={"home": "/proc/nope"})
    owner = "t-fail-" + new_session_id()
    async with backend_factory() as backend:
        with (
            trio.fail_after(60),
            pytest.raises(EngineError, match=r"^start s-[0-9a-f]{12}: engine said [45]00: .*proc/nope"),
        ):
            await backend.open_session(profile=profile, profile_name="default", owner=owner)
        assert await backend.list_sessions(owner=owner) == []
        assert isinstance(backend, DockerBackend)
        volumes = await trio.to_thread.run_sync(
            lambda: backend.engine.client.api.volumes(filters={"label": f"executor.owner={owner}"})
        )
        run_dirs = list((backend.settings.home / "run").glob("s-*"))
    assert not volumes.get("Volumes")
    assert run_dirs == []


async def _sh(backend: DockerBackend, container_id: str, script: str) -> str:
    def run() -> str:
        done = backend.engine.client.containers.get(container_id).exec_run(["bash", "-c", script], user="1000:1000")
        assert isinstance(done.output, bytes)
        return done.output.decode()

    return await trio.to_thread.run_sync(run)


async def _volume_exists(backend: DockerBackend, name: str) -> bool:
    answer = await trio.to_thread.run_sync(lambda: backend.engine.client.api.volumes(filters={"name": name}))
    return any(v["Name"] == name for v in answer.get("Volumes") or [])


async def test_gc_keeps_a_stopped_named_sessions_workspace_and_the_name_recreates_it(backend_factory: Any) -> None:
    """A named session whose container stopped (as after a dockerd restart) loses its container to gc but not its
    workspace; starting the name again recreates the container on the kept data; stopping the session deletes it.
    An unnamed session's stopped container and workspace both go."""
    profile = load_settings().profile()
    name = "t-gc-kept-" + new_session_id()[2:]
    with trio.fail_after(120):
        async with backend_factory() as backend:
            assert isinstance(backend, DockerBackend)
            api = backend.engine.client.api
            named = await backend.open_session(profile=profile, profile_name="default", name=name, owner="t-gc")
            unnamed = await backend.open_session(profile=profile, profile_name="default", owner="t-gc")
            try:
                await _sh(backend, named.container_id, "echo precious > /workspace/keep.txt")
                for info in (named, unnamed):
                    await trio.to_thread.run_sync(partial(api.stop, info.container_id, timeout=1))
                # While another process holds the name (it may be recreating that very session), gc leaves it.
                async with name_lock(backend.settings.home, name):
                    report = await backend.gc()
                assert container_name(named.id) not in report.removed
                assert (await backend.find_session(named.id)).container_id == named.container_id
                assert {container_name(unnamed.id), volume_name(unnamed.id)} <= set(report.removed)
                report = await backend.gc()
                assert container_name(named.id) in report.removed
                assert volume_name(named.id) in report.kept and volume_name(named.id) not in report.removed
                assert await _volume_exists(backend, volume_name(named.id))
                assert not await _volume_exists(backend, volume_name(unnamed.id))
                (listed,) = [s for s in await backend.list_sessions(owner="t-gc") if s.name == name]
                assert listed.workspace_only and listed.id == named.id and listed.state == "exited"
                with pytest.raises(SandboxLost, match=rf"^session {name} is not running .*recreates its container"):
                    await backend.connect(named.id)
                again = await backend.open_session(profile=profile, profile_name="default", name=name, owner="t-gc")
                assert again.id == named.id and not again.workspace_only and again.state == "running"
                assert (await _sh(backend, again.container_id, "cat /workspace/keep.txt")).strip() == "precious"
                assert (await backend.gc()).kept == ()
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(30):
                    await backend.stop_session(named.id)
                    await backend.stop_session(unnamed.id)
            assert not await _volume_exists(backend, volume_name(named.id))
            assert [s for s in await backend.list_sessions(owner="t-gc") if s.name == name] == []


async def test_each_home_sees_and_cleans_only_its_own_sessions(base_image: str, tmp_path: Any) -> None:
    """A session of home A is invisible to home B's list, find and gc (even once its container stopped), and
    visible with all_homes; the label is derived from the resolved home path."""
    from executor.sandbox.base import open_backend

    home_a, home_b = tmp_path / "a", tmp_path / "b"
    (tmp_path / "link").symlink_to(home_a, target_is_directory=True)
    home_a.mkdir()
    home_b.mkdir()
    profile = load_settings().profile()
    with trio.fail_after(120):
        async with (
            open_backend(load_settings(overrides={"home": str(home_a)})) as a,
            open_backend(load_settings(overrides={"home": str(home_b)})) as b,
            open_backend(load_settings(overrides={"home": str(tmp_path / "link")})) as a_again,
        ):
            assert isinstance(a, DockerBackend) and isinstance(a_again, DockerBackend)
            assert a.home_id == a_again.home_id
            info = await a.open_session(profile=profile, profile_name="default", owner="t-homes")
            try:
                assert info.labels["executor.home"] == a.home_id
                assert [s.id for s in await b.list_sessions(owner="t-homes")] == []
                assert [s.id for s in await b.list_sessions(owner="t-homes", all_homes=True)] == [info.id]
                with pytest.raises(SessionNotFound):
                    await b.find_session(info.id)
                assert (await b.find_session(info.id, all_homes=True)).id == info.id
                assert await a_again.find_session(info.id) == info
                assert isinstance(b, DockerBackend)
                await trio.to_thread.run_sync(partial(b.engine.client.api.stop, info.container_id, timeout=1))
                report = await b.gc()
                assert not any(info.id in item for item in report.removed + report.kept)
                assert (await a.find_session(info.id)).state == "exited"
                report = await a.gc()
                assert container_name(info.id) in report.removed
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(30):
                    await a.stop_session(info.id)


async def test_gc_removes_the_lease_files_of_pools_whose_process_is_gone(backend_factory: Any) -> None:
    """A warm pool's lease file outlives a killed service; gc removes it once nobody holds it, whether or not the
    pool's sessions are still there to name it, and leaves a held one alone."""
    async with backend_factory() as backend:
        assert isinstance(backend, DockerBackend)
        pools = backend.settings.home / "pools"
        pools.mkdir(parents=True, exist_ok=True)
        dead = pools / "0123456789abcdef.lock"
        dead.touch()
        held = pools / "fedcba9876543210.lock"
        held.touch()
        fd = os.open(held, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            await backend.gc()
            assert not dead.exists()
            assert held.exists()
        finally:
            os.close(fd)
