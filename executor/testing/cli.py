"""Run the ``executor`` CLI as a subprocess (against the real engine where a command needs one), in a private home;
and run ``executor serve`` in such a home, so the same commands take the thin path."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from executor.environ import NOT_SETTINGS

__all__ = ["Ran", "cli", "cli_env", "named_session", "serving"]

_TIMEOUT_S = 120.0
_SERVE_START_S = 120.0
_SERVE_STOP_S = 60.0


@dataclass(frozen=True)
class Ran:
    """One finished CLI process."""

    code: int
    stdout: str
    stderr: str
    stdout_bytes: bytes = b""
    """Stdout as the process wrote it (``stdout`` is its UTF-8 reading, invalid bytes replaced)."""
    stderr_bytes: bytes = b""
    """Stderr as the process wrote it."""

    def json(self) -> dict[str, Any]:
        """Stdout as the one JSON object ``--json`` prints."""
        lines = self.stdout.splitlines()
        assert len(lines) == 1, self.stdout + self.stderr
        data = json.loads(lines[0])
        assert isinstance(data, dict)
        return data


def cli_env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a CLI process in ``home``: no settings file, no service address but ``extra``'s."""
    env = {k: v for k, v in os.environ.items() if k not in NOT_SETTINGS}
    env["EXECUTOR_HOME"] = str(home)
    env.update(extra or {})
    return env


def cli(home: Path, *args: str, stdin: bytes | None = None, env: Mapping[str, str] | None = None) -> Ran:
    """Run ``python -m executor.cli ARGS`` with ``EXECUTOR_HOME=home`` (plus ``env``); never a terminal, so asks are
    blocked. When an ``executor serve`` answers in ``home`` (:func:`serving`), session commands take the thin path."""
    done = subprocess.run(
        [sys.executable, "-m", "executor.cli", *args],
        input=stdin if stdin is not None else b"",
        capture_output=True,
        env=cli_env(home, env),
        timeout=_TIMEOUT_S,
        check=False,
    )
    return Ran(
        done.returncode,
        done.stdout.decode("utf-8", "replace"),
        done.stderr.decode("utf-8", "replace"),
        done.stdout,
        done.stderr,
    )


@contextmanager
def named_session(home: Path) -> Iterator[str]:
    """A unique session name; the session (if any command started it) is stopped on exit."""
    name = f"cli-test-{secrets.token_hex(4)}"
    try:
        yield name
    finally:
        cli(home, "session", "stop", name)


@contextmanager
def serving(home: Path, **settings: str) -> Iterator[Path]:
    """Run ``executor serve`` in ``home`` (with ``EXECUTOR_<KEY>`` settings) until the block ends; yields its socket.

    The home's path must be short (a unix socket path is at most 107 bytes). Leaving sends SIGTERM (the service
    removes its unnamed sessions) and waits for the process (bounded), then kills it if it lingers.
    """
    env = cli_env(home, {f"EXECUTOR_{key.upper()}": value for key, value in settings.items()})
    sock = home / "service.sock"
    log = home / "serve.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "executor.cli", "serve"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + _SERVE_START_S
        while "listening on" not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"executor serve did not start: {log.read_text(errors='replace')}")
            time.sleep(0.05)
        yield sock
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=_SERVE_STOP_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
