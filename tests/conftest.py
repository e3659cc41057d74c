"""Fixtures shared by the whole suite."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from executor.config import Settings, load_settings
from executor.testing.runtimes import INSTALL_RUNSC, MISSING_RUNTIME, RUNTIMES, require_runtime

# Every private home a test makes (and every CLI process it starts in one) would compile the agent again: about 2 s
# of CPU each, several minutes a run. They share one build folder, keyed like every build by the sources' hash (a
# changed source builds anew; builds are atomic renames, so parallel workers can share it). A test that sets
# agent.build_dir itself still uses its own; tests of the default folder clear this variable.
os.environ.setdefault("EXECUTOR_AGENT__BUILD_DIR", str(Path(__file__).resolve().parent.parent / "build" / "test-agent"))


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A private $EXECUTOR_HOME for one test."""
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def settings(home: Path) -> Settings:
    """Default settings rooted in a private home."""
    return load_settings(overrides={"home": str(home)})


# --- The docker marker: every test that needs the engine carries it, so `pytest -m "not docker"` runs without one --

# ``either_home`` is one: its thin variant serves from the engine.
_ENGINE_FIXTURES = frozenset({"base_image", "backend_factory", "engine_runtimes", "runtime", "either_home"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that uses an engine fixture without the ``docker`` marker is a collection error, not a later surprise."""
    unmarked = [
        item.nodeid
        for item in items
        if _ENGINE_FIXTURES & set(getattr(item, "fixturenames", ())) and item.get_closest_marker("docker") is None
    ]
    if unmarked:
        raise pytest.UsageError("tests using the Docker engine need @pytest.mark.docker: " + ", ".join(unmarked))


@pytest.hookimpl(trylast=True)  # after the slowest tests, just above the short summary and the counts
def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The run's last lines say how many tests a missing runtime skipped, and the command that stops it."""
    skipped = terminalreporter.stats.get("skipped", [])
    missing = [report for report in skipped if MISSING_RUNTIME in str(getattr(report, "longrepr", ""))]
    if missing:
        terminalreporter.write_line(
            f"{len(missing)} tests skipped because the Docker engine has no gVisor runtime (runsc): "
            f"run `{INSTALL_RUNSC}` (as root) to run them too",
            yellow=True,
        )


# --- Docker fixtures (sandbox): the session image is built once per machine (its tag persists) ---------------


@pytest.fixture(scope="session")
def base_image() -> str:
    """The ``base`` session image, built (or found up to date) once per test run; its tag."""
    import trio

    from executor.sandbox.docker import DockerEngine, ensure_image

    async def build() -> str:
        defaults = load_settings()
        engine = await DockerEngine.connect(defaults.docker)
        try:
            return await ensure_image(engine, defaults.images, "base")
        finally:
            await engine.aclose()

    return trio.run(build)


@pytest.fixture
def backend_factory(base_image: str, home: Path) -> Any:
    """Open a Docker backend on settings rooted in a private home, with optional overrides.

    Use ``async with backend_factory(agent={"transport": "exec"}) as backend: ...``.
    """
    from contextlib import AbstractAsyncContextManager

    from executor.sandbox.base import Backend, open_backend

    def make(**overrides: Any) -> AbstractAsyncContextManager[Backend]:
        return open_backend(load_settings(overrides={"home": str(home), **overrides}))

    return make


# --- OCI runtimes: the Docker tests that matter run under runc and under gVisor (runsc) -------------------------


@pytest.fixture(scope="session")
def engine_runtimes() -> frozenset[str]:
    """The runtimes the engine has registered (``docker info``), read once per test run."""
    import docker

    client = docker.DockerClient(base_url=load_settings().docker.base_url)
    try:
        return frozenset((client.info().get("Runtimes") or {}).keys())
    finally:
        client.close()


@pytest.fixture(params=RUNTIMES)
def runtime(request: pytest.FixtureRequest, engine_runtimes: frozenset[str]) -> str:
    """Each OCI runtime in turn (runsc skipped where the engine lacks it, outside CI)."""
    name = str(request.param)
    require_runtime(name, engine_runtimes)
    return name
