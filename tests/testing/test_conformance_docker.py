"""The Docker backend passes the backend conformance suite (both transports, runc and runsc, pooled) on the engine."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

import executor.testing
from executor.config import Profile, load_settings
from executor.ids import new_session_id
from executor.sandbox.base import Backend, SessionInfo, open_backend
from executor.sandbox.docker import DockerBackend
from executor.testing import BackendConformance
from executor.testing.runtimes import require_runtime

pytestmark = pytest.mark.docker


class _Docker(BackendConformance):
    async def lose(self, backend: Backend, info: SessionInfo) -> None:
        assert isinstance(backend, DockerBackend)
        api = backend.engine.client.api
        await trio.to_thread.run_sync(lambda: api.remove_container(info.container_id, force=True))

    @pytest.fixture
    def profile(self) -> Profile:
        return load_settings().profile()

    @pytest.fixture
    def owner(self) -> str:
        return "conformance-" + new_session_id()


class TestDockerSocket(_Docker):
    @pytest.fixture
    async def backend(self, base_image: str, home: Path) -> AsyncIterator[Backend]:
        async with open_backend(load_settings(overrides={"home": str(home)})) as backend:
            yield backend


class TestDockerExec(_Docker):
    @pytest.fixture
    async def backend(self, base_image: str, home: Path) -> AsyncIterator[Backend]:
        settings = load_settings(overrides={"home": str(home), "agent": {"transport": "exec"}})
        async with open_backend(settings) as backend:
            yield backend


class TestDockerRunsc(_Docker):
    """The same suite under gVisor: the profile asks for runsc and ``auto`` picks the exec bridge."""

    @pytest.fixture
    def profile(self, engine_runtimes: frozenset[str]) -> Profile:
        require_runtime("runsc", engine_runtimes)
        return load_settings().profile("untrusted")

    @pytest.fixture
    async def backend(self, base_image: str, home: Path) -> AsyncIterator[Backend]:
        async with open_backend(load_settings(overrides={"home": str(home)})) as backend:
            yield backend


class TestDockerPooled(_Docker):
    pooled = True

    @pytest.fixture
    async def backend(self, base_image: str, home: Path) -> AsyncIterator[Backend]:
        async with open_backend(load_settings(overrides={"home": str(home)})) as backend:
            yield backend


def test_testing_exports_exist() -> None:
    """Every name in executor.testing.__all__ is defined."""
    for name in executor.testing.__all__:
        assert getattr(executor.testing, name) is not None
