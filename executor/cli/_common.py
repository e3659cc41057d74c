"""Shared plumbing of the CLI: settings from the context, output in text or JSON, exit codes.

Exit codes (documented in the README):

* ``0``-``255`` from ``exec``: the command's own status (``128+N`` when signal N ended it);
* ``2``: bad usage or bad input (the message says what to fix);
* ``75``: blocked: the action needs an approval nobody can give (non-interactive run);
* ``77``: denied by policy or judge, or an approval was declined;
* ``124``: the command hit its timeout (its whole process group was killed);
* ``125``: the executor itself failed (engine down, sandbox lost, no space left in the home, a damaged artifact
  store, or a bug);
* ``130``: interrupted (Ctrl-C).

Under ``--json`` every command prints one JSON object whose ``outcome`` field tells these apart, so a
command that itself exits 124 is never mistaken for a timeout. One vocabulary for every command: ``completed`` when
it did its job, ``failed`` when it ran and found a failure (a command's non-zero exit, an expectation not met),
``error`` when it could not (bad input, the executor failing), and the gate's ``blocked``/``denied`` and
``timeout``/``cancelled``; ``exit_code`` (this process's status) is always present. A usage error (an unknown
option, a missing argument) under ``--json`` is that error object too, on stdout, instead of the usage box.

Every command runs under one exit-code wrapper (:class:`GuardedGroup`, the root command's class): whatever
escapes a command is mapped here by :func:`failure_of` and reported as one line (``error: ...`` on stderr, or the
error object under ``--json``); the traceback is printed only under the root option ``--debug``.
"""

from __future__ import annotations

import errno
import json
import os
import select
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NoReturn

import typer
from typer._click.exceptions import UsageError  # typer's own (vendored) click raises these
from typer.core import TyperGroup

# The exit codes are defined once, in the standard-library module both CLI paths share; re-exported here.
from executor.cli.shapes import EXIT_BLOCKED as EXIT_BLOCKED
from executor.cli.shapes import EXIT_DENIED as EXIT_DENIED
from executor.cli.shapes import EXIT_FAILURE as EXIT_FAILURE
from executor.cli.shapes import EXIT_INTERRUPTED as EXIT_INTERRUPTED
from executor.cli.shapes import EXIT_TIMEOUT as EXIT_TIMEOUT
from executor.cli.shapes import EXIT_USAGE as EXIT_USAGE
from executor.cli.streams import OutputFailed
from executor.config import Settings, load_settings
from executor.errors import (
    ActionDenied,
    ApprovalInvalidated,
    ApprovalRequired,
    ArtifactEvicted,
    ArtifactNotFound,
    CommandRejected,
    ConfigError,
    ContentRejected,
    ExecutorError,
    ImageNotFound,
    OutputRangeError,
    PathRejected,
    PatternError,
    PatternTimeout,
    SessionNotFound,
    SessionRejected,
    SessionStopped,
    StreamNotFound,
    TaskNotFound,
    UnsafeTarget,
)

WORDS_CONTEXT: Final[dict[str, Any]] = {"allow_interspersed_args": False}
"""Context of a command that takes a command to run (``exec``, ``bg start``): its options end at the first command
word, as ``docker exec``'s do (``executor exec ls -la`` runs ``ls -la``; ``executor exec echo hi --session x``
echoes the words). The thin path parses the same way."""

_USAGE_ERRORS: Final = (
    ConfigError,
    ImageNotFound,
    SessionNotFound,
    SessionRejected,
    TaskNotFound,
    CommandRejected,
    PathRejected,
    ContentRejected,
    UnsafeTarget,
    ArtifactNotFound,
    StreamNotFound,
    ArtifactEvicted,
    OutputRangeError,
    PatternError,
    PatternTimeout,
)
"""Errors that mean "fix your input" (exit 2); every other ExecutorError is an executor failure (exit 125)."""


@dataclass
class CliState:
    """What the top-level options decided."""

    config: Path | None
    json: bool
    debug: bool = False
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
    """Print ``data`` as one JSON object under --json, else ``text`` (nothing when stdout was closed: ``>&-``)."""
    out = sys.stdout
    if out is None:
        return
    if json_mode:
        out.write(json.dumps(data, sort_keys=True, default=str) + "\n")
    elif text:
        out.write(text if text.endswith("\n") else text + "\n")
    out.flush()


def emit_done(data: dict[str, Any], text: str, *, json_mode: bool, code: int = 0, outcome: str = "completed") -> None:
    """Print what a command did: under --json one object ``{"outcome": "completed", "exit_code": 0, **data}`` (the
    outcome vocabulary of every command; ``exit_code`` is this process's status), else ``text``."""
    emit({"outcome": outcome, "exit_code": code, **data}, text, json_mode=json_mode)


def progress(message: str, *, json_mode: bool) -> None:
    """Narrate a long step on stderr when a person is watching; quiet under --json."""
    if not json_mode:
        sys.stderr.write(f"==> {message}\n")
        sys.stderr.flush()


def fail(message: str, *, code: int, json_mode: bool, outcome: str = "error") -> NoReturn:
    """Report an error (JSON on stdout under --json, text on stderr otherwise or when stdout was closed) and exit
    with ``code``."""
    if json_mode and sys.stdout is not None:
        sys.stdout.write(json.dumps({"outcome": outcome, "error": message, "exit_code": code}) + "\n")
    else:
        sys.stderr.write(f"error: {message}\n")
    raise typer.Exit(code)


