"""Results have one shape, and errors leave the API as themselves (real engine)."""

from __future__ import annotations

import json

import pytest
import trio

from executor.config import Settings, load_settings
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
            journal = session.journal_path
            raise mine
    except ValueError as exc:
        caught = exc
    assert caught is mine
    closed = json.loads(journal.read_text().splitlines()[-1])
    assert (closed["type"], closed["reason"]) == ("session_closed", "error: ValueError")  # not the nursery's group


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
        assert (small.stdout, small.stdout_whole, small.stderr, small.stderr_whole) == (b"out\n", True, b"err\n", True)
        big = await session.bash(f"head -c {budget * 3} /dev/zero | tr '\\0' 'x'")
        assert 0 < len(big.stdout) <= budget and set(big.stdout) == {ord("x")}
        assert big.stdout_whole is False

        started = await session.start_task("echo tick")
        assert (started.tool, started.outcome) == ("task_start", "completed")
        assert started.task_id is not None and started.task_id == (started.data or {}).get("task_id")
        read = await session.read_task(started.task_id)
        assert (read.tool, read.task_id) == ("task_read", started.task_id)

        missing = await session.write_file("no/such/folder/file.txt", "x")
        assert (missing.tool, missing.outcome) == ("write_file", "error")
        assert "nothing was written" in missing.text


_KEY_TEXT = (
    "before\n-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "QyNTUxOQAAACB0ZXN0dGVzdHRlc3R0ZXN0dGVzdHRlc3R0ZXN0dGVzdAAAAJg=\n"
    "-----END OPENSSH PRIVATE KEY-----\n"
)
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


_AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
_PASSWORD = "hunter2hunter2"
_LONG_LINE = f"{'x' * 300} {_AWS_KEY} {'y' * 300} password={_PASSWORD} {'z' * 300}"


def _shows_part_of(text: str, secret: str) -> bool:
    """Whether ``text`` holds six or more consecutive characters of ``secret``."""
    return any(secret[i : i + 6] in text for i in range(len(secret) - 5))


async def test_a_secret_cut_by_a_page_edge_stays_hidden(engine_settings: Settings) -> None:
    """A byte-range page of a long line, or a byte range of a task's stream, that starts or ends inside a credential
    shows none of it (the part on the page no longer looks like one), and a task page that starts inside a private
    key block redacts the block's lines."""
    settings = load_settings(
        overrides={
            "home": str(engine_settings.home),
            "agent": {"build_dir": str(engine_settings.agent.build_dir)},
            "artifacts": {"display_max_chars": 256},
        }
    )
    async with open_executor(settings) as ex, ex.open_session() as session:
        await session.write_file("out.txt", _LONG_LINE + "\n" + _KEY_TEXT)
        result = await session.bash("cat out.txt")
        assert result.artifact_id is not None
        for start in range(250, 680, 9):
            page = await session.read_output(result.artifact_id, stream="stdout", start_byte_in_line=start)
            assert not _shows_part_of(page.text, _AWS_KEY) and not _shows_part_of(page.text, _PASSWORD), start
        assert (
            "[REDACTED:aws_access_key]"
            in (await session.read_output(result.artifact_id, stream="stdout", start_byte_in_line=305)).text
        )

        started = await session.start_task("cat out.txt")
        assert started.task_id is not None
        deadline = trio.current_time() + 30
        while (await session.read_task(started.task_id, max_bytes=0)).data["running"]:  # type: ignore[index]
            assert trio.current_time() < deadline
            await trio.sleep(0.05)
        for offset in range(250, 680, 9):
            for max_bytes in (10, 40, 200):
                read = await session.read_task(started.task_id, offset=offset, max_bytes=max_bytes)
                assert not _shows_part_of(read.text, _AWS_KEY), (offset, max_bytes)
                assert not _shows_part_of(read.text, _PASSWORD), (offset, max_bytes)
        body = len(_LONG_LINE) + 1 + _KEY_TEXT.index("QyNTUx")
        inside = await session.read_task(started.task_id, offset=body, max_bytes=200)
        assert "QyNTUx" not in inside.text and "[REDACTED:private_key]" in inside.text
        assert "END OPENSSH PRIVATE KEY" in inside.text


async def test_a_focused_section_that_starts_inside_a_key_block_redacts_it(engine_settings: Settings) -> None:
    """Focus shows sections cut from the whole stream; one that starts inside a private key block (a blank line
    split the block) shows none of the key's lines, though its BEGIN line is in a section not shown."""
    body = "QyNTUxOQAAACB0ZXN0dGVzdHRlc3R0ZXN0dGVzdHRlc3R0ZXN0dGVzdAAAAJg"
    output = (
        "".join(f"INFO step {i} fine\n" for i in range(80))
        + "-----BEGIN OPENSSH PRIVATE KEY-----\n"
        + "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n" * 30
        + "\n"
        + f"{body}\n" * 3
        + "error: build failed\n\n"
        + "".join(f"INFO tail {i}\n" for i in range(40))
    )
    async with open_executor(engine_settings) as ex, ex.open_session() as session:
        await session.write_file("out.txt", output)
        result = await session.bash("cat out.txt", focus_mode="on", intent="why did it fail")
        assert "error: build failed" in result.text and "focus: showing" in result.text
        assert body not in result.text and "[REDACTED:private_key]" in result.text


def test_a_timeout_header_says_whether_sigkill_was_needed() -> None:
    """A group that ended at SIGTERM is not said to have got SIGKILL (it said so whatever happened)."""
    from executor.models import RunResult
    from executor.session.presentation import run_header

    def timed_out(signal: int | None, code: int | None) -> RunResult:
        return RunResult(
            cause="timeout", exit_code=code, signal=signal, duration_ms=300.0, cpu_ms=0.0, max_rss_kb=0, stream_bytes={}
        )

    assert "got SIGTERM, and ended within the 3000 ms grace" in run_header(timed_out(15, None), 300, 3000)
    assert "got SIGTERM, then SIGKILL after 3000 ms" in run_header(timed_out(9, None), 300, 3000)
