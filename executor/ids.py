"""Every identifier the executor hands out: its format, how it is made, and how it is checked (pure, foundation).

An id that arrives from outside (a tool call, a CLI argument, a container label) is validated here before any path,
container name or database key is derived from it. Formats:

======================  =================================  =========================================================
id                      example                            made by
======================  =================================  =========================================================
session                 ``s-0123456789ab``                 :func:`new_session_id` (48 random bits)
session name            ``build-7``                        the user; :func:`validate_session_name`
artifact                ``s-0123456789ab.a3``              :func:`artifact_id` (the session's store, in sequence)
action                  ``s-0123456789ab.x18c2f3a1b2c7``   :func:`new_action_id` (session, clock, sequence)
background task         ``t3``                             the in-container agent (a counter); :func:`is_task_id`
approval                ``ap-0123456789abcdef``            :func:`new_approval_id` (64 random bits)
image reference         ``base``, ``repo/x:1.2@sha256:…``  the operator; :func:`is_image_ref` (Docker's grammar)
judgment                ``j-<32 hex>``                     :func:`new_judgment_id` (:func:`unique_hex`)
======================  =================================  =========================================================

A session id and an artifact id can be told apart from a session name: a name never has the shape of an id.
"""

from __future__ import annotations

import itertools
import os
import re
from typing import Final

from executor.errors import SessionNotFound, SessionRejected

__all__ = [
    "ARTIFACT_ID_PATTERN",
    "SESSION_ID_PATTERN",
    "TASK_ID_PATTERN",
    "artifact_id",
    "is_image_ref",
    "is_session_id",
    "is_task_id",
    "new_action_id",
    "new_approval_id",
    "new_judgment_id",
    "new_session_id",
    "parse_artifact_id",
    "unique_hex",
    "validate_session_id",
    "validate_session_name",
]

SESSION_ID_PATTERN: Final = r"s-[0-9a-f]{12}"
"""A session id: ``s-`` and 12 lowercase hex digits."""
ARTIFACT_ID_PATTERN: Final = rf"({SESSION_ID_PATTERN})\.a([1-9][0-9]{{0,11}})"
"""An artifact id: its owning session's id, ``.a`` and its sequence number in that session (from 1)."""
TASK_ID_PATTERN: Final = r"t[1-9][0-9]{0,19}"
"""A background task id as the agent numbers them: ``t`` and a counter from 1."""

_SESSION_ID: Final = re.compile(SESSION_ID_PATTERN)
_ARTIFACT_ID: Final = re.compile(ARTIFACT_ID_PATTERN)
_TASK_ID: Final = re.compile(TASK_ID_PATTERN)
_SESSION_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")

# Docker's reference grammar (distribution/reference): [domain[:port]/]component(/component)*[:tag][@digest].
_DOMAIN_PART: Final = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN: Final = rf"{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]+)?"
_COMPONENT: Final = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_REF: Final = re.compile(
    rf"(?P<name>(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*)"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?"
)
_IMAGE_NAME_MAX: Final = 255


def new_session_id() -> str:
    """A fresh session id: ``s-`` and 12 lowercase hex digits (48 random bits)."""
    return "s-" + os.urandom(6).hex()  # what secrets.token_hex does; the thin CLI does not load secrets


def is_session_id(value: object) -> bool:
    """Whether ``value`` is a string with a session id's shape (whether such a session exists is not asked)."""
    return isinstance(value, str) and _SESSION_ID.fullmatch(value) is not None


def validate_session_id(session_id: str) -> str:
    """Return ``session_id`` if it is well formed; derive no path or name from an id before this.

    Raises:
        SessionNotFound: malformed (the same error as an unknown id: no oracle).
    """
    if not is_session_id(session_id):
        raise SessionNotFound(f"no session {session_id!r}; `executor session ls` lists them")
    return session_id


def is_image_ref(value: object) -> bool:
    """Whether ``value`` is an image reference by Docker's grammar (a name, a ``name:tag``, a digest, an image id):
    checked before any engine call is made with it, so a value such as ``../containers/x`` never reaches a URL."""
    if not isinstance(value, str):
        return False
    match = _IMAGE_REF.fullmatch(value)
    return match is not None and len(match.group("name")) <= _IMAGE_NAME_MAX


def validate_session_name(name: str) -> str:
    """Return ``name`` if it is a usable session name (letters, digits, ``_.-``, up to 63 characters).

    Raises:
        SessionRejected: the name is not usable (a ValueError); the message says what is allowed.
    """
    if not isinstance(name, str) or not _SESSION_NAME.fullmatch(name) or is_session_id(name):
        raise SessionRejected(
            f"session name {name!r} must be 1-63 letters, digits, '_', '.' or '-', start with a letter or digit, "
            "and not look like a session id"
        )
    return name


def artifact_id(session_id: str, seq: int) -> str:
    """The id of the ``seq``-th artifact (from 1) of ``session_id``.

    Raises:
        ValueError: ``session_id`` is malformed or ``seq`` is out of range (1 to 12 digits).
    """
    made = f"{session_id}.a{seq}"
    if parse_artifact_id(made) is None:
        raise ValueError(f"no artifact id can be made from session {session_id!r} and sequence {seq!r}")
    return made


def parse_artifact_id(value: object) -> tuple[str, int] | None:
    """The owning session id and the sequence number of an artifact id; None when ``value`` is not one."""
    if not isinstance(value, str):
        return None
    match = _ARTIFACT_ID.fullmatch(value)
    if match is None:
        return None
    return match.group(1), int(match.group(2))


def is_task_id(value: object) -> bool:
    """Whether ``value`` has the shape of a background task id the agent hands out."""
    return isinstance(value, str) and _TASK_ID.fullmatch(value) is not None


def new_action_id(session_id: str, seq: int, *, now_ms: int) -> str:
    """An action id: unique within the session by its ``seq`` and across restarts of the host process by the
    clock (``now_ms``, milliseconds since the epoch) the caller reads.

    Format: ``<session>.x<now_ms in hex><seq in decimal>``.
    """
    return f"{session_id}.x{now_ms:x}{seq}"


def new_approval_id() -> str:
    """A fresh approval id: ``ap-`` and 16 lowercase hex digits (64 random bits)."""
    return f"ap-{os.urandom(8).hex()}"


def new_judgment_id() -> str:
    """A fresh, unique judgment id: ``j-`` and :func:`unique_hex`'s 32 hex digits."""
    return f"j-{unique_hex()}"


class _Unique:
    """A random 64-bit prefix drawn once per process (again in a forked child) and a counter after it."""

    def __init__(self) -> None:
        self.draw()
        os.register_at_fork(after_in_child=self.draw)

    def draw(self) -> None:
        self.prefix = os.urandom(8).hex()
        self.counter = itertools.count()


_UNIQUE: Final = _Unique()


def unique_hex() -> str:
    """32 lowercase hex digits no other call returns, in this process or any other: a random 64-bit prefix of the
    process (drawn again after a fork) and a 64-bit counter. Unique, not unpredictable (for record ids, never for
    secrets or tokens); one ``getrandom`` per process instead of one per id, as ``uuid4`` pays."""
    return f"{_UNIQUE.prefix}{next(_UNIQUE.counter):016x}"
