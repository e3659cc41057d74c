"""MCP results have the session API's shape (real pipeline, real engine, the real server in process)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from executor.config import load_settings
from executor.mcp.server import open_surface
from executor.session import open_executor

pytestmark = [pytest.mark.docker, pytest.mark.timeout(120)]


async def test_results_over_mcp_have_the_api_s_outcomes_and_ids(base_image: str, home: Path) -> None:
    """A write into a missing folder is an error result (isError); task_start reports tool and task_id."""
    settings = load_settings(overrides={"home": str(home)})
    async with (
        open_executor(settings, surface="mcp") as executor,
        open_surface(executor, transport="stdio") as surface,
        Client(surface.server) as client,
    ):
        missing = await client.call_tool("write_file", {"path": "no/such/folder/f.txt", "content": "x"})
        started = await client.call_tool("task_start", {"command": "true"})
        ran = await client.call_tool("bash", {"command": "echo raw"})
    assert missing.is_error and missing.structured_content is not None
    assert (missing.structured_content["tool"], missing.structured_content["outcome"]) == ("write_file", "error")
    assert not started.is_error and started.structured_content is not None
    assert started.structured_content["tool"] == "task_start" and started.structured_content["task_id"]
    assert ran.structured_content is not None and "stdout" not in ran.structured_content  # never raw to a model
