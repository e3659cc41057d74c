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


_KEY_OUTPUT = (
    "printf 'before\\n-----BEGIN OPENSSH PRIVATE KEY-----\\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\\n"
    "QyNTUxOQAAACB0ZXN0dGVzdHRlc3R0ZXN0dGVzdHRlc3R0ZXN0dGVzdAAAAJg=\\n"
    "-----END OPENSSH PRIVATE KEY-----\\n"
    "key AKIAIOSFODNN7EXAMPLE here\\npassword=hunter2hunter2 there\\n'"
)


async def test_redacted_secrets_stay_hidden_from_read_pages_and_search_hits(engine_settings: Settings) -> None:
    """A read page that starts inside a private key block redacts the block's lines (its BEGIN line is on an
    earlier page), and a search hit that lies wholly in a redacted secret is not a hit (not shown, not counted), so
    successive patterns cannot spell the secret out; hits beside a secret still count."""
    async with open_executor(engine_settings) as ex, ex.open_session() as session:
        result = await session.bash(_KEY_OUTPUT)
        artifact = result.artifact_id
        assert artifact is not None and "b3Blbn" not in result.text

        page = await session.read_output(artifact, stream="stdout", start_line=3)
        assert "b3Blbn" not in page.text and "QyNTUx" not in page.text
        assert "[REDACTED:private_key]" in page.text and "END OPENSSH PRIVATE KEY" in page.text

        async def hits(pattern: str) -> int:
            found = await session.search_output(artifact, pattern=pattern, stream="stdout")
            matches = (found.data or {})["matches"]
            assert isinstance(matches, list)
            return len(matches)

        for secret_prefix in ("b3BlbnNzaC1rZXkt", "QyNTUxOQ", "AKIAIOSFODNN7E", "hunter2hunt"):
            assert await hits(secret_prefix) == 0, secret_prefix
        assert await hits("AKIAIOSFODNN7X") == 0  # a miss looks the same as a withheld hit
        assert await hits("key AKIAI") == 0  # a hit that reaches into a secret would tell its next character
        assert await hits(r"key (?=AKIAIOSF)") == 0  # and so would a lookaround that only tests it
        assert await hits(r"^(?=b3Bl)") == 0
        inside = await session.search_output(artifact, pattern="QyNTUx", stream="stdout", start_line=4)
        assert (inside.data or {})["matches"] == []  # a search that starts inside the key block knows it is in one
        for visible in ("before", r"\bhere\b", "there", "BEGIN OPENSSH", "^key "):
            assert await hits(visible) == 1, visible
