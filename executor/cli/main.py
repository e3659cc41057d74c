"""The ``executor`` entry point: a tiny dispatcher.

A session command (``exec``, ``write``, ``session start|ls|stop``, ``output read|search``, ``bg ...``) runs as a thin
client of a running service when one answers (:mod:`executor.cli.thin`, standard library only, so the call costs
milliseconds, not the executor's import); everything else, and everything when no service answers, runs in-process
(:mod:`executor.cli.app`, the typer app). This module imports neither path until it knows which one it needs.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["main"]


def main() -> None:
    """Console-script entry point."""
    argv = sys.argv[1:]
    from executor.cli.thin.run import run_thin

    code = run_thin(argv)
    if code is not None:
        sys.stdout.flush()
        raise SystemExit(code)
    from executor.cli.app import main as run_app

    run_app(argv)


def __getattr__(name: str) -> Any:
    # ``app`` and ``hoist_json`` lived here before the split; they load the typer app only when asked for.
    if name in ("app", "hoist_json"):
        from executor.cli import app as _app

        return getattr(_app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
