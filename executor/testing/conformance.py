"""The conformance suite every backend must pass (Docker today, Kubernetes later).

Subclass :class:`BackendConformance` in a test module and provide three fixtures: ``backend`` (an open
:class:`~executor.sandbox.base.Backend`), ``profile`` (a :class:`~executor.config.Profile` it can run) and
``owner`` (a string unique to the test run, so that concurrent suites on one engine never see each other's sessions),
and implement :meth:`BackendConformance.lose` (make a session's container vanish behind the backend's back).
Set ``pooled = True`` on a subclass to run the unnamed-session tests on warm-pool sessions (opened with
``pooled=True``, then claimed)::

    class TestDocker(BackendConformance):
        @pytest.fixture
        async def backend(self) -> AsyncIterator[Backend]: ...

Each test is bounded in time and stops what it opened, also when it fails.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from executor.config import Profile
from executor.errors import SandboxLost, SessionNotFound
from executor.ids import new_session_id
from executor.sandbox.base import Backend, SessionInfo

__all__ = ["BackendConformance"]

_BOUND_S = 60.0


async def _open(
    backend: Backend, profile: Profile, owner: str, name: str | None = None, *, pooled: bool = False
) -> SessionInfo:
    if pooled and name is None:
        info = await backend.open_session(profile=profile, profile_name="conformance", pooled=True)
        try:
            await backend.claim_session(info.id, owner=owner)
        except BaseException:
            with trio.CancelScope(shield=True), trio.move_on_after(30):
                await backend.stop_session(info.id)
            raise
        return info.model_copy(update={"owner": owner, "pooled": True})
    return await backend.open_session(profile=profile, profile_name="conformance", name=name, owner=owner)


@asynccontextmanager
async def _session(
    backend: Backend, profile: Profile, owner: str, name: str | None = None, *, pooled: bool = False
) -> AsyncIterator[SessionInfo]:
    info = await _open(backend, profile, owner, name, pooled=pooled)
    try:
        yield info
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(30):
            await backend.stop_session(info.id)


class BackendConformance(ABC):
    """Behaviour every backend promises; see the module docstring for how to run it."""

    pooled = False
    """Run the unnamed-session tests on warm-pool sessions (opened with ``pooled=True``, then claimed)."""

    @abstractmethod
    async def lose(self, backend: Backend, info: SessionInfo) -> None:
        """Remove the session's container directly, bypassing ``backend`` (a crash, an operator's ``rm -f``)."""

    async def test_open_gives_a_running_session_listed_and_found(
        self, backend: Backend, profile: Profile, owner: str
    ) -> None:
        """An opened session runs, is listed for its owner, and is found by id and by name."""
        name = None if self.pooled else "conf-" + new_session_id()[2:]
        with trio.fail_after(_BOUND_S):
            async with _session(backend, profile, owner, name=name, pooled=self.pooled) as info:
                assert info.state == "running" and info.owner == owner and info.name == name
                assert info.profile == "conformance"
                assert await backend.status(info.id) == "running"
                listed = await backend.list_sessions(owner=owner)
                assert [(s.id, s.owner, s.pooled) for s in listed] == [(info.id, owner, self.pooled)]
                assert (await backend.find_session(info.id)).id == info.id
                if name is not None:
                    assert (await backend.find_session(name)).id == info.id

    async def test_connect_gives_a_stream_to_the_agent(self, backend: Backend, profile: Profile, owner: str) -> None:
        """Two byte streams to the agent can be open at once and closed independently."""
        with trio.fail_after(_BOUND_S):
            async with _session(backend, profile, owner, pooled=self.pooled) as info:
                first = await backend.connect(info.id)
                second = await backend.connect(info.id)
                await first.aclose()
                await second.aclose()

    async def test_stop_is_idempotent_and_leaves_it_missing(
        self, backend: Backend, profile: Profile, owner: str
    ) -> None:
        """A stopped session is missing, unlisted and unknown; stopping it again is no error."""
        with trio.fail_after(_BOUND_S):
            info = await _open(backend, profile, owner, pooled=self.pooled)
            await backend.stop_session(info.id)
            await backend.stop_session(info.id)
            assert await backend.status(info.id) == "missing"
            assert await backend.list_sessions(owner=owner) == []
            with pytest.raises(SessionNotFound):
                await backend.find_session(info.id)

    async def test_lost_container_is_missing_and_refuses_connections(
        self, backend: Backend, profile: Profile, owner: str
    ) -> None:
        """A container removed behind the backend's back reads as missing, and connect fails with a typed error."""
        with trio.fail_after(_BOUND_S):
            async with _session(backend, profile, owner, pooled=self.pooled) as info:
                await self.lose(backend, info)
                assert await backend.status(info.id) == "missing"
                with pytest.raises((SessionNotFound, SandboxLost)):
                    await backend.connect(info.id)

    async def test_gc_spares_running_sessions(self, backend: Backend, profile: Profile, owner: str) -> None:
        """gc never removes a running session."""
        with trio.fail_after(_BOUND_S):
            async with _session(backend, profile, owner, pooled=self.pooled) as info:
                report = await backend.gc()
                assert not any(info.id in item for item in report.removed + report.kept)
                assert await backend.status(info.id) == "running"

    async def test_unknown_and_malformed_ids_are_not_found(self, backend: Backend) -> None:
        """Unknown and malformed ids raise SessionNotFound; status of an unknown well-formed id is missing."""
        with trio.fail_after(_BOUND_S):
            unknown = new_session_id()
            assert await backend.status(unknown) == "missing"
            for bad in (unknown, "../etc", "s-XYZ"):
                with pytest.raises(SessionNotFound):
                    await backend.find_session(bad)
            with pytest.raises(SessionNotFound):
                await backend.status("../etc")
            with pytest.raises(SessionNotFound):
                await backend.stop_session("s-../../x")

    async def test_duplicate_live_name_is_refused(self, backend: Backend, profile: Profile, owner: str) -> None:
        """A second live session cannot take a name already in use."""
        name = "dup-" + new_session_id()[2:]
        with trio.fail_after(_BOUND_S):
            async with _session(backend, profile, owner, name=name):
                with pytest.raises(ValueError, match="is used by"):
                    await backend.open_session(profile=profile, profile_name="conformance", name=name, owner=owner)
                assert len(await backend.list_sessions(owner=owner)) == 1

    async def test_pooled_session_is_hidden_until_claimed_once(
        self, backend: Backend, profile: Profile, owner: str
    ) -> None:
        """A pooled session is reachable but unlisted and unfound until claimed; it is claimed once, then owned."""
        with trio.fail_after(_BOUND_S):
            info = await backend.open_session(profile=profile, profile_name="conformance", pooled=True)
            try:
                assert info.owner is None and info.name is None
                assert await backend.status(info.id) == "running"
                stream = await backend.connect(info.id)
                await stream.aclose()
                assert info.id not in {s.id for s in await backend.list_sessions()}
                with pytest.raises(SessionNotFound):
                    await backend.find_session(info.id)
                report = await backend.gc()
                assert not any(info.id in item for item in report.removed + report.kept)
                await backend.claim_session(info.id, owner=owner)
                with pytest.raises(ValueError, match="already claimed"):
                    await backend.claim_session(info.id, owner="someone-else")
                found = await backend.find_session(info.id)
                assert (found.owner, found.pooled) == (owner, True)
                assert [s.id for s in await backend.list_sessions(owner=owner)] == [info.id]
                with pytest.raises(ValueError, match="no name or owner"):
                    await backend.open_session(profile=profile, profile_name="conformance", owner=owner, pooled=True)
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(30):
                    await backend.stop_session(info.id)
