"""The backend contract: where sessions live (container lifecycle), apart from what runs in them.

A backend opens a session (a hardened container whose PID 1 is the executor's agent), hands out byte streams to
that agent, reports status, lists, finds, stops and garbage-collects sessions. What flows over the stream (the
agent protocol) is not the backend's business. A new backend (Kubernetes later) is a new folder under
``executor/sandbox/`` that passes :mod:`executor.testing.conformance`.

Backends are chosen by name (``Settings.backend``) from a registry: public contract here, private backends loaded
by name. A built-in backend is registered as ``"module:attribute"`` and imported only when it is opened, so this
contract never imports ``docker``; another one is added with :func:`register_backend`.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Literal, cast

import trio
from pydantic import BaseModel, ConfigDict

from executor.config import Profile, Settings
from executor.errors import ConfigError

__all__ = [
    "Backend",
    "BackendFactory",
    "BeforeStop",
    "ContainerState",
    "GcReport",
    "SessionInfo",
    "SessionStatus",
    "backend_names",
    "open_backend",
    "register_backend",
]

SessionStatus = Literal["running", "exited", "missing"]
"""Coarse status: the agent's container runs, has stopped (or never started), or is gone."""

ContainerState = Literal["created", "running", "paused", "restarting", "removing", "exited", "dead"]
"""The engine's state of a session container."""


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
    workspace_only: bool = False
    """The container is gone (``gc`` removed it after it stopped) but this named session's workspace volume is
    kept: starting the name again (``exec --session NAME --create``, ``session start --name NAME``) recreates the
    container on it; stopping the session deletes it. ``state`` is then ``exited`` and ``container_id`` empty."""
    pooled: bool = False
    """Created ahead of time by a warm pool and since claimed (``created_at`` is the pool's creation time)."""
    idle_limit_s: float | None = None
    """The session's stored idle limit in seconds (None: no limit); past it with nothing running, the service,
    ``gc`` and start-up clean-up stop the session (a named one keeps its workspace)."""
    last_used_at: datetime | None = None
    """When its last command or call ended (UTC; read from the host-side usage file, see
    :mod:`executor.sandbox.usage`); None when none has ended since its container was created."""
    busy: bool = False
    """A command or call runs in it now (never idle then)."""

    @property
    def stopped_named(self) -> bool:
        """A named session whose container stopped or is gone, its workspace kept (its name starts it again)."""
        return self.name is not None and self.state in ("exited", "dead")

    @property
    def half_made(self) -> bool:
        """A named session whose container was created and never started. Seen by a caller holding the name's lock
        (:func:`executor.sandbox.names.name_lock`, under which sessions are made), it is what a creator killed
        midway left: nobody is making it, and it is recreated like a stopped one."""
        return self.name is not None and self.state == "created"

    def not_running_message(self) -> str:
        """What to tell a caller who asked for this stopped named session, and how to go on."""
        container = "is gone" if self.workspace_only else "stopped"
        return (
            f"session {self.name} is not running (its container {container}; its workspace is kept): "
            f"`executor exec --session {self.name} --create` or `executor session start --name {self.name}` "
            f"recreates its container on that workspace, `executor session stop {self.name}` deletes it"
        )

    def idle_for_s(self, now: datetime) -> float:
        """Seconds it has been idle at ``now``: since its last use, or since it was created (0 while busy)."""
        if self.busy:
            return 0.0
        since = max(self.created_at, self.last_used_at) if self.last_used_at is not None else self.created_at
        return max(0.0, (now - since).total_seconds())


