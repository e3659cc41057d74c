"""Pure validation of write-tool paths, before anything reaches a container.

:func:`resolve_write_path` turns what a caller typed into the absolute, normalised path the in-container agent
receives, or refuses it with :class:`~executor.errors.PathRejected` and a message saying what to fix. It is lexical
only: ``..`` is resolved by name, which is exact here because the agent refuses every symlink on the path (a
lexical and a physical resolution can only differ through a symlink).

Imports neither trio nor docker.
"""

from __future__ import annotations

import posixpath
from typing import Final

from executor.errors import PathRejected

__all__ = ["BUILTIN_DENIALS", "SHELL_RC_FILES", "denial_rule", "resolve_write_path"]

_NAME_MAX_BYTES: Final = 255
"""Linux NAME_MAX: a component longer than this in UTF-8 cannot exist, whatever the character limit says."""
_PATH_MAX_BYTES: Final = 4095
"""Linux PATH_MAX minus the NUL: the agent refuses longer paths."""

SHELL_RC_FILES: Final = frozenset(
    {".bashrc", ".bash_profile", ".profile", ".zshrc", ".zprofile", ".bash_login", ".bash_logout"}
)
"""Shell start-up files: writing one plants code that runs in every later login or interactive shell."""

BUILTIN_DENIALS: Final = (".git/hooks/", ".git/config", "shell rc files", "~/.ssh/")
"""The static denials applied by default, by the names :func:`denial_rule` reports."""


def _reject(path: str, why: str) -> PathRejected:
    shown = path if len(path) <= 120 else path[:100] + f"... ({len(path)} characters)"
    return PathRejected(f"path {shown!r} {why}")


def denial_rule(path: str, *, home: str) -> str | None:
    """The built-in denial that covers a resolved absolute path, or None.

    Args:
        path: a resolved, normalised absolute path.
        home: the session user's home directory (absolute, no trailing slash).
    """
    parts = path.strip("/").split("/")
    for i, part in enumerate(parts[:-1]):
        if part == ".git" and parts[i + 1] == "hooks":
            return ".git/hooks/"
    if len(parts) >= 2 and parts[-2] == ".git" and parts[-1] == "config":
        return ".git/config"
    if parts[-1] in SHELL_RC_FILES:
        return "shell rc files"
    if path.startswith(home.rstrip("/") + "/.ssh/"):
        return "~/.ssh/"
    return None


def resolve_write_path(
    path: str,
    *,
    workspace: str,
    home: str,
    max_path_chars: int,
    max_component_chars: int,
    allow_outside_workspace: bool = False,
    builtin_denials: bool = True,
) -> str:
    """Validate ``path`` and return the absolute, normalised path to write.

    Relative paths are relative to ``workspace``; ``~`` and ``~/...`` are the session user's home. The result has
    no empty, ``.`` or ``..`` components and no trailing slash.

    Args:
        path: the path as the caller gave it.
        workspace: the session's workspace (absolute, no trailing slash).
        home: the session user's home (absolute, no trailing slash).
        max_path_chars: longest accepted path, in characters (``write.max_path_chars``).
        max_component_chars: longest accepted component, in characters (``write.max_component_chars``).
        allow_outside_workspace: accept targets outside the workspace (for when the gate can ask about them).
        builtin_denials: apply the default static denials (``.git/hooks/``, ``.git/config``, shell rc files,
            ``~/.ssh/``); the gate's policy files take them over when it is wired in.

    Raises:
        PathRejected: empty; too long; a NUL, newline, carriage return or other control character; not valid
            UTF-8; a ``..`` that climbs out of the workspace (or above ``/``); the workspace or ``/`` itself; outside
            the workspace while that is not allowed; or covered by a built-in denial. The message says what to fix.
    """
    if not path or not path.strip():
        raise PathRejected("the path is empty; give a file path relative to the workspace, like 'src/main.py'")
    if len(path) > max_path_chars:
        raise _reject(path, f"is longer than {max_path_chars} characters (write.max_path_chars); use a shorter path")
    if "\0" in path:
        raise _reject(path, "contains a NUL byte, which no file name can hold; remove it")
    if "\n" in path or "\r" in path:
        raise _reject(path, "contains a newline or carriage return; file names for this tool must be one line")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in path):
        raise _reject(path, "contains a control character; remove it")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise _reject(path, "is not valid UTF-8; use a path made of text characters") from None

    if path == "~" or path.startswith("~/"):
        base, rest, relative = home, path[2:], True
    elif path.startswith("/"):
        base, rest, relative = "/", path, False
    else:
        base, rest, relative = workspace, path, True

    if rest.split("/")[-1] in ("", ".", ".."):
        raise _reject(path, "ends with '/', '.' or '..', so it names a directory; end it with the file name")

    parts: list[str] = [p for p in base.split("/") if p]
    floor = len(parts) if relative else 0
    for comp in rest.split("/"):
        if comp in ("", "."):
            continue
        if comp == "..":
            if len(parts) <= floor:
                where = "the workspace" if base == workspace else ("your home" if relative else "/")
                raise _reject(path, f"climbs out of {where} with '..'; give the path without '..'")
            parts.pop()
            continue
        if len(comp) > max_component_chars or len(comp.encode("utf-8")) > _NAME_MAX_BYTES:
            raise _reject(
                path,
                f"has a component longer than {min(max_component_chars, _NAME_MAX_BYTES)} characters "
                f"(write.max_component_chars, or 255 bytes in UTF-8): {comp[:40]!r}...; shorten it",
            )
        parts.append(comp)
    resolved = "/" + "/".join(parts)
    if len(resolved) > max_path_chars or len(resolved.encode("utf-8")) > _PATH_MAX_BYTES:
        raise _reject(path, f"resolves to a path longer than {max_path_chars} characters; use a shorter path")
    if resolved == "/" or resolved == workspace:
        raise _reject(path, "names a directory, not a file; add the file name")

    inside = posixpath.commonpath([resolved, workspace]) == workspace
    if not inside and not allow_outside_workspace:
        raise _reject(
            path,
            f"resolves to {resolved}, outside the workspace; write under {workspace} (writes elsewhere need an "
            "approval the gate cannot ask for yet)",
        )
    if builtin_denials:
        rule = denial_rule(resolved, home=home)
        if rule is not None:
            raise _reject(
                path,
                f"is denied by the built-in rule {rule!r} (a file there can run code or grant access later); "
                "pick another path: only a policy can lift this rule",
            )
    return resolved
