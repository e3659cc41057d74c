"""Fixtures of the CLI tests: a home with or without a running service, so one test covers both paths."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from executor.testing.cli import cli, serving


@pytest.fixture(params=["in-process", "thin"])
def either_home(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A private home (short: a unix socket path is at most 107 bytes), once with no service (the CLI runs
    in-process) and once with ``executor serve`` running in it (session commands take the thin path)."""
    home = Path(tempfile.mkdtemp(prefix="exc-", dir="/tmp"))
    try:
        if request.param == "thin":
            request.getfixturevalue("base_image")
            with serving(home, profiles__default__pool__service_size="0"):
                yield home
        else:
            yield home
    finally:
        cli(home, "session", "gc")
        shutil.rmtree(home, ignore_errors=True)
