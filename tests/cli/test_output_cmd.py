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
def test_read_and_search_a_stored_stream_before_and_after_the_session_stops(either_home: Path) -> None:
    """Pages have true line numbers and receipts, JSON holds no raw match text, a search without --stream searches
    every stream and exits 1 on no match, and reading needs no container; in-process and over a service alike."""
    home = either_home
    with named_session(home) as name:
        ran = cli(
            home,
            "exec",
            "--session",
            name,
            "--create",
            "--json",
            "--stdin",
            "-",
            "--",
            "seq 1 300; cat >&2",
            stdin=b"\x1b[31mred\n",
        )
        assert ran.code == 0, ran.stderr
        artifact = ran.json()["artifact_id"]
        session = ran.json()["session"]["id"]
        judged_by_exec = _judgments(home, session, artifact)

        page = cli(home, "output", "read", artifact, "--session", name, "--start-line", "100", "--line-count", "3")
        assert page.code == 0, page.stderr
        nxt = f"executor output read {artifact} --stream stdout --start-line 103"
        assert page.stdout == f"[{artifact} stdout: lines 100-102; next: {nxt}]\n100\n101\n102\n"

        found = cli(home, "output", "search", artifact, "--pattern", "^25", "--limit", "2", "--json")
        assert found.code == 0
        data = found.json()
        assert set(data) == {"outcome", "exit_code", "artifact_id", "session", "text", "page", "pages", "matches"}
        assert (data["outcome"], data["exit_code"], data["session"]["id"]) == ("completed", 0, session)
        assert [m["line"] for m in data["page"]["matches"]] == [25, 250]
        assert [page["stream"] for page in data["pages"]] == ["stdout", "stderr"] and data["matches"] == 2
        assert all("text" not in m for m in data["page"]["matches"])
        assert data["page"]["next_start_line"] == 251
        assert data["text"].startswith("25: 25\n250: 250\n")

        # Both paths take the store's bounds: a limit up to 10000 (the service took at most 1000), not one past it.
        many = cli(home, "output", "search", artifact, "--pattern", "^25", "--limit", "5000", "--json")
        assert many.code == 0 and many.json()["matches"] == 11, many.stdout
        # A number out of its range is bad input, in the same words on both paths.
        for args, said in (
            (
                ("search", artifact, "--pattern", "^25", "--limit", "10001"),
                "limit must be between 1 and 10000; got 10001",
            ),
            (("read", artifact, "--start-line", "0"), "start_line must be at least 1; got 0"),
            (("read", artifact, "--line-count", "100001"), "line_count must be between 1 and 100000; got 100001"),
        ):
            refused = cli(home, "--json", "output", *args)
            assert refused.code == 2 and refused.json()["error"] == said, refused.stdout

        in_stderr = cli(home, "output", "search", artifact, "--pattern", "red")
        assert in_stderr.code == 0 and "red" in in_stderr.stdout
        nothing = cli(home, "--json", "output", "search", artifact, "--pattern", "^never$")
        assert nothing.code == 1
        assert (nothing.json()["outcome"], nothing.json()["exit_code"], nothing.json()["matches"]) == (
            "completed",
            1,
            0,
        )
        one_stream = cli(home, "output", "search", artifact, "--stream", "stdout", "--pattern", "red")
        assert one_stream.code == 1

    # The session is stopped: the artifacts stay on the host and are still served, sanitized.
    red = cli(home, "--json", "output", "read", artifact, "--stream", "stderr")
    assert red.code == 0, red.stdout
    assert "\x1b" not in red.stdout and "red" in red.json()["text"]
    assert "\x1b" not in red.json()["text"]
    # Reading goes through the pipeline: each page's sanitize judgment is journaled in the session's journal.
    # read; search (stdout, stderr) four times and once with --stream; read
    assert _judgments(home, session, artifact) == judged_by_exec + 11


def test_unknown_ids_and_bad_ranges_exit_2(home: Path) -> None:
    """A malformed id, an unknown one, a bad range and a bad pattern are bad input (exit 2) with a JSON error."""
    malformed = cli(home, "output", "read", "not-an-id", "--json")
    assert malformed.code == 2 and "is not an artifact id" in malformed.json()["error"]
    unknown = cli(home, "output", "read", "s-0123456789ab.a7")
    assert unknown.code == 2 and "no artifact 's-0123456789ab.a7'" in unknown.stderr
    foreign = cli(home, "output", "search", "s-0123456789ab.a7", "--session", "s-ba9876543210", "--pattern", "x")
    assert foreign.code == 2 and "no artifact" in foreign.stderr