class GcReport(BaseModel):
    """What :meth:`Backend.gc` removed and what it kept on purpose."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    removed: tuple[str, ...] = ()
    """Names of the removed containers and volumes."""
    kept: tuple[str, ...] = ()
    """Workspace volumes of named sessions whose container was removed or is gone: kept until the session is
    stopped."""
    idle_stopped: tuple[str, ...] = ()
    """Sessions (names, or ids) stopped because they were idle past their limit (their containers are also in
    ``removed``, a named one's workspace in ``kept``)."""


BeforeStop = Callable[[SessionInfo], Awaitable[None]]
"""Awaited with a session an idle stop is about to stop (see :meth:`Backend.stop_idle`)."""


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
        pooled: bool = False,
        held: bool = False,
        idle_limit_s: float | Literal["none", "default"] = "default",
    ) -> SessionInfo:
        """Create the session's workspace volume and container, start it, and wait until the agent accepts a
        connection. On any failure (or cancellation) nothing is left behind.

        ``idle_limit_s`` is stored with a named session (seconds, or ``"none"``); ``"default"`` keeps the limit of
        the stopped named session whose workspace this reuses, else ``sessions.idle_s``. Unnamed sessions store none
        (the process that holds one decides).

        ``pooled`` makes a warm pool's session: unnamed, with no owner, ending itself after ``agent.orphan_exit_s``
        without a host connection, marked as held by this backend's process, and hidden from
        :meth:`list_sessions` and :meth:`find_session` until :meth:`claim_session` gives it its owner. ``name`` and
        ``owner`` must be None then.

        ``held`` marks an unnamed session this process removes when it is done with it (not one kept for later
        calls): should the process be killed first, :meth:`gc` in any process of the home removes it at once instead
        of leaving it to ``agent.orphan_exit_s``. ``name`` must be None then.

        A caller giving ``name`` holds the name's lock (:func:`executor.sandbox.names.name_lock`): a container of
        that name left in Created (its creator was killed midway) is then replaced, on its workspace.

        Raises:
            SessionRejected: ``name`` is malformed; SessionNameTaken (a SessionRejected): it is used by a live
                session, or kept for another owner.
            ImageError: the profile's image cannot be found, pulled or built.
            AgentError: the agent did not accept a connection within ``agent.connect_timeout_s``, or it exited.
            EngineUnavailable: no engine answers.
            EngineError: the engine refused a call.
        """

    @abstractmethod
    async def claim_session(self, session_id: str, *, owner: str | None, held: bool = False) -> None:
        """Give a pooled session its owner and make it visible to :meth:`list_sessions` and :meth:`find_session`
        (the owner is kept host-side: a container's labels cannot change). No engine call: it must be fast.

        ``held``: this process removes the session when done with it (see :meth:`open_session`); should the process
        be killed first, :meth:`gc` removes it. Without it a claimed session is kept until stopped.

        Raises:
            SessionNotFound: malformed id.
            ValueError: the session was already claimed (a pooled session is handed out once).
        """

    @abstractmethod
    async def image_id(self, image: str) -> str | None:
        """The engine's current id of the image a profile names (a folder under ``images/`` or a reference), or
        None when there is none yet; nothing is built. A change means the image was rebuilt.

        Raises:
            EngineUnavailable: no engine answers.
        """

    @abstractmethod
    async def connect(self, session_id: str) -> trio.abc.HalfCloseableStream:
        """A new byte stream to the session's agent; the caller closes it. Many may be open at once.

        Raises:
            SessionNotFound: malformed or unknown id.
            SessionUnhealthy: the session was marked unhealthy (:meth:`mark_unhealthy`) and not stopped since.
            SandboxLost: the container is gone or not running.
            AgentError: the agent does not accept the connection.
            EngineUnavailable: no engine answers.
        """

    @abstractmethod
    def mark_unhealthy(self, session_id: str, reason: str) -> None:
        """Record (on the host, outside the sandbox) that the session's agent stopped answering, so that every
        later :meth:`connect`, from any process, refuses it with :class:`SessionUnhealthy` until
        :meth:`stop_session`. Synchronous: it is called from inside a failing call. Never raises on I/O errors.
        """

    @abstractmethod
    async def status(self, session_id: str) -> SessionStatus:
        """``running``, ``exited`` (stopped, crashed or never started) or ``missing``.

        Raises:
            SessionNotFound: malformed id.
            EngineUnavailable: no engine answers.
        """

    @abstractmethod
    async def stop_session(self, session_id: str, *, keep_workspace: bool = False) -> None:
        """Stop and remove the container, its workspace volume (unless ``keep_workspace``: a named session then
        stays listed with ``workspace_only`` and its name starts it again) and host-side files (an unhealthy mark
        too). Idempotent: an unknown (well-formed) id is not an error.

        Raises:
            SessionNotFound: malformed id.
            EngineUnavailable: no engine answers.
            EngineError: the engine refused the removal.
        """

    @abstractmethod
    async def was_stopped(self, session_id: str) -> bool:
        """Whether the session is being stopped or is gone (a stop in any process of the home, its idle limit, or its
        container removed): a run whose agent went away was then cut short on purpose, not lost to a failure (a
        container that died on its own is still there, exited).

        Raises:
            SessionNotFound: malformed id.
            EngineUnavailable: no engine answers.
        """

    @abstractmethod
    async def list_sessions(self, *, owner: str | None = None, all_homes: bool = False) -> list[SessionInfo]:
        """Every session of this executor home (of every home with ``all_homes``), of all owners or only
        ``owner``'s, in any state, oldest first; a named session whose container is gone but whose workspace is
        kept is listed with ``workspace_only``.

        Raises:
            EngineUnavailable: no engine answers.
        """

    @abstractmethod
    async def find_session(self, id_or_name: str, *, all_homes: bool = False) -> SessionInfo:
        """The session with this id or name, among this home's sessions (every home's with ``all_homes``).

        Raises:
            SessionNotFound: no such session.
            EngineUnavailable: no engine answers.
        """

    @abstractmethod
    async def gc(
        self, *, all_homes: bool = False, skip: frozenset[str] = frozenset(), before_stop: BeforeStop | None = None
    ) -> GcReport:
        """Remove what this home's sessions (every home's with ``all_homes``) left behind: our labelled
        containers that are Created (older than ``docker.gc_min_age_s``), Exited or dead, unclaimed pooled ones
        whose pool's process is gone, and the workspace volumes of unnamed sessions whose container is gone; and
        stop the sessions idle past their stored limit (:meth:`stop_idle`, which leaves the ids in ``skip`` alone and
        awaits ``before_stop`` on each first). A
        named session's workspace volume is never removed here (only by stopping that session): its stopped
        container goes, its data stays and is reported as kept.
        Never touches anything without our labels.

        Raises:
            EngineUnavailable: no engine answers.
        """

    @abstractmethod
    async def stop_idle(self, *, skip: frozenset[str] = frozenset(), before_stop: BeforeStop | None = None) -> GcReport:
        """Stop this home's sessions idle past their stored limit (see :attr:`SessionInfo.idle_limit_s`), except
        the ids in ``skip`` (sessions the caller holds and judges itself): a named session's container is removed
        and its workspace volume kept; a session with a command running is never idle. ``before_stop`` is awaited
        with each session about to be stopped, while no call can start in it (the executor stops its background
        tasks there and keeps their output). :meth:`gc` does this too.

        Raises:
            EngineUnavailable: no engine answers.
        """

    @abstractmethod
    async def aclose(self) -> None:
        """Release the backend's connections (sessions keep running)."""


