"""The executor's own image builds offline on the bootstrapped toolchain image and runs the service (API and MCP)."""

from __future__ import annotations

import hashlib
import secrets
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
import trio
from mcp_types import TextContent

from executor.client import AsyncClient
from executor.config import load_settings
from executor.testing.mcp_http import open_mcp_http_client

# The module's image is built in its fixture's set-up, which the test's timeout counts: on a machine that has no
# toolchain base yet it bootstraps one (minutes), then builds the wheels and the image (bounded by _run's timeouts).
pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parent.parent
TAG = "executor/server:test"


def _run(*args: str, timeout: float) -> None:
    done = subprocess.run(list(args), cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"


# What the image is made of (the Dockerfile's COPY sources and the lock its wheels come from): an unchanged tree
# finds its image by this hash, stored as a label, and is not built again.
_INPUTS = ("Dockerfile", "pyproject.toml", "requirements.lock", "README.md", "executor", "images", "policy")
_INPUTS_LABEL = "executor.test-inputs"


def _inputs_hash(base: str) -> str:
    digest = hashlib.sha256(base.encode())
    for top in _INPUTS:
        root = REPO / top
        for path in sorted([root] if root.is_file() else root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:32]


def _built_label() -> str | None:
    done = subprocess.run(
        ["docker", "image", "inspect", "--format", f'{{{{index .Config.Labels "{_INPUTS_LABEL}"}}}}', TAG],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() if done.returncode == 0 else None


@pytest.fixture(scope="module")
def server_image() -> str:
    """The toolchain base (offline bootstrap if needed), the wheels, then the Dockerfile with no network; an image
    already built from the same inputs is used as it is."""
    from executor.sandbox.docker import DockerEngine, ensure_image

    async def toolchain() -> str:
        defaults = load_settings()
        engine = await DockerEngine.connect(defaults.docker)
        try:
            return await ensure_image(engine, defaults.images, "toolchain")
        finally:
            await engine.aclose()

    base = trio.run(toolchain)
    inputs = _inputs_hash(base)
    if _built_label() == inputs:
        return TAG
    _run(sys.executable, "-m", "pip", "wheel", "--quiet", "-w", "build/wheels", ".", timeout=600)
    _run(
        "docker",
        "build",
        "--quiet",
        "--network",
        "none",
        "--build-arg",
        f"BASE={base}",
        "--label",
        f"{_INPUTS_LABEL}={inputs}",
        "-t",
        TAG,
        ".",
        timeout=900,
    )
    assert _built_label() == inputs
    return TAG


async def test_server_image_runs_the_service_on_tcp_with_the_engine_socket(server_image: str) -> None:
    """The container runs `executor serve` on TCP with the token from its environment: the JSON API runs a command in
    a session it started (401 without the token), and MCP is served beside it at /mcp."""
    token = secrets.token_hex(16)
    name = f"executor-server-test-{secrets.token_hex(4)}"
    run = await trio.run_process(
        [
            "docker",
            "run",
            "-d",
            "--rm",
            "--name",
            name,
            "-p",
            "127.0.0.1::8766",
            "-v",
            "/var/run/docker.sock:/var/run/docker.sock",
            "-e",
            f'EXECUTOR_SERVICE__TOKENS=["{token}"]',
            server_image,
        ],
        capture_stdout=True,
    )
    assert run.returncode == 0
    try:
        port = (await trio.run_process(["docker", "port", name, "8766/tcp"], capture_stdout=True)).stdout
        base = f"http://{port.decode().strip().splitlines()[0]}"
        with trio.fail_after(180):
            while True:
                logs = await trio.run_process(["docker", "logs", name], capture_stdout=True, capture_stderr=True)
                if b"listening on" in logs.stderr + logs.stdout:
                    break
                await trio.sleep(0.3)
            async with httpx2.AsyncClient(base_url=base, timeout=120) as raw:
                assert (await raw.get("/v1/health")).status_code == 401
            async with AsyncClient(base, token=token) as client:
                session = await client.create_session()
                result = await client.exec(session.id, "echo served-from-the-image; id -u")
                assert result.outcome == "completed" and result.stdout == b"served-from-the-image\n1000\n"
                await client.stop_session(session.id)
            async with open_mcp_http_client(f"{base}/mcp", token) as mcp:
                tools = await mcp.list_tools()
                assert {"bash", "read_output", "search_output", "write_file"} <= {t.name for t in tools.tools}
                called = await mcp.call_tool("bash", {"command": "echo over-mcp"})
                assert "over-mcp" in "".join(c.text for c in called.content if isinstance(c, TextContent))
    finally:
        with trio.CancelScope(shield=True):
            await trio.run_process(["docker", "stop", "-t", "30", name], check=False, capture_stdout=True)
