"""The CLI's one exit-code wrapper: how every escaped exception maps to an exit code, an outcome and one line."""

from __future__ import annotations

import errno

import pytest

from executor.cli._common import Failure, failure_of
from executor.errors import (
    ActionDenied,
    AgentError,
    ApprovalRequired,
    ArtifactError,
    ArtifactNotFound,
    CommandRejected,
    ConfigError,
    ImageError,
    ImageNotFound,
    JournalError,
    PatternTimeout,
    SessionNotFound,
    SessionRejected,
)


@pytest.mark.parametrize(
    ("exc", "code", "outcome"),
    [
        (ConfigError("bad"), 2, "error"),
        (SessionRejected("bad name"), 2, "error"),
        (SessionNotFound("none"), 2, "error"),
        (ImageNotFound("none"), 2, "error"),
        (CommandRejected("too big"), 2, "error"),
        (ArtifactNotFound("none"), 2, "error"),
        (PatternTimeout("slow"), 2, "error"),
        (ApprovalRequired("ask"), 75, "blocked"),
        (ActionDenied("no"), 77, "denied"),
        (ArtifactError("damaged"), 125, "error"),
        (ImageError("build failed"), 125, "error"),
        (AgentError("gone"), 125, "error"),
        (JournalError("cannot append"), 125, "error"),
        (KeyboardInterrupt(), 130, "cancelled"),
    ],
)
def test_executor_errors_map_to_their_documented_codes(exc: BaseException, code: int, outcome: str) -> None:
    """Bad input is 2, a gate refusal 75/77, the executor's own failure 125, an interrupt 130."""
    failure = failure_of(exc)
    assert (failure.code, failure.outcome) == (code, outcome)


def test_groups_are_judged_by_their_leaves() -> None:
    """A nursery's group maps like the executor's error inside it; an interrupt anywhere wins."""
    nested = BaseExceptionGroup("outer", [ExceptionGroup("inner", [RuntimeError("cleanup"), ConfigError("bad")])])
    assert failure_of(nested) == Failure(2, "error", "bad")
    assert failure_of(BaseExceptionGroup("g", [ConfigError("bad"), KeyboardInterrupt()])).code == 130


def test_a_full_disk_is_one_line_and_125() -> None:
    """ENOSPC says what to do; other OSErrors name the file; a bug says how to get its traceback."""
    full = failure_of(OSError(errno.ENOSPC, "No space left on device", "/home/x/journal.ndjson"))
    assert full == Failure(
        125,
        "error",
        "no space left on the device writing /home/x/journal.ndjson; free space under the executor's home and retry",
    )
    denied = failure_of(PermissionError(errno.EACCES, "Permission denied", "/home/x"))
    assert denied == Failure(125, "error", "Permission denied: /home/x")
    bug = failure_of(KeyError("line\nbreak"))
    assert bug.code == 125 and "\n" not in bug.message
    assert bug.message.startswith("internal error (KeyError: 'line\\nbreak'); rerun with `executor --debug")
    assert failure_of(MemoryError()) == Failure(125, "error", "out of memory")
