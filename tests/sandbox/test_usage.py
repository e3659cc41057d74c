"""The host-side usage file: busy while a call runs, its mtime the end of the last call."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from executor.errors import SessionNotFound
from executor.sandbox.usage import UsageMark, read_usage, usage_path


def test_usage_path_is_beside_the_run_folder_and_validates_the_id(tmp_path: Path) -> None:
    """The file sits under <home>/run, not in the session's mounted run folder; a malformed id is refused."""
    assert usage_path(tmp_path, "s-0123456789ab") == tmp_path / "run" / "s-0123456789ab.used"
    with pytest.raises(SessionNotFound):
        usage_path(tmp_path, "../x")


def test_a_session_never_used_reads_as_unknown_and_not_busy(tmp_path: Path) -> None:
    """No file: no last use, not busy."""
    usage, held = read_usage(usage_path(tmp_path, "s-0123456789ab"))
    assert usage.last_used_at is None and not usage.busy and held is None


def test_a_call_is_busy_while_it_runs_and_sets_the_last_use_when_it_ends(tmp_path: Path) -> None:
    """Inside a mark the session is busy (an exclusive lock fails); leaving sets the mtime to now."""
    path = usage_path(tmp_path, "s-0123456789ab")
    with UsageMark(path):
        os.utime(path, (1_000_000, 1_000_000))
        usage, held = read_usage(path, hold=True)
        assert usage.busy and held is None
    usage, _ = read_usage(path)
    assert not usage.busy
    assert usage.last_used_at is not None
    assert (datetime.now(UTC) - usage.last_used_at).total_seconds() < 60
    assert (path.stat().st_mode & 0o777) == 0o600


def test_a_call_starting_while_a_reader_stops_the_session_does_not_wait(tmp_path: Path) -> None:
    """A reader stopping an idle session keeps its exclusive lock (handed back to close); a call starting meanwhile
    neither blocks nor fails, and still records its end."""
    path = usage_path(tmp_path, "s-0123456789ab")
    with UsageMark(path):
        pass
    os.utime(path, (1_000_000, 1_000_000))
    usage, held = read_usage(path, hold=True)
    assert not usage.busy and held is not None
    try:
        with UsageMark(path):
            pass
    finally:
        os.close(held)
    assert path.stat().st_mtime > 1_000_000


def test_a_mark_never_fails_a_call(tmp_path: Path) -> None:
    """An unwritable home leaves no record and raises nothing."""
    blocked = tmp_path / "file"
    blocked.write_text("")
    with UsageMark(blocked / "run" / "s-0123456789ab.used"):
        pass
