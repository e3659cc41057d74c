"""Fixtures for the agent tests: the ASan/UBSan agent run as a real process on the host (executor.testing.agent)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from executor.config import AgentSettings
from executor.sandbox.agent.build import ensure_agent
from executor.sandbox.agent.client import AgentClient, open_agent_unix
from executor.testing.agent import LiveAgent, start_agent, stop_agent


@pytest.fixture(scope="session")
def agent_build_root() -> Iterator[Path]:
    """A world-traversable build folder, so that uid 1000 can run the binary too."""
    root = Path(tempfile.mkdtemp(prefix="agent-build-", dir="/tmp"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def asan_agent(agent_build_root: Path) -> Path:
    """The agent built with AddressSanitizer and UndefinedBehaviorSanitizer."""
    return ensure_agent(AgentSettings(), agent_build_root, sanitize=True)


@pytest.fixture
def live_agent(asan_agent: Path) -> Iterator[LiveAgent]:
    """A running sanitizer-built agent; the test fails if it crashed or a sanitizer fired."""
    live = start_agent(asan_agent, env={"MY_API_KEY": "sk-host-secret", "GH_TOKEN": "ghp-host-secret"})
    try:
        yield live
    finally:
        code = stop_agent(live)
        log = live.stderr()
        shutil.rmtree(live.root, ignore_errors=True)
        assert "Sanitizer" not in log and "runtime error" not in log, log
        assert code == 0, f"agent exited {code}: {log}"


@pytest.fixture
async def client(live_agent: LiveAgent) -> AsyncIterator[AgentClient]:
    """A protocol client connected to ``live_agent``."""
    async with open_agent_unix(live_agent.socket, timeout_s=10) as agent_client:
        yield agent_client
