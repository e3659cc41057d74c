"""Engine, image and agent settings: each one's effect, its default, and its rejection at load."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
import requests.exceptions as rex
import trio

from executor.config import DockerSettings, Profile, load_settings
from executor.errors import AgentError, ConfigError, EngineUnavailable, ImageError
from executor.ids import new_session_id
from executor.sandbox.agent.client import open_agent_client
from executor.sandbox.docker import DockerEngine
from executor.sandbox.docker._engine import _run
from executor.sandbox.docker.hardening import AGENT_PATH, STATE_DIR, agent_command, container_kwargs
from executor.sandbox.docker.images import build_image

MIB = 1024 * 1024


@pytest.mark.parametrize(
    ("key", "default", "bad"),
    [
        ("docker.api_timeout_s", 60.0, 0),
        ("docker.max_threads", 8, 0),
        ("docker.retry_attempts", 3, 0),
        ("docker.stop_timeout_s", 2, -1),
        ("images.build_timeout_s", 1800.0, 0),
        ("agent.connect_timeout_s", 10.0, 0),
        ("agent.detached_buffer_bytes", 8 * MIB, 1024),
        ("agent.private_tmpfs_bytes", 64 * MIB, 1024),
        ("write.new_file_mode", 0o644, 0o10000),
        ("profiles.default.file_size", 1024 * MIB, "512k"),
        ("profiles.default.shm_size", 64 * MIB, 0),
    ],
)
def test_defaults_and_rejection_at_load(key: str, default: object, bad: object) -> None:
    """Each setting has its documented default, and an out-of-range value fails at load naming it."""
    settings = load_settings()
    node: Any = settings
    for part in key.split("."):
        node = node[part] if isinstance(node, dict) else getattr(node, part)
    assert node == default
    *path, leaf = key.split(".")
    override: dict[str, Any] = {leaf: bad}
    for part in reversed(path):
        override = {part: override}
    with pytest.raises(ConfigError, match=re.escape(key)):
        load_settings(overrides=override)


def test_ipc_mode_is_private_and_nothing_else() -> None:
    """ipc_mode defaults to private and host is refused."""
    assert Profile().ipc_mode == "private"
    with pytest.raises(ConfigError, match=r"profiles\.x\.ipc_mode"):
        load_settings(overrides={"profiles": {"x": {"ipc_mode": "host"}}})


def test_profile_and_agent_sizes_reach_the_container() -> None:
    """file_size, shm_size, private_tmpfs_bytes and detached_buffer_bytes shape the container's create call."""
    settings = load_settings(
        overrides={
            "profiles": {"default": {"file_size": "3m", "shm_size": "5m"}},
            "agent": {"private_tmpfs_bytes": "7m", "detached_buffer_bytes": "9m"},
        }
    )
    kwargs = container_kwargs(
        profile=settings.profile(),
        agent=settings.agent,
        image="executor/base:latest",
        session_id=new_session_id(),
        labels={},
        transport="exec",
        agent_host_path=None,
        run_host_dir=None,
    )
    fsize = [u for u in kwargs["ulimits"] if u["Name"] == "fsize"]
    assert fsize and fsize[0]["Soft"] == fsize[0]["Hard"] == 3 * MIB
    assert kwargs["shm_size"] == 5 * MIB
    assert kwargs["tmpfs"][STATE_DIR].startswith(f"size={7 * MIB},")
    command = agent_command(settings.profile(), settings.agent)
    assert command[0] == AGENT_PATH
    assert command[command.index("--detached-buffer") + 1] == str(9 * MIB)
    assert "--pass-env" not in command  # no operator env: nothing from the image passes beyond the allow-list


def test_profile_env_names_are_passed_to_the_agent() -> None:
    """The operator's profile env names reach the agent's allow-list (--pass-env); values travel in the env."""
    settings = load_settings(overrides={"profiles": {"default": {"env": {"B_SETTING": "1", "A_SETTING": "2"}}}})
    command = agent_command(settings.profile(), settings.agent)
    assert command[command.index("--pass-env") + 1] == "A_SETTING,B_SETTING"


