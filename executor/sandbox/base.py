"""The backend contract: where sessions live (container lifecycle), apart from what runs in them.

A backend opens a session (a hardened container whose PID 1 is the executor's agent), hands out byte streams to
that agent, reports status, lists, finds, stops and garbage-collects sessions. What flows over the stream (the
agent protocol) is not the backend's business. A new backend (Kubernetes later) is a new folder under
``executor/sandbox/`` that passes :mod:`executor.testing.conformance`.
"""

from __future__ import annotations

import re
import secrets
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Final, Literal

import trio
from pydantic import BaseModel, ConfigDict

from executor.config import Profile, Settings
from executor.errors import SessionNotFound

__all__ = [
    "Backend",
    "ContainerState",
    "SessionInfo",
    "SessionStatus",
    "new_session_id",
    "open_backend",
    "validate_session_id",
    "validate_session_name",
]

SessionStatus = Literal["running", "exited", "missing"]
"""Coarse status: the agent's container runs, has stopped (or never started), or is gone."""

ContainerState = Literal["created", "running", "paused", "restarting", "removing", "exited", "dead"]
"""The engine's state of a session container."""

_SESSION_ID_RE: Final = re.compile(r"^s-[0-9a-f]{12}$")
_NAME_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


def new_session_id() -> str:
    """A fresh session id: ``s-`` and 12 lowercase hex digits (48 random bits)."""
    return "s-" + secrets.token_hex(6)


def validate_session_id(session_id: str) -> str:
    """Return ``session_id`` if it is well formed; derive no path or name from an id before this.

    Raises:
        SessionNotFound: malformed (the same error as an unknown id: no oracle).
    """
    if not isinstance(session_id, str) or not _SESSION_ID_RE.match(session_id):
        raise SessionNotFound(f"no session {session_id!r}; `executor session ls` lists them")
    return session_id


def validate_session_name(name: str) -> str:
    """Return ``name`` if it is a usable session name (letters, digits, ``_.-``, up to 63 characters).

    Raises:
        ValueError: the name is not usable; the message says what is allowed.
    """
    if not _NAME_RE.match(name) or _SESSION_ID_RE.match(name):
        raise ValueError(
            f"session name {name!r} must be 1-63 letters, digits, '_', '.' or '-', start with a letter or digit, "
            "and not look like a session id"
        )
    return name


class SessionInfo(BaseModel):
    """One session as the backend sees it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    """The executor's session id (``s-`` + 12 hex)."""
    name: str | None
    """The optional name given at start (unique among live sessions)."""
    container_id: str
    """The engine's container id."""
    image: str
    """The image the container runs."""
    profile: str
    """The profile name the session was opened with."""
    state: ContainerState
    """The container's state when this was read."""
    created_at: datetime
    """When the session was opened (UTC)."""
    owner: str | None
    """The opaque owner given at start (for example an MCP client token's id); never interpreted here."""
    transport: Literal["socket", "exec"]
    """How the host reaches the agent: a unix socket in a host folder, or an exec bridge."""
    labels: dict[str, str]
    """The container's labels (ownership and bookkeeping)."""


class Backend(ABC):
    """Opens, reaches, lists and removes sessions. Every method is safe to call from several tasks at once."""

    @abstractmethod
    async def open_session(
        self,
        *,
        profile: Profile,
        profile_name: str,
        name: str | None = None,
        owner: str | None = None,
    ) -> SessionInfo:
        """Create the session's workspace volume and container, start it, and wait until the agent accepts a
        connection. On any failure (or cancellation) nothing is left behind.

        Raises:
            ValueError: ``name`` is malformed or already used by a live session.
            ImageError: the profile's image cannot be found, pulled or built.
            AgentError: the agent did not accept a connection within ``agent.connect_timeout_s``, or it exited.
            EngineUnavailable: no engine answers.
            EngineError: the engine refused a call.
        """

    @abstractmethod
    async def connect(self, session_id: str) -> trio.abc.HalfCloseableStream:
        """A new byte stream to the session's agent; the caller closes it. Many may be open at once.

        Raises:
            SessionNotFound: malformed or unknown id.
            SandboxLost: the container is gone or not running.
            AgentError: the agent does not accept the connection.
            EngineUnavailable: no engine answers.
        """

    @abstractmethod
    async def status(self, session_id: str) -> SessionStatus:
        """``running``, ``exited`` (stopped, crashed or never started) or ``missing``.

        Raises:
            SessionNotFound: malformed id.
            EngineUnavailable: no engine answers.
        """

    @abstractmethod
    async def stop_session(self, session_id: str) -> None:
        """Stop and remove the container, its workspace volume and host-side files. Idempotent: an unknown
        (well-formed) id is not an error.

        Raises:
            SessionNotFound: malformed id.
            EngineUnavailable: no engine answers.
            EngineError: the engine refused the removal.
        """

    @abstractmethod
    async def list_sessions(self, *, owner: str | None = None) -> list[SessionInfo]:
        """Every session of ours (all owners, or only ``owner``'s), in any state, oldest first.

        Raises:
            EngineUnavailable: no engine answers.
        """

    @abstractmethod
    async def find_session(self, id_or_name: str) -> SessionInfo:
        """The session with this id or name.

        Raises:
            SessionNotFound: no such session.
            EngineUnavailable: no engine answers.
        """

    @abstractmethod
    async def gc(self) -> list[str]:
        """Remove what sessions left behind: our labelled containers that are Created (older than
        ``docker.gc_min_age_s``), Exited or dead, and our workspace volumes whose container is gone. Never touches
        anything without our labels. Returns the removed containers' and volumes' names.

        Raises:
            EngineUnavailable: no engine answers.
        """

    @abstractmethod
    async def aclose(self) -> None:
        """Release the backend's connections (sessions keep running)."""


@asynccontextmanager
async def open_backend(settings: Settings) -> AsyncIterator[Backend]:
    """The configured backend (the Docker engine), closed on exit.

    Raises:
        EngineUnavailable: no engine answers; the message says how to start one.
    """
    # Imported here so that this contract never imports docker itself.
    from executor.sandbox.docker import DockerBackend

    backend = await DockerBackend.create(settings)
    try:
        yield backend
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(5):
            await backend.aclose()
