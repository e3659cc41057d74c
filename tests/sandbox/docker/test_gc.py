"""gc reaps our leftovers and nothing else; a failed open leaves nothing behind."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest
import trio

from executor.config import load_settings
from executor.errors import EngineError
from executor.ids import new_session_id
from executor.sandbox.docker import DockerBackend
from executor.sandbox.docker.hardening import container_name

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

        ours_old = await trio.to_thread.run_sync(
            create, container_name(old), {"executor.session": old, "executor.created": long_ago}
        )
        ours_fresh = await trio.to_thread.run_sync(
            create,
            container_name(fresh),
            {"executor.session": fresh, "executor.created": datetime.now(UTC).isoformat()},
        )
        foreign = await trio.to_thread.run_sync(create, f"not-ours-{old}", {"someone.else": "1"})
        try:
            with trio.fail_after(30):
                removed = await backend.gc()
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
