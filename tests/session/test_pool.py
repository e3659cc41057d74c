"""The warm pool on the real engine: claim and refill, identity, queueing, retirement, loss, backoff and cleanup."""

from __future__ import annotations

import io
import json
import secrets
import subprocess
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from executor.config import Settings, load_settings
from executor.errors import ConfigError, EngineError, ImageError
from executor.sandbox.base import Backend, GcReport, open_backend
from executor.sandbox.docker import DockerBackend
from executor.session import Executor, open_executor
from executor.session.pool import PoolStats

pytestmark = pytest.mark.docker

_REPO = Path(__file__).resolve().parents[2]


def _settings(
    home: Path, agent_dir: Path, name: str, *, pool: dict[str, Any], fields: dict[str, Any] | None = None, **extra: Any
) -> Settings:
    return load_settings(
        overrides={
            "home": str(home),
            "default_profile": name,
            "profiles": {name: {"pool": pool, **(fields or {})}},
            "agent": {"build_dir": str(agent_dir), **extra.pop("agent", {})},
            **extra,
        }
    )


def _profile_name() -> str:
    return "p14-" + secrets.token_hex(4)


async def _until(check: Callable[[], bool], *, within: float = 90.0) -> None:
    with trio.fail_after(within):
        while True:
            if check():
                return
            await trio.sleep(0.05)


def _stats(executor: Executor) -> PoolStats:
    (stats,) = executor.pool_stats()
    return stats


async def _containers(backend: Any, profile: str) -> list[dict[str, Any]]:
    """Every container (any state) labelled with ``profile``, counted straight from the engine."""
    assert isinstance(backend, DockerBackend)
    api = backend.engine.client.api
    rows: list[dict[str, Any]] = await trio.to_thread.run_sync(
        lambda: api.containers(all=True, filters={"label": f"executor.profile={profile}"})
    )
    return rows


async def test_claim_gives_identity_refills_and_never_reuses(
    home: Path, session_agent_dir: Path, base_image: str
) -> None:
    """A claimed session is complete, owned and journaled as pooled; the pool refills; nothing is handed out twice."""
    profile = _profile_name()
    settings = _settings(home, session_agent_dir, profile, pool={"size": 2, "refill_delay_s": 0})
    seen: list[str] = []
    async with open_executor(settings) as executor:
        await _until(lambda: _stats(executor).ready == 2)
        with trio.fail_after(60):
            async with executor.open_session(owner="owner-a") as session:
                seen.append(session.id)
                assert session.info.pooled and session.owner == "owner-a" and session.name is None
                listed = await executor.list_sessions(owner="owner-a")
                assert [(s.id, s.owner, s.pooled) for s in listed] == [(session.id, "owner-a", True)]
                assert isinstance(executor.backend, DockerBackend)
                assert listed[0].labels["executor.home"] == executor.backend.home_id  # this home's, like cold ones
                assert await executor.list_sessions(owner="owner-b") == []
                result = await session.bash("ls -A /workspace; echo done")
                assert result.outcome == "completed" and result.stdout == b"done\n"
                opened = json.loads(session.journal_path.read_text().splitlines()[0])
                assert opened["type"] == "session_opened"
                assert opened["pool_created_at"] is not None and opened["pool_created_at"] <= opened["ts"]
                await _until(lambda: _stats(executor).ready == 2)  # refilled while the claimed one runs
            assert await executor.backend.status(seen[0]) == "missing"
            async with executor.open_session() as second:
                seen.append(second.id)
                assert second.info.pooled
            async with executor.open_session(name="p14pool-" + secrets.token_hex(3)) as named:
                assert not named.info.pooled  # names are on the container's labels: named sessions open cold
            async with executor.open_session(image=base_image) as other:
                assert not other.info.pooled  # another image than the pool's: cold
        assert len(set(seen)) == 2
        assert _stats(executor).claimed == 2
        backend = executor.backend
        rows = await _containers(backend, profile)
        assert not {row["Labels"]["executor.session"] for row in rows} & set(seen)
    async with open_executor(settings.model_copy(update={"profiles": {}, "default_profile": "default"})) as after:
        assert await _containers(after.backend, profile) == []  # shutting the executor down removed the pool


