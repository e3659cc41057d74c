"""The bash tool: validate a call, build the exact run, and hand it to the in-container agent.

Each call is a fresh, non-login ``bash -c COMMAND`` (no rc files, no state between calls) in its own process
group, supervised by the agent: the deadline is enforced inside the container, the whole group is killed with
SIGTERM then SIGKILL, and what escaped the group is found and listed (see ``executor/sandbox/agent/PROTOCOL.md``).

This module decides nothing about permission (the gate does) and stores nothing (the capture sink does).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Final

from executor.config import BashSettings, Profile
from executor.errors import CommandRejected, SpawnFailed
from executor.models import RunSpec, StdinFile

__all__ = ["build_run_spec", "check_utf8", "cwd_rejection", "resolve_cwd"]

_ARG_STRLEN: Final = 128 * 1024
"""The kernel's bound on one argument or environment string, its NUL included (``MAX_ARG_STRLEN``)."""
_PATH_MAX: Final = 4096
"""The kernel's bound on a path, its NUL included (``PATH_MAX``)."""


def check_utf8(text: str, what: str) -> None:
    """Refuse text that cannot be sent as UTF-8 (undecodable bytes arrive as lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CommandRejected(
            f"{what} is not valid UTF-8 (an undecodable byte at character {exc.start}); pass text, and put binary "
            "data in a file (write_file) or on stdin"
        ) from None


def resolve_cwd(cwd: str | None, profile: Profile) -> str:
    """The absolute working directory of a call: the workspace by default, relative paths inside it.

    Raises:
        CommandRejected: the cwd has a NUL or newline, is not valid UTF-8, is longer than a path, or leads out of the
            workspace (a relative path, or an absolute one into the workspace, that normalises outside it).
    """
    if cwd is None or cwd == "":
        return profile.workspace
    if "\0" in cwd or "\n" in cwd:
        raise CommandRejected("cwd contains a NUL or newline; pass a plain directory path")
    check_utf8(cwd, "cwd")
    if len(cwd.encode("utf-8", "surrogateescape")) >= _PATH_MAX:
        raise CommandRejected(f"cwd is longer than a path can be ({_PATH_MAX - 1} bytes); pass a shorter path")
    workspace = profile.workspace.rstrip("/") or "/"
    joined = cwd if cwd.startswith("/") else f"{workspace}/{cwd}"
    if _inside(joined, workspace) and not _inside(posixpath.normpath(joined), workspace):
        # A relative cwd (or an absolute one into the workspace) whose ``..`` climbs out of it: a path meant to be
        # inside the workspace that is not is bad input, not a directory to start in.
        raise CommandRejected(
            f"cwd {cwd!r} leads out of the workspace (to {posixpath.normpath(joined)}); pass a directory inside "
            f"the workspace ({workspace}), or an absolute path without '..'"
        )
    return joined


def _inside(path: str, folder: str) -> bool:
    return folder == "/" or path == folder or path.startswith(folder + "/")


def cwd_rejection(error: Exception, cwd: str) -> CommandRejected | None:
    """The caller's error hidden in the agent's refusal to start a command in ``cwd`` (the directory is missing,
    not a directory, or not enterable by the session user), or None when ``error`` is something else."""
    if not isinstance(error, SpawnFailed):
        return None
    text = str(error)
    marker = "could not start the command: chdir: "
    if marker not in text:
        return None
    reason = text.split(marker, 1)[1].strip().rstrip(".")
    return CommandRejected(
        f"cwd {cwd!r} cannot be entered in the session ({reason}); pass an existing directory (relative paths are "
        "inside the workspace), or create it first with mkdir -p"
    )


def build_run_spec(
    command: str,
    *,
    settings: BashSettings,
    profile: Profile,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    stdin: bytes | StdinFile | None = None,
    timeout_ms: int | None = None,
    background: bool = False,
) -> RunSpec:
    """Validate one bash call and return the exact run the agent will perform.

    Args:
        command: the command string, run as ``bash -c COMMAND``.
        settings: the bash section of the settings.
        profile: the session's profile (workspace, user).
        cwd: working directory; None means the workspace; relative paths are inside the workspace.
        env: explicit environment entries; they are merged last and win, even on credential-shaped names.
        stdin: bytes (or a host file, streamed) written to the command's stdin, then closed; None means /dev/null.
        timeout_ms: per-call deadline; None means ``settings.timeout_ms``. Ignored for background tasks.
        background: a background task: no deadline applies and orphans are left to the task.

    Raises:
        CommandRejected: the command is empty or larger than ``max_command_bytes``, the timeout is not positive or
            above ``max_timeout_ms``, stdin is larger than ``max_stdin_bytes``, an env name is malformed, an env
            entry is past the kernel's bound or all of them past ``max_env_bytes``, the cwd is longer than a path,
            the command, the cwd or an env value holds a NUL, or one of them is not valid UTF-8.
    """
    size = len(command.encode("utf-8", "surrogateescape"))
    if not command.strip():
        raise CommandRejected("the command is empty; pass the bash command to run")
    if size > settings.max_command_bytes:
        raise CommandRejected(
            f"the command is {size} bytes, above the {settings.max_command_bytes}-byte limit (bash.max_command_bytes); "
            "write long scripts to a file with write_file and run that file instead"
        )
    if "\0" in command:
        raise CommandRejected("the command contains a NUL byte, which bash cannot receive; remove it")
    check_utf8(command, "the command")
    stdin_size = stdin.size if isinstance(stdin, StdinFile) else None if stdin is None else len(stdin)
    if stdin_size is not None and stdin_size > settings.max_stdin_bytes:
        raise CommandRejected(
            f"stdin is {stdin_size} bytes, above the {settings.max_stdin_bytes}-byte limit (bash.max_stdin_bytes)"
        )
    if isinstance(stdin, StdinFile) and background:
        raise CommandRejected("a background task's stdin travels inline: give bytes, not a file")
    env_bytes = 0
    for name, value in (env or {}).items():
        if not name or "=" in name or "\0" in name:
            raise CommandRejected(f"environment name {name!r} is malformed; names are non-empty and have no '=' or NUL")
        check_utf8(name, "an environment name")
        if "\0" in value:
            raise CommandRejected(f"the environment value of {name!r} contains a NUL byte, which no process receives")
        check_utf8(value, f"the environment value of {name!r}")
        entry = len(name.encode("utf-8", "surrogateescape")) + len(value.encode("utf-8", "surrogateescape")) + 2
        if entry > _ARG_STRLEN:
            raise CommandRejected(
                f"the environment entry {name!r} is {entry} bytes; Linux passes at most {_ARG_STRLEN} bytes per "
                "entry: write a large value to a file (write_file) and read it from there"
            )
        env_bytes += entry
    if env_bytes > settings.max_env_bytes:
        raise CommandRejected(
            f"the environment entries are {env_bytes} bytes, above the {settings.max_env_bytes}-byte limit "
            "(bash.max_env_bytes): write large values to a file (write_file) and read them from there"
        )
    deadline: int | None = None
    if not background:
        deadline = settings.timeout_ms if timeout_ms is None else timeout_ms
        if deadline <= 0:
            raise CommandRejected(f"timeout_ms must be positive, got {deadline}")
        if deadline > settings.max_timeout_ms:
            raise CommandRejected(
                f"timeout_ms {deadline} is above the cap of {settings.max_timeout_ms} ms (bash.max_timeout_ms); "
                "ask for at most the cap, or run it as a background task"
            )
    return RunSpec(
        command=command,
        cwd=resolve_cwd(cwd, profile),
        env=dict(env or {}),
        stdin=stdin,
        timeout_ms=deadline,
        grace_ms=settings.grace_ms,
        drain_ms=settings.drain_ms,
        kill_orphans=(settings.orphans == "kill") and not background,
    )
