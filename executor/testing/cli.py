"""Run the ``executor`` CLI as a subprocess (against the real engine where a command needs one), in a private home."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Ran", "cli", "named_session"]

_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Ran:
    """One finished CLI process."""

    code: int
    stdout: str
    stderr: str

    def json(self) -> dict[str, Any]:
        """Stdout as the one JSON object ``--json`` prints."""
        lines = self.stdout.splitlines()
        assert len(lines) == 1, self.stdout + self.stderr
        data = json.loads(lines[0])
        assert isinstance(data, dict)
        return data


def cli(home: Path, *args: str, stdin: bytes | None = None) -> Ran:
    """Run ``python -m executor.cli ARGS`` with ``EXECUTOR_HOME=home``; never a terminal, so asks are blocked."""
    env = {**os.environ, "EXECUTOR_HOME": str(home)}
    env.pop("EXECUTOR_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-m", "executor.cli", *args],
        input=stdin if stdin is not None else b"",
        capture_output=True,
        env=env,
        timeout=_TIMEOUT_S,
        check=False,
    )
    return Ran(done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace"))


@contextmanager
def named_session(home: Path) -> Iterator[str]:
    """A unique session name; the session (if any command started it) is stopped on exit."""
    name = f"cli-test-{secrets.token_hex(4)}"
    try:
        yield name
    finally:
        cli(home, "session", "stop", name)
