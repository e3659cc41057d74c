"""A run that hits a container limit says which one: the pids limit (forks refused) and memory held by tmpfs."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from executor.config import load_settings
from executor.session import open_executor

pytestmark = pytest.mark.docker


async def test_a_run_names_the_limit_it_hit(home: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """A fork bomb under a 32-pid limit times out naming the pids limit; filling a tmpfs larger than the memory
    limit leaves the next command an OOM that names the memory the tmpfs files hold; a plain run names nothing."""
    settings = load_settings(
        overrides={
            "home": str(home),
            "agent": {"build_dir": str(tmp_path_factory.getbasetemp() / "agent-build-shared")},
            "bash": {"grace_ms": 300, "drain_ms": 300},
            "profiles": {"default": {"pids": 32, "memory": "96m", "tmp_size": "256m"}},
        }
    )
    with trio.fail_after(120):
        async with open_executor(settings) as ex, ex.open_session() as session:
            plain = await session.bash("echo fine")
            assert plain.run is not None and plain.run.pids_limit_hits == 0 and plain.run.tmpfs_bytes is None
            assert "pids limit" not in plain.text and "memory limit" not in plain.text
            # Commands are the OOM killer's first choice, before the agent (its death was the session's: the
            # memory run below once ended sandbox_lost instead of oom).
            scores = await session.bash("cat /proc/self/oom_score_adj /proc/1/oom_score_adj")
            assert scores.stdout.split() == [b"500", b"0"], scores.text

            forks = await session.bash("for i in $(seq 1 64); do sleep 30 & done; wait", timeout_ms=3000)
            assert forks.outcome == "timeout"
            assert forks.run is not None and forks.run.pids_limit_hits > 0
            assert f"pids limit (pids=32) refused {forks.run.pids_limit_hits} fork(s)" in forks.text

            # /tmp (a tmpfs larger than the memory limit) takes most of the memory; the next command to need
            # memory is killed by the OOM killer, and the note says where the memory went
            assert (await session.bash("head -c 64m /dev/zero > /tmp/fill")).outcome == "completed"
            filled = await session.bash("head -c 80m /dev/zero | tail -c 80m > /dev/null", timeout_ms=60_000)
            assert filled.run is not None and filled.run.cause == "oom", filled.text
            assert filled.run.tmpfs_bytes is not None and filled.run.tmpfs_bytes >= 64 * 2**20
            assert "the memory limit (96 MiB) was reached; tmpfs files (/tmp, the home, /dev/shm) held" in filled.text
