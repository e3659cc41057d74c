"""Results have one shape, and errors leave the API as themselves (real engine)."""

from __future__ import annotations

import pytest

from executor.config import Settings
from executor.errors import ArtifactNotFound, ExecutorError
from executor.session import open_executor

pytestmark = pytest.mark.docker


async def test_a_caller_s_own_error_leaves_the_session_block_unwrapped(engine_settings: Settings) -> None:
    """A ValueError raised inside `async with ex.open_session()` reaches `except ValueError` as itself."""
    mine = ValueError("the caller's own")
    caught: BaseException | None = None
    try:
        async with open_executor(engine_settings) as ex, ex.open_session() as session:
            await session.bash("true")
            raise mine
    except ValueError as exc:
        caught = exc
    assert caught is mine


async def test_an_executor_error_leaves_the_session_block_unwrapped(engine_settings: Settings) -> None:
    """An executor error inside the block reaches `except ExecutorError` as the leaf class, not a group."""
    caught: BaseException | None = None
    try:
        async with open_executor(engine_settings) as ex, ex.open_session() as session:
            await session.read_output(f"{session.id}.a999")
    except ExecutorError as exc:
        caught = exc
    assert type(caught) is ArtifactNotFound


async def test_results_carry_raw_streams_task_ids_and_write_outcomes(engine_settings: Settings) -> None:
    """bash carries its raw streams (cut at the budget and flagged), task_start its id, a bad write an error result."""
    budget = engine_settings.artifacts.display_max_chars
    async with open_executor(engine_settings) as ex, ex.open_session() as session:
        small = await session.bash("printf 'out\\n'; printf 'err\\n' >&2")
        assert (small.stdout, small.stdout_complete, small.stderr, small.stderr_complete) == (
            "out\n",
            True,
            "err\n",
            True,
        )
        big = await session.bash(f"head -c {budget * 3} /dev/zero | tr '\\0' 'x'")
        assert big.stdout is not None and 0 < len(big.stdout) <= budget and set(big.stdout) == {"x"}
        assert big.stdout_complete is False

        started = await session.start_task("echo tick")
        assert (started.tool, started.outcome) == ("task_start", "completed")
        assert started.task_id is not None and started.task_id == (started.data or {}).get("task_id")
        read = await session.read_task(started.task_id)
        assert (read.tool, read.task_id) == ("task_read", started.task_id)

        missing = await session.write_file("no/such/folder/file.txt", "x")
        assert (missing.tool, missing.outcome) == ("write_file", "error")
        assert "nothing was written" in missing.text