async def test_concurrent_opens_queue_with_bounded_creation(home: Path, session_agent_dir: Path) -> None:
    """A pool of three fills two at a time; six opens at once all succeed with at most two creations at once."""
    profile = _profile_name()
    settings = _settings(home, session_agent_dir, profile, pool={"size": 3, "max_creating": 2})
    outcomes: list[str] = []
    async with open_executor(settings) as executor:
        await _until(lambda: _stats(executor).ready == 3)

        async def one() -> None:
            async with executor.open_session() as session:
                outcomes.append((await session.bash("true")).outcome)

        with trio.fail_after(240):
            async with trio.open_nursery() as nursery:
                for _ in range(6):
                    nursery.start_soon(one)
        stats = _stats(executor)
        backend = executor.backend
    assert outcomes == ["completed"] * 6
    assert stats.claimed == 6 and 1 <= stats.max_creating_seen <= 2
    assert await _wait_gone(backend, profile, settings) == []


async def _wait_gone(backend: Any, profile: str, settings: Settings) -> list[dict[str, Any]]:
    async with open_executor(settings.model_copy(update={"profiles": {}, "default_profile": "default"})) as after:
        return await _containers(after.backend, profile)


async def test_refill_waits_for_the_delay_but_never_delays_a_queued_open(home: Path, session_agent_dir: Path) -> None:
    """After a claim the replacement waits refill_delay_s, but an open waiting in line is served at once."""
    profile = _profile_name()
    settings = _settings(home, session_agent_dir, profile, pool={"size": 1, "refill_delay_s": 60})
    async with open_executor(settings) as executor:
        await _until(lambda: _stats(executor).ready == 1)
        with trio.fail_after(90):
            async with executor.open_session() as first, executor.open_session() as second:
                assert first.info.pooled and second.info.pooled
                stats = _stats(executor)
                assert (stats.ready, stats.creating, stats.created) == (0, 0, 2)


async def test_service_size_is_used_by_the_service_mode(home: Path, session_agent_dir: Path) -> None:
    """pool='service' keeps pool.service_size sessions; the in-process default (pool.size 0) keeps none."""
    profile = _profile_name()
    settings = _settings(home, session_agent_dir, profile, pool={"service_size": 1})
    async with open_executor(settings) as executor:
        assert executor.pool_stats() == []
    async with open_executor(settings, pool="service") as service:
        stats = {item.profile: item for item in service.pool_stats()}
        assert (stats[profile].size, stats["default"].size) == (1, 2)  # the default profile's own service_size
    async with open_executor(settings, pool="off") as off:
        assert off.pool_stats() == []


async def test_idle_and_lost_sessions_are_replaced(home: Path, session_agent_dir: Path) -> None:
    """An unclaimed session older than max_idle_s is removed and replaced; one removed by `docker rm -f` too."""
    profile = _profile_name()
    settings = _settings(home, session_agent_dir, profile, pool={"size": 1, "max_idle_s": 3})
    async with open_executor(settings) as executor:
        backend = executor.backend
        assert isinstance(backend, DockerBackend)
        await _until(lambda: _stats(executor).ready == 1)
        (first,) = [row["Id"] for row in await _containers(backend, profile)]
        await _until(lambda: _stats(executor).retired >= 1 and _stats(executor).ready == 1)
        with trio.fail_after(60):
            while True:
                if first not in {row["Id"] for row in await _containers(backend, profile)}:
                    break
                await trio.sleep(0.1)
    settings = _settings(home, session_agent_dir, profile, pool={"size": 1})
    async with open_executor(settings) as executor:
        backend = executor.backend
        assert isinstance(backend, DockerBackend)
        await _until(lambda: _stats(executor).ready == 1)
        rows = await _containers(backend, profile)
        api = backend.engine.client.api
        for row in rows:
            await trio.to_thread.run_sync(partial(api.remove_container, row["Id"], force=True))
        await _until(lambda: _stats(executor).retired >= 1 and _stats(executor).ready == 1)
        now = {row["Id"] for row in await _containers(backend, profile) if row["State"] == "running"}
        assert now and not now & {row["Id"] for row in rows}
        async with executor.open_session() as session:
            assert (await session.bash("true")).outcome == "completed"


