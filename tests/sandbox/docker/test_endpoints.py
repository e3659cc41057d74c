"""The engine is found where the Docker CLI would find it: DOCKER_HOST, a Docker context, a remote (tcp://) engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from executor.config import load_settings
from executor.session import open_executor
from executor.testing.forward import tcp_to_unix

pytestmark = pytest.mark.docker

LOCAL = "unix:///var/run/docker.sock"


def _executor(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("EXECUTOR_", "DOCKER_"))}
    return subprocess.run(
        [sys.executable, "-m", "executor.cli", *args],
        env={**clean, "EXECUTOR_HOME": str(home), **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _docker(config: Path, *args: str) -> None:
    done = subprocess.run(["docker", "--config", str(config), *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def _base_url(home: Path, **env: str) -> str:
    shown = _executor(home, "--json", "config", "show", **env)
    assert shown.returncode == 0, shown.stderr
    return str(json.loads(shown.stdout)["settings"]["docker"]["base_url"])


def test_docker_host_and_docker_contexts_choose_the_engine(base_image: str, home: Path, tmp_path: Path) -> None:
    """DOCKER_HOST is used; without it the current context (made by `docker context create` / `use`, in a private
    DOCKER_CONFIG) or DOCKER_CONTEXT is; an engine that does not answer there is exit 125 naming the address."""
    config = tmp_path / "dockercfg"
    config.mkdir()
    _docker(config, "context", "create", "exec-local", "--docker", f"host={LOCAL}")
    _docker(config, "context", "create", "exec-nowhere", "--docker", f"host=unix://{tmp_path}/none.sock")
    _docker(config, "context", "use", "exec-local")

    assert _base_url(home, DOCKER_HOST=LOCAL) == LOCAL
    assert _executor(home, "session", "gc", DOCKER_HOST=LOCAL).returncode == 0
    assert _base_url(home, DOCKER_CONFIG=str(config)) == LOCAL
    assert _executor(home, "session", "gc", DOCKER_CONFIG=str(config)).returncode == 0

    nowhere = _executor(home, "session", "ls", DOCKER_CONFIG=str(config), DOCKER_CONTEXT="exec-nowhere")
    assert nowhere.returncode == 125 and "Traceback" not in nowhere.stderr
    assert nowhere.stderr.startswith(f"error: no Docker engine answers at unix://{tmp_path}/none.sock")
    host_wins = _executor(home, "session", "ls", DOCKER_CONFIG=str(config), DOCKER_HOST=LOCAL)
    assert host_wins.returncode == 0, host_wins.stderr

    bogus = _executor(home, "session", "ls", DOCKER_HOST="tcp://127.0.0.1:9")
    assert bogus.returncode == 125 and "Traceback" not in bogus.stderr
    assert bogus.stderr.startswith("error: no Docker engine answers at tcp://127.0.0.1:9 ")
    assert "DOCKER_HOST" in bogus.stderr
    as_json = json.loads(_executor(home, "--json", "session", "ls", DOCKER_HOST="tcp://127.0.0.1:9").stdout)
    assert as_json["exit_code"] == 125 and "tcp://127.0.0.1:9" in as_json["error"]


async def test_a_tcp_engine_reaches_its_agents_through_the_exec_bridge(base_image: str, home: Path) -> None:
    """Through a tcp:// endpoint (a forward to the local engine: host paths are not the engine's) a session is opened
    with the exec transport and runs commands."""
    with tcp_to_unix("/var/run/docker.sock") as url:
        settings = load_settings(environ={"DOCKER_HOST": url, "EXECUTOR_HOME": str(home)})
        assert settings.docker.base_url == url and settings.agent.transport == "auto"
        with trio.fail_after(240):
            async with open_executor(settings, pool="off") as ex, ex.open_session() as session:
                assert session.info.transport == "exec"
                result = await session.bash("echo over-tcp")
    assert result.outcome == "completed" and result.stdout == b"over-tcp\n"
