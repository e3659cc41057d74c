"""The ``executor`` entry point: a tiny dispatcher.

A session command (``exec``, ``write``, ``session start|ls|stop``, ``output read|search``, ``bg ...``) runs as a thin
client of a running service when one answers (:mod:`executor.cli.thin`, standard library only, so the call costs
milliseconds, not the executor's import); everything else, and everything when no service answers, runs in-process
(:mod:`executor.cli.app`, the typer app). This module imports neither path until it knows which one it needs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import Any

__all__ = ["main"]


def main() -> None:
    """Console-script entry point."""
    argv = sys.argv[1:]
    if sys.stderr is None:
        # Started with it closed (2>&-): what would go there is dropped, as asked; the command still runs and its
        # exit code is still ours (every message written to None raised, and the call exited 1).
        sys.stderr = open(os.devnull, "w", errors="backslashreplace")  # noqa: SIM115, PTH123 - for the process's life
    _terminate_as_interrupt(argv)
    try:
        from executor.cli.thin.run import run_thin

        code = run_thin(argv)
        if code is not None:
            if sys.stdout is not None:  # None when started with it closed (``>&-``)
                with contextlib.suppress(OSError, ValueError):
                    sys.stdout.flush()
            raise SystemExit(code)
        from executor.cli.app import main as run_app
    except KeyboardInterrupt:
        # Interrupted before any command began (while its modules load): nothing to clean up.
        sys.stderr.write("executor: interrupted\n")
        raise SystemExit(130) from None
    run_app(argv)


_SERVERS = frozenset({"serve", "mcp"})
"""Commands that handle SIGTERM themselves (a drain)."""


def _terminate_as_interrupt(argv: list[str]) -> None:
    """SIGTERM and SIGHUP (a CI job cancelled, ``timeout``, a closed terminal) end a command as Ctrl-C does, so its
    clean-up runs: a throwaway session is removed (which kills its command), temporary files go, and the exit is 130.
    Python's default for them ends the process at once, leaving all of that behind."""
    command = next((word for word in argv if not word.startswith("-")), None)
    if command in _SERVERS:
        return

    if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL, None):
        # A background job of a script starts with Ctrl-C ignored. Python's own handler lets trio take SIGINT
        # (it does only from that handler) and raise it at a safe point, where clean-up runs; raising it from the
        # handler below, in whatever frame of trio's core it lands in, broke the run and left the session behind.
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def interrupt(signum: int, frame: object) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # delivered where Ctrl-C would be (trio raises it at a safe point)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, interrupt)


def __getattr__(name: str) -> Any:
    # ``app`` and ``hoist_json`` lived here before the split; they load the typer app only when asked for.
    if name in ("app", "hoist_json"):
        from executor.cli import app as _app

        return getattr(_app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