async def test_stale_image_sessions_are_retired(home: Path, session_agent_dir: Path, base_image: str) -> None:
    """A session waiting in the pool when its image is rebuilt is retired; the claimed one runs the new build."""
    profile = _profile_name()
    repository = f"p14pool-stale-{secrets.token_hex(4)}"
    reference = f"{repository}:latest"
    settings = _settings(
        home, session_agent_dir, profile, pool={"size": 1, "image_check_s": 0.2}, fields={"image": reference}
    )
    async with open_backend(settings) as plain:
        assert isinstance(plain, DockerBackend)
        await trio.to_thread.run_sync(lambda: plain.engine.client.api.tag(base_image, repository, "latest"))
    async with open_executor(settings) as executor:
        backend = executor.backend
        assert isinstance(backend, DockerBackend)
        api = backend.engine.client.api
        try:
            await _until(lambda: _stats(executor).ready == 1)
            old_id = await backend.image_id(reference)
            dockerfile = io.BytesIO(f"FROM {old_id}\nLABEL p14pool.rebuild={secrets.token_hex(4)}\n".encode())

            def rebuild() -> None:
                for _ in api.build(fileobj=dockerfile, tag=reference, rm=True, network_mode="none"):
                    pass

            await trio.to_thread.run_sync(rebuild)
            new_id = await backend.image_id(reference)
            assert new_id != old_id
            await _until(lambda: _stats(executor).retired >= 1 and _stats(executor).ready == 1)
            with trio.fail_after(60):
                async with executor.open_session() as session:
                    assert session.info.pooled
                    inspected = await trio.to_thread.run_sync(lambda: api.inspect_container(session.info.container_id))
                    assert inspected["Image"] == new_id
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(lambda: api.remove_image(reference, force=True))


async def test_failing_engine_backs_off_and_fails_the_waiting_open(home: Path, session_agent_dir: Path) -> None:
    """Creations that fail are retried after a growing pause, and an open waiting in line gets the error."""
    profile = _profile_name()
    missing = f"p14pool-missing-{secrets.token_hex(4)}:latest"
    fast = _settings(
        home,
        session_agent_dir,
        profile,
        pool={"size": 1, "backoff_initial_s": 0.05, "backoff_max_s": 0.1},
        fields={"image": missing},
        images={"try_pull": False},
    )
    async with open_executor(fast) as executor:
        with trio.fail_after(60), pytest.raises(ImageError):
            async with executor.open_session():
                pass
        await _until(lambda: _stats(executor).failures >= 3)
    slow = _settings(
        home,
        session_agent_dir,
        profile,
        pool={"size": 1, "backoff_initial_s": 600, "backoff_max_s": 600},
        fields={"image": missing},
        images={"try_pull": False},
    )
    async with open_executor(slow) as executor:
        await _until(lambda: _stats(executor).failures >= 1)
        await trio.sleep(1.5)  # a negative: nothing to poll for
        assert _stats(executor).failures == 1


def _start_child(home: Path, profile: str, orphan_exit_s: float) -> subprocess.Popen[str]:
    return _spawn_child(home, profile, orphan_exit_s, "pool")[0]


def _spawn_child(home: Path, profile: str, orphan_exit_s: float, mode: str) -> tuple[subprocess.Popen[str], str]:
    """The child of ``_pool_child`` once ready, and what it said after ``ready`` (its session's id)."""
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.session._pool_child", str(home), profile, str(orphan_exit_s), mode],
        cwd=_REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    word, _, rest = child.stdout.readline().partition(" ")
    assert word.strip() == "ready", (word, rest)
    return child, rest.strip()


async def _gc(backend: Backend) -> GcReport:
    """``backend.gc()``; once more when another remover on this shared engine held a volume for a moment."""
    try:
        return await backend.gc()
    except EngineError as exc:
        if "in use" not in str(exc):
            raise
        await trio.sleep(1.0)
        return await backend.gc()


def _kill(child: subprocess.Popen[str]) -> None:
    """SIGKILL: the child's own clean-up never runs."""
    child.kill()
    child.wait(timeout=30)
    if child.stdout is not None:
        child.stdout.close()


async def test_killed_process_pool_ends_itself_past_the_orphan_limit(home: Path, session_agent_dir: Path) -> None:
    """A SIGKILLed process's unclaimed pooled container exits by itself after agent.orphan_exit_s."""
    profile = _profile_name()
    child = await trio.to_thread.run_sync(_start_child, home, profile, 2.0)
    _kill(child)
    settings = _settings(home, session_agent_dir, "default", pool={}, docker={"gc_on_start": False})
    async with open_executor(settings) as executor:
        rows = await _containers(executor.backend, profile)
        assert rows, "the killed process left its pooled container"
        with trio.fail_after(60):
            while True:
                if all(row["State"] != "running" for row in await _containers(executor.backend, profile)):
                    break
                await trio.sleep(0.2)
        report = await _gc(executor.backend)
        assert {f"executor-{row['Labels']['executor.session']}" for row in rows} <= set(report.removed)
        assert await _containers(executor.backend, profile) == []


