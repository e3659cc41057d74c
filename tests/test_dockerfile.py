"""The executor's own image builds offline on the bootstrapped toolchain image and serves MCP over HTTP."""

from __future__ import annotations

import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import TextContent

from executor.config import load_settings

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
TAG = "executor/server:test"


def _run(*args: str, timeout: float) -> None:
    done = subprocess.run(list(args), cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"


@pytest.fixture(scope="module")
def server_image() -> str:
    """Build the toolchain base (offline bootstrap if needed), the wheels, then the Dockerfile with no network."""
    from executor.sandbox.docker import DockerEngine, ensure_image

    async def toolchain() -> str:
        defaults = load_settings()
        engine = await DockerEngine.connect(defaults.docker)
        try:
            return await ensure_image(engine, defaults.images, "toolchain")
        finally:
            await engine.aclose()

    base = trio.run(toolchain)
    _run(sys.executable, "-m", "pip", "wheel", "--quiet", "-w", "build/wheels", ".", timeout=600)
    _run(
        "docker",
        "build",
        "--quiet",
        "--network",
        "none",
        "--build-arg",
        f"BASE={base}",
        "-t",
        TAG,
        ".",
        timeout=900,
    )
    return TAG


async def test_server_image_serves_mcp_over_http_with_the_engine_socket(server_image: str) -> None:
    """A client with the right token lists the tools and runs a command in a session started by the container."""
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
            "127.0.0.1::8765",
            "-v",
            "/var/run/docker.sock:/var/run/docker.sock",
            "-e",
            f'EXECUTOR_MCP__TOKENS=["{token}"]',
            server_image,
        ],
        capture_stdout=True,
    )
    assert run.returncode == 0
    try:
        port = (await trio.run_process(["docker", "port", name, "8765/tcp"], capture_stdout=True)).stdout
        url = f"http://{port.decode().strip().splitlines()[0]}/mcp"
        with trio.fail_after(120):
            while True:
                logs = await trio.run_process(["docker", "logs", name], capture_stdout=True, capture_stderr=True)
                if b"listening on" in logs.stderr + logs.stdout:
                    break
                await trio.sleep(0.3)
            async with (
                create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http,
                Client(streamable_http_client(url, http_client=http)) as client,
            ):
                tools = await client.list_tools()
                assert {"bash", "read_output", "search_output", "write_file"} <= {t.name for t in tools.tools}
                result = await client.call_tool("bash", {"command": "echo served-from-the-image; id -u"})
                text = "".join(c.text for c in result.content if isinstance(c, TextContent))
                assert "served-from-the-image" in text and "\n1000\n" in text
    finally:
        with trio.CancelScope(shield=True):
            await trio.run_process(["docker", "stop", "-t", "10", name], check=False, capture_stdout=True)
