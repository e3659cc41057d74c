"""Every hint an MCP result prints is a call of the MCP tools that succeeds as written (real pipeline, real engine)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client
from mcp_types import CallToolResult, TextContent

from executor.config import load_settings
from executor.mcp.server import open_surface
from executor.session import open_executor
from executor.testing.hints import tool_calls

pytestmark = [pytest.mark.docker, pytest.mark.timeout(180)]

_MOST_CALLS = 60
"""Hints followed per test at most (each result's hints are followed in turn, breadth first)."""


def _text(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


async def test_every_hint_over_mcp_is_a_call_that_succeeds(base_image: str, home: Path) -> None:
    """Hints of bash, read_output, search_output and the task tools parse as MCP calls and succeed when made."""
    settings = load_settings(
        overrides={"home": str(home), "artifacts": {"display_max_chars": 2_000, "read_page_lines": 50}}
    )
    async with (
        open_executor(settings, surface="mcp") as executor,
        open_surface(executor, transport="stdio") as surface,
        Client(surface.server) as client,
    ):
        first = [
            await client.call_tool("bash", {"command": "seq 1 500; echo oops >&2"}),
            await client.call_tool("bash", {"command": "head -c 6000 /dev/zero | tr '\\0' x; echo; echo tail"}),
            await client.call_tool("task_start", {"command": "seq 1 3"}),
        ]
        artifact_id = str((first[0].structured_content or {})["artifact_id"])
        first.append(await client.call_tool("search_output", {"artifact_id": artifact_id, "pattern": "1", "limit": 3}))
        task_id = str((first[2].structured_content or {})["task_id"])
        first.append(await client.call_tool("task_stop", {"task_id": task_id}))
        pending = [_text(result) for result in first]
        for result in first:
            assert not result.is_error, _text(result)
        seen: set[str] = set()
        kinds: set[str] = set()
        while pending and len(seen) < _MOST_CALLS:
            for tool, arguments in tool_calls(pending.pop(0)):
                key = f"{tool}{sorted(arguments.items())}"
                if key in seen:
                    continue
                seen.add(key)
                kinds.add(tool)
                followed = await client.call_tool(tool, arguments)
                assert not followed.is_error, f"{tool}({arguments}) -> {_text(followed)}"
                pending.append(_text(followed))
    assert {"read_output", "search_output", "task_read"} <= kinds
    assert any("start_byte_in_line" in key for key in seen), seen