BackendFactory = Callable[[Settings], Awaitable[Backend]]
"""Connects a backend from the settings (for example ``DockerBackend.create``); its errors are the backend's."""

_BACKENDS: dict[str, BackendFactory | str] = {"docker": "executor.sandbox.docker:DockerBackend.create"}
"""Registered backends by name: a factory, or where to import one from (``module:attribute``, loaded lazily)."""


def register_backend(name: str, factory: BackendFactory | str) -> None:
    """Make ``factory`` (or the ``module:attribute`` it names, imported when first opened) the backend ``name``.

    Raises:
        ValueError: ``name`` is already registered (a backend is never silently replaced).
    """
    if name in _BACKENDS:
        raise ValueError(f"a backend named {name!r} is already registered")
    _BACKENDS[name] = factory


def backend_names() -> tuple[str, ...]:
    """The registered backend names, sorted."""
    return tuple(sorted(_BACKENDS))


def _factory(name: str) -> BackendFactory:
    entry = _BACKENDS.get(name)
    if entry is None:
        raise ConfigError(f"no backend named {name!r}; known backends: {', '.join(backend_names())}")
    if isinstance(entry, str):
        module_name, _, attribute = entry.partition(":")
        found: object = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
        if not callable(found):
            raise ConfigError(f"backend {name!r} names {entry!r}, which is not a factory")
        entry = _BACKENDS[name] = cast(BackendFactory, found)
    return entry


@asynccontextmanager
async def open_backend(settings: Settings) -> AsyncIterator[Backend]:
    """The backend ``settings.backend`` names (``docker`` by default), closed on exit.

    Raises:
        ConfigError: no backend has that name; the message lists the known ones.
        EngineUnavailable: no engine answers; the message says how to start one.
    """
    backend = await _factory(settings.backend)(settings)
    try:
        yield backend
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(5):
            await backend.aclose()