@dataclass(frozen=True)
class Failure:
    """How the CLI reports an exception: this process's exit status, the JSON ``outcome`` and one line."""

    code: int
    outcome: str
    message: str


def _leaves(exc: BaseException) -> list[BaseException]:
    # Nurseries wrap what a body raised in (nested) groups; the leaves are what happened.
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _one_line(text: str) -> str:
    return " ".join(text.split())


def failure_of(exc: BaseException) -> Failure:
    """Map an exception that escaped a command to its exit code (the table in this module's docstring).

    A group is judged by its leaves: an interrupt wins, then the executor's own errors, then the first leaf.
    """
    leaves = _leaves(exc)
    if any(isinstance(leaf, KeyboardInterrupt) for leaf in leaves):
        return Failure(EXIT_INTERRUPTED, "cancelled", "interrupted")
    leaf = next((one for one in leaves if isinstance(one, ExecutorError | OutputFailed)), leaves[0])
    if isinstance(leaf, OutputFailed):
        return Failure(leaf.code, "error", leaf.message)
    if isinstance(leaf, SessionStopped):
        return Failure(EXIT_INTERRUPTED, "cancelled", str(leaf))
    if isinstance(leaf, ApprovalRequired):
        return Failure(EXIT_BLOCKED, "blocked", str(leaf))
    if isinstance(leaf, ActionDenied | ApprovalInvalidated):
        return Failure(EXIT_DENIED, "denied", str(leaf))
    if isinstance(leaf, _USAGE_ERRORS):
        return Failure(EXIT_USAGE, "error", str(leaf))
    if isinstance(leaf, ExecutorError):
        return Failure(EXIT_FAILURE, "error", str(leaf))
    if isinstance(leaf, OSError) and leaf.errno in (errno.ENOSPC, errno.EDQUOT):
        where = f" writing {leaf.filename}" if leaf.filename else ""
        return Failure(
            EXIT_FAILURE, "error", f"no space left on the device{where}; free space under the executor's home and retry"
        )
    if isinstance(leaf, OSError):
        where = f": {leaf.filename}" if leaf.filename else ""
        return Failure(EXIT_FAILURE, "error", f"{_one_line(leaf.strerror or str(leaf))}{where}")
    if isinstance(leaf, MemoryError):
        return Failure(EXIT_FAILURE, "error", "out of memory")
    detail = _one_line(str(leaf))[:300]
    return Failure(
        EXIT_FAILURE,
        "error",
        f"internal error ({type(leaf).__name__}{': ' + detail if detail else ''}); "
        "rerun with `executor --debug ...` for the traceback and report it",
    )


_PASS_THROUGH: Final = (typer.Exit, typer.Abort, typer.TyperException, SystemExit)
"""What the command-line framework itself raises to end a command (exit codes, usage errors)."""


def _stdout_gone() -> bool:
    """Whether stdout's reader went away (``executor ... | head``): the framework then ends quietly."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        events = poller.poll(0)
    except (OSError, ValueError):
        return False
    return any(event & select.POLLERR for _, event in events)


def _json_requested(args: Sequence[str]) -> bool:
    end = list(args).index("--") if "--" in args else len(args)
    return "--json" in args[:end]


def _usage_error_json(exc: UsageError) -> NoReturn:
    where = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
    fail(f"{_one_line(exc.format_message())}{where}", code=EXIT_USAGE, json_mode=True)


class GuardedGroup(TyperGroup):
    """The root command: every command below it runs under the one exit-code wrapper (:func:`failure_of`), and
    under ``--json`` a usage error (an unknown option or command, a missing argument) is the error object on stdout
    rather than the usage box on stderr."""

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        json_mode = _json_requested(args)
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except UsageError as exc:
            if json_mode:
                _usage_error_json(exc)
            raise

    def invoke(self, ctx: Any) -> Any:  # typer's own (vendored) click Context
        try:
            return super().invoke(ctx)
        except UsageError as exc:
            obj = ctx.obj
            if obj.json if isinstance(obj, CliState) else bool(ctx.params.get("json_output")):
                _usage_error_json(exc)
            raise
        except _PASS_THROUGH:
            raise
        except BaseException as exc:
            if isinstance(exc, BrokenPipeError) and _stdout_gone():
                raise
            gone = next((leaf for leaf in _leaves(exc) if isinstance(leaf, OutputFailed)), None)
            if gone is not None and gone.quiet:
                raise typer.Exit(gone.code) from None  # our reader went away: 141, nothing to say (a shell's way)
            obj = ctx.obj
            json_mode = obj.json if isinstance(obj, CliState) else bool(ctx.params.get("json_output"))
            debug = obj.debug if isinstance(obj, CliState) else bool(ctx.params.get("debug"))
            failure = failure_of(exc)
            if debug and failure.code not in (EXIT_USAGE, EXIT_INTERRUPTED):
                sys.stderr.write("".join(traceback.format_exception(exc)))
            raise fail(failure.message, code=failure.code, json_mode=json_mode, outcome=failure.outcome) from exc