@pytest.mark.docker
async def test_engine_timeout_and_thread_limit_follow_the_settings() -> None:
    """api_timeout_s is the client's timeout and max_threads bounds the worker threads."""
    engine = await DockerEngine.connect(DockerSettings(api_timeout_s=17, max_threads=3))
    try:
        assert engine.client.api.timeout == 17
        assert engine._limiter.total_tokens == 3
    finally:
        await engine.aclose()


async def test_retry_attempts_bound_idempotent_calls_only() -> None:
    """An idempotent call is tried retry_attempts times on a transient failure; any other call once."""
    calls = 0

    def flaky() -> str:
        nonlocal calls
        calls += 1
        raise rex.ConnectionError("engine went away")

    settings = DockerSettings(retry_attempts=4, retry_wait_s=0)
    limiter = trio.CapacityLimiter(1)
    with pytest.raises(EngineUnavailable):
        await _run(flaky, settings=settings, limiter=limiter, what="inspect", idempotent=True)
    assert calls == 4
    calls = 0
    with pytest.raises(EngineUnavailable):
        await _run(flaky, settings=settings, limiter=limiter, what="create", idempotent=False)
    assert calls == 1


async def test_connect_timeout_bounds_the_agent_handshake(autojump_clock: trio.testing.MockClock) -> None:
    """A peer that never answers the handshake fails after agent.connect_timeout_s (on trio's clock), clearly."""
    settings = load_settings(overrides={"agent": {"connect_timeout_s": 0.2}})
    left, _right = trio.testing.memory_stream_pair()
    started = trio.current_time()
    with pytest.raises(AgentError, match=r"did not answer the handshake within 0\.2s"):
        async with open_agent_client(left, handshake_timeout_s=settings.agent.connect_timeout_s):
            pass
    assert trio.current_time() - started == pytest.approx(0.2)


@pytest.mark.docker
async def test_stop_timeout_is_the_grace_a_stopping_container_gets(backend_factory: Any) -> None:
    """A session container that ignores SIGTERM is killed after docker.stop_timeout_s."""
    session_id = new_session_id()
    name = f"executor-{session_id}"
    await trio.run_process(
        [
            "docker", "run", "-d", "--name", name, "--network", "none",
            "--label", f"executor.session={session_id}", "--label", "executor.owner=t-settings",
            "--entrypoint", "sleep", "executor/base:latest", "infinity",
        ],
        capture_stdout=True,
    )  # fmt: skip
    try:
        async with backend_factory(docker={"stop_timeout_s": 2}) as backend:
            started = time.monotonic()
            with trio.fail_after(60):
                await backend.stop_session(session_id)
            elapsed = time.monotonic() - started
        assert elapsed >= 1.8  # the grace was given (a lower bound: load can only lengthen it)
    finally:
        with trio.CancelScope(shield=True):
            await trio.run_process(["docker", "rm", "-f", name], capture_stdout=True, capture_stderr=True, check=False)


@pytest.mark.docker
async def test_build_timeout_bounds_an_image_build(base_image: str, tmp_path: Path) -> None:
    """A build that runs past images.build_timeout_s fails with an error naming the setting."""
    folder = tmp_path / "images" / "slow"
    folder.mkdir(parents=True)
    # A fresh input every run (never skipped as up to date), and a step that fails by itself soon after the bound,
    # so the abandoned build leaves no image behind.
    (folder / "Dockerfile").write_text(f"FROM {base_image}\nRUN sleep 4 && false # {new_session_id()}\n")
    settings = load_settings(overrides={"images": {"images_dir": str(tmp_path / "images"), "build_timeout_s": 1}})
    engine = await DockerEngine.connect(settings.docker)
    try:
        with trio.fail_after(120), pytest.raises(ImageError, match=r"images\.build_timeout_s"):
            await build_image(engine, settings.images, "slow")
    finally:
        await engine.aclose()
