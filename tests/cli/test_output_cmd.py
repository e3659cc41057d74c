"""`executor output read|search` end to end: exact pages and receipts, from the host even once the session is gone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from executor.testing.cli import cli, named_session

pytestmark = pytest.mark.timeout(180)


def _judgments(home: Path, session: str, artifact: str) -> int:
    journal = home / "sessions" / session / "journal.ndjson"
    events = [json.loads(line) for line in journal.read_text(encoding="utf-8").splitlines()]
    return sum(1 for e in events if e["type"] == "judgment" and e.get("artifact_id") == artifact)


@pytest.mark.docker
def test_read_and_search_a_stored_stream_before_and_after_the_session_stops(home: Path) -> None:
    """Pages have true line numbers and receipts, JSON holds no raw match text, and reading needs no container."""
    with named_session(home) as name:
        ran = cli(
            home,
            "exec",
            "--session",
            name,
            "--json",
            "--stdin",
            "-",
            "--",
            "seq 1 300; cat >&2",
            stdin=b"\x1b[31mred\n",
        )
        assert ran.code == 0, ran.stderr
        artifact = ran.json()["artifact_id"]
        session = ran.json()["session"]
        judged_by_exec = _judgments(home, session, artifact)

        page = cli(home, "output", "read", artifact, "--session", name, "--start-line", "100", "--line-count", "3")
        assert page.code == 0, page.stderr
        nxt = f"executor output read {artifact} --stream stdout --start-line 103"
        assert page.stdout == f"[{artifact} stdout: lines 100-102; next: {nxt}]\n100\n101\n102\n"

        found = cli(home, "output", "search", artifact, "--pattern", "^25", "--limit", "2", "--json")
        assert found.code == 0
        data = found.json()
        assert set(data) == {"outcome", "exit_code", "artifact_id", "session", "text", "page"}
        assert (data["outcome"], data["session"]) == ("completed", session)
        assert [m["line"] for m in data["page"]["matches"]] == [25, 250]
        assert all("text" not in m for m in data["page"]["matches"])
        assert data["page"]["next_start_line"] == 251
        assert data["text"].startswith("25: 25\n250: 250\n")

    # The session is stopped: the artifacts stay on the host and are still served, sanitized.
    red = cli(home, "--json", "output", "read", artifact, "--stream", "stderr")
    assert red.code == 0, red.stdout
    assert "\x1b" not in red.stdout and "red" in red.json()["text"]
    assert "\x1b" not in red.json()["text"]
    # Reading goes through the pipeline: each page's sanitize judgment is journaled in the session's journal.
    assert _judgments(home, session, artifact) == judged_by_exec + 3  # read, search, read


def test_unknown_ids_and_bad_ranges_exit_2(home: Path) -> None:
    """A malformed id, an unknown one, a bad range and a bad pattern are bad input (exit 2) with a JSON error."""
    malformed = cli(home, "output", "read", "not-an-id", "--json")
    assert malformed.code == 2 and "is not an artifact id" in malformed.json()["error"]
    unknown = cli(home, "output", "read", "s-0123456789ab.a7")
    assert unknown.code == 2 and "no artifact 's-0123456789ab.a7'" in unknown.stderr
    foreign = cli(home, "output", "search", "s-0123456789ab.a7", "--session", "s-ba9876543210", "--pattern", "x")
    assert foreign.code == 2 and "no artifact" in foreign.stderr