async def test_gc_reaps_a_dead_process_pool_and_spares_a_live_one(home: Path, session_agent_dir: Path) -> None:
    """gc leaves a live process's pooled containers alone; once it is killed, start-up clean-up reaps them."""
    profile = _profile_name()
    child = await trio.to_thread.run_sync(_start_child, home, profile, 600.0)
    try:
        settings = _settings(home, session_agent_dir, "default", pool={}, docker={"gc_on_start": False})
        async with open_executor(settings) as executor:
            rows = await _containers(executor.backend, profile)
            assert [row["State"] for row in rows] == ["running"]
            await _gc(executor.backend)
            assert [row["Id"] for row in await _containers(executor.backend, profile)] == [rows[0]["Id"]]
    finally:
        _kill(child)
    settings = _settings(home, session_agent_dir, "default", pool={}, docker={"gc_on_start": True})
    async with open_executor(settings) as executor:
        assert await _containers(executor.backend, profile) == []
    assert list((home / "pools").glob("*.lock")) == []


@pytest.mark.parametrize(
    ("mode", "reaped"), [("held", True), ("claimed", True), ("kept", False), ("claimed-kept", False)]
)
async def test_gc_reaps_the_unnamed_session_of_a_killed_process_unless_it_was_kept(
    home: Path, session_agent_dir: Path, mode: str, reaped: bool
) -> None:
    """An unnamed session opened for a call (cold or claimed from a pool) whose process is SIGKILLed is reaped by the
    next gc, not left running until agent.orphan_exit_s; while its process lives, gc leaves it alone. One kept on
    purpose (``keep=True``, as ``session start`` makes it) outlives its process."""
    profile = _profile_name()
    child, session_id = await trio.to_thread.run_sync(_spawn_child, home, profile, 600.0, mode)
    settings = _settings(home, session_agent_dir, "default", pool={}, docker={"gc_on_start": False})
    async with open_executor(settings) as executor:
        try:
            assert (await executor.backend.find_session(session_id)).state == "running"
            await _gc(executor.backend)
            assert (await executor.backend.find_session(session_id)).state == "running"
        finally:
            _kill(child)
        try:
            await _gc(executor.backend)
            ids = {row["Labels"]["executor.session"] for row in await _containers(executor.backend, profile)}
            assert (session_id not in ids) is reaped
            if reaped:
                assert ids == set()  # and the pool's unclaimed one with it
            else:
                assert (await executor.backend.find_session(session_id)).state == "running"
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(60):
                for row in await _containers(executor.backend, profile):
                    await executor.backend.stop_session(row["Labels"]["executor.session"])


_CACHE_RULE = (
    '[[command]]\nname = "{name}"\ndecision = "deny"\njustification = "j"\nprefix = ["{word}"]\n'
    'examples.match = ["{word} x"]\n'
)


async def test_policy_cache_follows_every_file_of_an_extended_policy(home: Path, tmp_path: Path) -> None:
    """An unchanged policy is loaded once; editing a file it extends, or one found first on the search path, reloads."""
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "p14base.toml").write_text(_CACHE_RULE.format(name="a", word="aaa"))
    (folder / "p14child.toml").write_text('extends = "p14base"\n' + _CACHE_RULE.format(name="c", word="ccc"))
    settings = load_settings(
        overrides={
            "home": str(home),
            "gate": {"policy_dir": str(folder)},
            "profiles": {"p14cache": {"policy": "p14child"}},
            "docker": {"gc_on_start": False},
        }
    )
    profile = settings.profile("p14cache")
    async with open_executor(settings) as executor:
        first = executor._policy(profile)
        assert executor._policy(profile) is first
        (folder / "p14base.toml").write_text(_CACHE_RULE.format(name="b", word="bbb"))
        second = executor._policy(profile)
        assert second is not first and [r.name for r in second.command_rules] == ["b", "c"]
        assert executor._policy(profile) is second
        (folder / "p14base.toml").unlink()
        with pytest.raises(ConfigError, match="p14base"):
            executor._policy(profile)
        shipped = executor._policy(settings.profile("default"))
        assert executor._policy(settings.profile("default")) is shipped
        (folder / "default.toml").write_text(_CACHE_RULE.format(name="d", word="ddd"))  # now found first
        shadowed = executor._policy(settings.profile("default"))
        assert [r.name for r in shadowed.command_rules] == ["d"]
