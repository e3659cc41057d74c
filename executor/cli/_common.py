"""Shared plumbing of the CLI: settings from the context, output in text or JSON, exit codes.

Exit codes (documented in the README):

* ``0``-``255`` from ``exec``: the command's own status (``128+N`` when signal N ended it);
* ``2``: bad usage or bad input (the message says what to fix);
* ``75``: blocked: the action needs an approval nobody can give (non-interactive run);
* ``77``: denied by policy or judge, or an approval was declined;
* ``124``: the command hit its timeout (its whole process group was killed);
* ``125``: the executor itself failed (engine down, sandbox lost, ...).

Under ``--json`` every command prints one JSON object whose ``outcome`` field tells these apart, so a
command that itself exits 124 is never mistaken for a timeout.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import typer

from executor.config import Settings, load_settings
from executor.errors import ConfigError

EXIT_USAGE = 2
EXIT_BLOCKED = 75
EXIT_DENIED = 77
EXIT_TIMEOUT = 124
EXIT_FAILURE = 125


@dataclass
class CliState:
    """What the top-level options decided."""

    config: Path | None
    json: bool
    _settings: Settings | None = None

    def settings(self) -> Settings:
        """Load the settings once (the CLI is an entry point: it alone reads the environment)."""
        if self._settings is None:
            try:
                self._settings = load_settings(self.config, environ=os.environ)
            except ConfigError as exc:
                fail(str(exc), code=EXIT_USAGE, json_mode=self.json)
        return self._settings


def state(ctx: typer.Context) -> CliState:
    """The CliState stored by the top-level callback."""
    obj = ctx.find_root().obj
    assert isinstance(obj, CliState)
    return obj


def emit(data: dict[str, Any], text: str, *, json_mode: bool) -> None:
    """Print ``data`` as one JSON object under --json, else ``text``."""
    if json_mode:
        sys.stdout.write(json.dumps(data, sort_keys=True, default=str) + "\n")
    elif text:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()


def progress(message: str, *, json_mode: bool) -> None:
    """Narrate a long step on stderr when a person is watching; quiet under --json."""
    if not json_mode:
        sys.stderr.write(f"==> {message}\n")
        sys.stderr.flush()


def fail(message: str, *, code: int, json_mode: bool, outcome: str = "error") -> NoReturn:
    """Report an error (JSON on stdout under --json, text on stderr otherwise) and exit with ``code``."""
    if json_mode:
        sys.stdout.write(json.dumps({"outcome": outcome, "error": message, "exit_code": code}) + "\n")
    else:
        sys.stderr.write(f"error: {message}\n")
    raise typer.Exit(code)
