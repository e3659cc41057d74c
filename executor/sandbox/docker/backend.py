"""The Docker backend: hardened session containers on a local or remote engine."""

from __future__ import annotations

import errno
import fcntl
import functools
import hashlib
import json
import os
import re
import secrets
import shutil
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

import trio

from executor.config import Profile, Settings
from executor.errors import (
    AgentError,
    EngineError,
    SandboxLost,
    SessionNameTaken,
    SessionNotFound,
    SessionUnhealthy,
)
from executor.ids import new_session_id, validate_session_id, validate_session_name
from executor.sandbox.base import (
    Backend,
    BeforeStop,
    ContainerState,
    GcReport,
    SessionInfo,
    SessionStatus,
)
from executor.sandbox.docker._agent import agent_binary, statx_shim
from executor.sandbox.docker._bridge import open_exec_stream
from executor.sandbox.docker._engine import DockerEngine
from executor.sandbox.docker.hardening import (
    AGENT_PATH,
    AGENT_SOCKET,
    LABEL_CREATED,
    LABEL_HOLDER,
    LABEL_HOME,
    LABEL_IDLE,
    LABEL_NAME,
    LABEL_OWNER,
    LABEL_POOL,
    LABEL_PROFILE,
    LABEL_SESSION,
    LABEL_TRANSPORT,
    Transport,
    container_kwargs,
    container_name,
    runtime_problem,
    volume_name,
)
from executor.sandbox.docker.images import current_image_id, ensure_agent_image, ensure_image
from executor.sandbox.names import name_lock
from executor.sandbox.usage import Usage, read_usage, usage_path

__all__ = ["DockerBackend", "home_identity"]

_SOCKET_NAME: Final = "agent.sock"
# sun_path holds 108 bytes; longer host paths are reached through /proc/self/fd/<dirfd>/agent.sock.
_SUN_PATH_MAX: Final = 100
_CLEANUP_BUDGET_S: Final = 15.0
_SESSION_LABELS: Final = frozenset(
    {
        LABEL_OWNER,
        LABEL_SESSION,
        LABEL_CREATED,
        LABEL_PROFILE,
        LABEL_NAME,
        LABEL_TRANSPORT,
        LABEL_HOME,
        LABEL_POOL,
        LABEL_HOLDER,
        LABEL_IDLE,
    }
)
_LEASE_RE: Final = re.compile(r"^[0-9a-f]{16}$")


def home_identity(home: Path) -> str:
    """The value of a session's ``executor.home`` label: 16 hex digits of the SHA-256 of the resolved home path."""
    return hashlib.sha256(os.path.realpath(home).encode("utf-8", "surrogateescape")).hexdigest()[:16]


def _now() -> datetime:
    return datetime.now(UTC)


def _parse_created(value: str | None) -> datetime:
    try:
        parsed = datetime.fromisoformat(value or "")
    except ValueError:
        return datetime.fromtimestamp(0, UTC)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _idle_label(value: float | None) -> str:
    return "none" if value is None else f"{value:g}"


def _parse_idle(value: str | None) -> float | None:
    """A stored idle limit; a missing or unreadable label is no limit (sessions made before limits existed)."""
    try:
        seconds = float(value or "none")
    except ValueError:
        return None
    return seconds if seconds > 0 and seconds == seconds else None


def _info(
    container_id: str,
    image: str,
    state: str,
    labels: dict[str, str],
    claim: dict[str, str | None] | None = None,
    *,
    workspace_only: bool = False,
    usage: Usage | None = None,
) -> SessionInfo:
    known: tuple[ContainerState, ...] = ("created", "running", "paused", "restarting", "removing", "exited", "dead")
    transport = labels.get(LABEL_TRANSPORT)
    pooled = bool(labels.get(LABEL_POOL))
    # A pooled container's labels were written before anyone claimed it; its owner lives in the home's claim.
    owner = (claim or {}).get("owner") if pooled else labels.get(LABEL_OWNER)
    return SessionInfo(
        id=labels[LABEL_SESSION],
        name=labels.get(LABEL_NAME) or None,
        container_id=container_id,
        image=image,
        profile=labels.get(LABEL_PROFILE, ""),
        state=next((s for s in known if s == state), "dead"),
        created_at=_parse_created(labels.get(LABEL_CREATED)),
        owner=owner or None,
        transport="exec" if transport == "exec" else "socket",
        labels={key: value for key, value in labels.items() if key in _SESSION_LABELS},
        workspace_only=workspace_only,
        pooled=pooled,
        idle_limit_s=_parse_idle(labels.get(LABEL_IDLE)),
        last_used_at=usage.last_used_at if usage is not None else None,
        busy=usage.busy if usage is not None else False,
    )


def _ours(labels: dict[str, str] | None) -> bool:
    if not labels:
        return False
    try:
        validate_session_id(labels.get(LABEL_SESSION, ""))
    except SessionNotFound:
        return False
    return True


_AGENT_EXITS: dict[int, str] = {
    3: "it could not drop its capabilities to KILL SETUID SETGID (capset refused: a runtime or seccomp profile that "
    "forbids it); the agent fails closed and no session is opened",
    4: "it could not restore its own filesystem ids (setfsuid refused); the agent fails closed",
}
"""The agent's own exit codes (PROTOCOL.md, "Exit codes") and what they mean for the session."""


def _startup_failure(session_id: str, code: object) -> str:
    """The message for an agent that exited before it accepted a connection."""
    reason = _AGENT_EXITS.get(code) if isinstance(code, int) else None
    if reason is not None:
        return f"the agent of {session_id} stopped during startup (exit code {code}): {reason}"
    return (
        f"the agent of {session_id} exited during startup (exit code {code}); "
        "check that the image runs the agent (a Linux image of the host's architecture)"
    )


class DockerBackend(Backend):
    """Sessions as hardened containers on a Docker engine (see :mod:`executor.sandbox.docker.hardening`).

    Build it with :meth:`create` (or :func:`executor.sandbox.base.open_backend`) and close it with :meth:`aclose`.
    """

    def __init__(self, engine: DockerEngine, settings: Settings) -> None:
        self.engine = engine
        """The engine connection (threads, retries, error mapping)."""
        self.settings = settings
        """The whole settings object (docker, images, agent sections and the home folder)."""
        self.home_id = home_identity(settings.home)
        """This home's identity (the ``executor.home`` label of the sessions it owns)."""
        self._runtimes: dict[str, dict[str, Any]] | None = None
        self._lease: tuple[str, int] | None = None

    @classmethod
    async def create(cls, settings: Settings) -> DockerBackend:
        """Connect to the configured engine.

        Raises:
            EngineUnavailable: no engine answers; the message says how to start one.
        """
        return cls(await DockerEngine.connect(settings.docker), settings)

    def transport_for(self, profile: Profile) -> Transport:
        """How a new session of ``profile`` is reached: ``socket`` needs a local engine and runc; ``exec`` works
        with any engine and runtime.

        Raises:
            AgentError: ``agent.transport = "socket"`` where it cannot work (a remote engine, or runsc).
        """
        chosen = self.settings.agent.transport
        if profile.runtime == "runsc":
            # gVisor serves the container's file system itself: a unix socket bound in a host-mounted folder is
            # a file there, not a way to the host.
            if chosen == "socket":
                raise AgentError(
                    "agent.transport 'socket' cannot reach an agent under runtime 'runsc' (a host-mounted unix "
                    "socket is not reachable across gVisor's file system); use 'auto' or 'exec'"
                )
            return "exec"
        if chosen == "auto":
            return "socket" if self.engine.is_local else "exec"
        if chosen == "socket" and not self.engine.is_local:
            raise AgentError("agent.transport 'socket' needs a local (unix://) engine; use 'exec' or 'auto'")
        return chosen

    async def runtimes(self) -> dict[str, dict[str, Any]]:
        """The OCI runtimes the engine has registered (``docker info``'s Runtimes: name -> path and arguments)."""
        if self._runtimes is None:
            info: dict[str, Any] = await self.engine.call(
                self.engine.client.api.info, what="read the engine's runtimes", idempotent=True
            )
            self._runtimes = dict(info.get("Runtimes") or {})
        return self._runtimes

    async def check_runtime(self, profile: Profile, profile_name: str) -> None:
        """Fail before anything is created when the engine cannot run the profile's runtime as needed.

        Raises:
            EngineError: the engine lacks the runtime (or runsc lacks its arguments); the message says how to
                register it.
        """
        problem = runtime_problem(profile.runtime, profile_name, self.settings.docker.base_url, await self.runtimes())
        if problem is not None:
            self._runtimes = None  # read again next time: the operator may register it meanwhile
            raise EngineError(problem)

    def _run_dir(self, session_id: str) -> Path:
        return self.settings.home / "run" / validate_session_id(session_id)

    def _unhealthy_path(self, session_id: str) -> Path:
        # Beside the run folder, not in it: the run folder is mounted into the container, and nothing in the
        # sandbox may clear its own mark.
        return self.settings.home / "run" / f"{validate_session_id(session_id)}.unhealthy"

    def _stopping_path(self, session_id: str) -> Path:
        # Beside the run folder too: a command cannot forge it.
        return self.settings.home / "run" / f"{validate_session_id(session_id)}.stopping"

    def mark_unhealthy(self, session_id: str, reason: str) -> None:
        """See :meth:`Backend.mark_unhealthy`."""
        path = self._unhealthy_path(session_id)
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            path.write_text(f"{_now().isoformat(timespec='seconds')} {reason}\n", encoding="utf-8")
        except OSError:
            pass  # best effort: this process's own client is broken for good anyway

    async def _check_healthy(self, info: SessionInfo) -> None:
        path = self._unhealthy_path(info.id)
        try:
            text = await trio.to_thread.run_sync(lambda: path.read_text(encoding="utf-8", errors="replace"))
        except FileNotFoundError:
            return
        except OSError:
            text = "(the mark cannot be read)"
        since, _, reason = text.strip().partition(" ")
        raise SessionUnhealthy(
            f"session {info.name or info.id} is unhealthy since {since}: {reason[:500]}; stop it "
            f"(`executor session stop {info.name or info.id}`) and start a new one"
        )

    def _claim_path(self, session_id: str) -> Path:
        # Not in the run folder: that one is mounted into the container, which must not forge its owner.
        return self.settings.home / "claims" / f"{validate_session_id(session_id)}.json"

    def _read_claim(self, session_id: str) -> dict[str, str | None] | None:
        try:
            data = json.loads(self._claim_path(session_id).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict):
            return None
        return {"owner": data.get("owner"), "held": "yes" if data.get("held") is True else None}

    def _process_lease(self) -> str:
        """This backend's lease token: a lock file under ``<home>/pools`` held for the backend's lifetime, so that
        gc in any process can tell the sessions a live process holds (a warm pool's waiting ones, the unnamed ones it
        removes when done) from those of a process that is gone."""
        if self._lease is None:
            token = secrets.token_hex(8)
            folder = self.settings.home / "pools"
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(folder / f"{token}.lock", os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self._lease = (token, fd)
        return self._lease[0]

    def _lease_dead(self, token: str) -> bool:
        """True when ``token``'s lock file exists here and nobody holds it (its process is gone)."""
        if not _LEASE_RE.match(token) or (self._lease is not None and self._lease[0] == token):
            return False
        try:
            fd = os.open(self.settings.home / "pools" / f"{token}.lock", os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            return False  # another home's pool, or one that closed cleanly: its sessions end themselves
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        finally:
            os.close(fd)
        return True

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
        """See :meth:`Backend.open_session`."""
        reuse: SessionInfo | None = None
        if pooled and (name is not None or owner is not None):
            raise ValueError("a pooled session gets no name or owner until it is claimed")
        if held and name is not None:
            raise ValueError("a named session outlives its process: it is never held")
        if name is not None:
            validate_session_name(name)
            same = [s for s in await self.list_sessions() if s.name == name]
            # A container still in Created is a creator's that was killed midway: callers hold the name's lock,
            # under which sessions are made, so nobody is making it now.
            live = [s for s in same if s.state not in ("exited", "dead") and not s.half_made]
            if live and live[0].state == "removing":
                raise SessionNameTaken(
                    f"session {name!r} is being stopped (its container is being removed); retry in a moment"
                )
            if live and owner is not None and not secrets.compare_digest(live[0].owner or "", owner):
                # Another owner's: say neither whose nor its id.
                raise SessionNameTaken(f"session name {name!r} is in use; pick another name")
            if live:
                raise SessionNameTaken(f"session name {name!r} is used by {live[0].id}; pick another or stop that one")
            if same:
                # A stopped named session (its container exited, or gc removed it) keeps its workspace: the new
                # container is that session again, on the same volume, under the same id.
                reuse = same[-1]
                if (reuse.owner or None) != (owner or None):
                    raise SessionNameTaken(f"session name {name!r} is kept for another owner; pick another name")
        transport = self.transport_for(profile)
        await self.check_runtime(profile, profile_name)
        session_id = reuse.id if reuse is not None else new_session_id()
        image = await ensure_image(self.engine, self.settings.images, profile.image)
        binary = await agent_binary(self.settings)
        if transport == "exec":
            shim = await statx_shim(self.settings) if profile.runtime == "runsc" else None
            image = await ensure_agent_image(self.engine, image, binary, statx_shim=shim)
        labels = {
            LABEL_OWNER: owner or "",
            LABEL_SESSION: session_id,
            LABEL_CREATED: _now().isoformat(timespec="seconds"),
            LABEL_PROFILE: profile_name,
            LABEL_NAME: name or "",
            LABEL_TRANSPORT: transport,
            LABEL_HOME: self.home_id,
        }
        if name is not None:
            if idle_limit_s == "default":
                labels[LABEL_IDLE] = (
                    reuse.labels[LABEL_IDLE]
                    if reuse is not None and LABEL_IDLE in reuse.labels
                    else _idle_label(self.settings.sessions.idle_s)
                )
            else:
                labels[LABEL_IDLE] = _idle_label(None if idle_limit_s == "none" else idle_limit_s)
        if pooled:
            labels[LABEL_POOL] = self._process_lease()
        elif held:
            labels[LABEL_HOLDER] = self._process_lease()
        run_dir: Path | None = None
        if reuse is not None:
            await self._remove(session_id, graceful=False, keep_volume=True)
        try:
            if transport == "socket":
                run_dir = self._run_dir(session_id)
                await trio.to_thread.run_sync(_make_private_dir, run_dir)
            if reuse is None or not await self._volume_exists(session_id):
                await self.engine.call(
                    lambda: self.engine.client.api.create_volume(name=volume_name(session_id), labels=labels),
                    what=f"create volume for {session_id}",
                    idempotent=False,
                )
            kwargs = container_kwargs(
                profile=profile,
                agent=self.settings.agent,
                image=image,
                session_id=session_id,
                labels=labels,
                transport=transport,
                agent_host_path=binary if transport == "socket" else None,
                run_host_dir=run_dir,
                ephemeral=name is None,
            )
            container = await self.engine.call(
                lambda: self.engine.client.containers.create(**kwargs),
                what=f"create container for {session_id}",
                idempotent=False,
            )
            await self.engine.call(container.start, what=f"start {session_id}", idempotent=False)
            await self._wait_ready(session_id, transport)
            return await self._find(session_id, unclaimed=True)
        except BaseException:
            with trio.CancelScope(shield=True), trio.move_on_after(_CLEANUP_BUDGET_S):
                await self._remove(session_id, graceful=False, keep_volume=reuse is not None)
            raise

    async def _volume_exists(self, session_id: str) -> bool:
        volume = volume_name(session_id)
        try:
            await self.engine.call(
                lambda: self.engine.client.api.inspect_volume(volume), what=f"inspect {volume}", idempotent=True
            )
        except SessionNotFound:
            return False
        return True

    async def _wait_ready(self, session_id: str, transport: Transport) -> None:
        timeout = self.settings.agent.connect_timeout_s
        with trio.move_on_after(timeout):
            delay = 0.005
            next_check = trio.current_time()
            while True:
                if await self._probe(session_id, transport):
                    return
                if trio.current_time() >= next_check:
                    state = await self._state(session_id)
                    if state is None or state.get("Status") != "running":
                        code = None if state is None else state.get("ExitCode")
                        raise AgentError(_startup_failure(session_id, code))
                    next_check = trio.current_time() + 0.25
                await trio.sleep(delay)
                delay = min(delay * 2, 0.05)
        raise AgentError(
            f"the agent of {session_id} did not accept a connection within agent.connect_timeout_s={timeout:g}s"
        )

    async def _probe(self, session_id: str, transport: Transport) -> bool:
        if transport == "socket":
            try:
                stream = await self._open_socket(session_id)
            except OSError:
                return False
            await stream.aclose()
            return True
        name = container_name(session_id)

        def check() -> int | None:
            api = self.engine.client.api
            created = api.exec_create(name, [AGENT_PATH, "bridge", "--connect", AGENT_SOCKET, "--check"], user="0:0")
            exec_id = str(created["Id"])
            api.exec_start(exec_id)
            code: int | None = api.exec_inspect(exec_id).get("ExitCode")
            return code

        try:
            return await self.engine.call(check, what=f"probe the agent of {session_id}", idempotent=False) == 0
        except EngineError:
            return False

    async def _open_socket(self, session_id: str) -> trio.SocketStream:
        run_dir = self._run_dir(session_id)
        path = run_dir / _SOCKET_NAME
        if len(str(path)) <= _SUN_PATH_MAX:
            return await trio.open_unix_socket(str(path))
        fd = os.open(run_dir, os.O_PATH | os.O_DIRECTORY)
        try:
            return await trio.open_unix_socket(f"/proc/self/fd/{fd}/{_SOCKET_NAME}")
        finally:
            os.close(fd)

    async def _state(self, session_id: str) -> dict[str, Any] | None:
        name = container_name(validate_session_id(session_id))
        try:
            data: dict[str, Any] = await self.engine.call(
                lambda: self.engine.client.api.inspect_container(name), what=f"inspect {name}", idempotent=True
            )
        except SessionNotFound:
            return None
        if not _ours((data.get("Config") or {}).get("Labels")):
            return None
        state: dict[str, Any] = data.get("State") or {}
        return state

    async def claim_session(self, session_id: str, *, owner: str | None, held: bool = False) -> None:
        """See :meth:`Backend.claim_session`."""
        path = self._claim_path(session_id)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            # O_EXCL: a second claim of the same container fails here, whatever the caller believed.
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            raise ValueError(f"pooled session {session_id} was already claimed") from None
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump({"owner": owner, "claimed_at": _now().isoformat(timespec="seconds"), "held": held}, handle)

    async def image_id(self, image: str) -> str | None:
        """See :meth:`Backend.image_id`."""
        return await current_image_id(self.engine, self.settings.images, image)

    async def connect(self, session_id: str) -> trio.abc.HalfCloseableStream:
        """See :meth:`Backend.connect`."""
        info = await self._find(session_id, unclaimed=True)
        await self._check_healthy(info)
        if info.state != "running":
            if info.name:
                raise SandboxLost(info.not_running_message())
            raise SandboxLost(f"session {session_id} is {info.state}; start a new one")
        if info.transport == "socket":
            try:
                return await self._open_socket(session_id)
            except OSError as exc:
                if await self.status(session_id) != "running":
                    raise SandboxLost(f"session {session_id} went away") from exc
                reason = errno.errorcode.get(exc.errno or 0, str(exc))
                raise AgentError(f"the agent of {session_id} refused the connection ({reason})") from exc
        name = container_name(session_id)

        def create_exec() -> str:
            created = self.engine.client.api.exec_create(
                name,
                [AGENT_PATH, "bridge", "--connect", AGENT_SOCKET],
                stdin=True,
                stdout=True,
                stderr=True,
                tty=False,
                user="0:0",
            )
            return str(created["Id"])

        try:
            exec_id = await self.engine.call(create_exec, what=f"exec bridge into {name}", idempotent=False)
        except SessionNotFound as exc:
            raise SandboxLost(f"session {session_id} went away") from exc
        return await open_exec_stream(self.settings.docker.base_url, self.engine.api_version, exec_id, container=name)

    async def status(self, session_id: str) -> SessionStatus:
        """See :meth:`Backend.status`."""
        state = await self._state(session_id)
        if state is None:
            return "missing"
        return "running" if state.get("Running") else "exited"

    async def stop_session(self, session_id: str, *, keep_workspace: bool = False) -> None:
        """See :meth:`Backend.stop_session`."""
        validate_session_id(session_id)
        await self._remove(session_id, graceful=True, keep_volume=keep_workspace)

    async def was_stopped(self, session_id: str) -> bool:
        """See :meth:`Backend.was_stopped`."""
        if await trio.to_thread.run_sync(self._stopping_path(session_id).exists):
            return True
        return await self._state(session_id) is None

    async def _remove(self, session_id: str, *, graceful: bool, keep_volume: bool = False) -> None:
        name = container_name(session_id)
        api = self.engine.client.api
        state = await self._state(session_id)
        if state is not None:
            stopping = self._stopping_path(session_id)
            try:
                if graceful and state.get("Running"):
                    # Marked before the agent gets its SIGTERM: a process whose run loses the agent now learns
                    # (was_stopped) that the session was stopped, not lost. Unmarked once the container is gone.
                    await trio.to_thread.run_sync(_make_private_dir, stopping.parent)
                    await trio.to_thread.run_sync(stopping.touch)
                    try:
                        timeout = self.settings.docker.stop_timeout_s
                        await self.engine.call(
                            lambda: api.stop(name, timeout=timeout), what=f"stop {name}", idempotent=True
                        )
                    except (SessionNotFound, EngineError):
                        pass  # force removal below settles it
                await _ignore_missing(
                    self.engine.call(
                        lambda: api.remove_container(name, force=True), what=f"remove {name}", idempotent=True
                    )
                )
            finally:
                await trio.to_thread.run_sync(stopping.unlink, True)
        volume = volume_name(session_id)
        if not keep_volume:
            await _ignore_missing(
                self.engine.call(
                    lambda: api.remove_volume(volume, force=True), what=f"remove {volume}", idempotent=True
                )
            )
        if self.engine.is_local:
            await trio.to_thread.run_sync(shutil.rmtree, self._run_dir(session_id), True)
        await trio.to_thread.run_sync(self._unhealthy_path(session_id).unlink, True)
        with suppress(FileNotFoundError):
            self._claim_path(session_id).unlink()
        with suppress(FileNotFoundError):
            usage_path(self.settings.home, session_id).unlink()

    def _label_filter(self, all_homes: bool) -> dict[str, list[str]]:
        return {"label": [LABEL_SESSION] if all_homes else [LABEL_SESSION, f"{LABEL_HOME}={self.home_id}"]}

    async def _rows(self, *, all_homes: bool = False) -> list[dict[str, Any]]:
        filters = self._label_filter(all_homes)
        rows: list[dict[str, Any]] = await self.engine.call(
            lambda: self.engine.client.api.containers(all=True, filters=filters),
            what="list session containers",
            idempotent=True,
        )
        return [row for row in rows if _ours(row.get("Labels"))]

    async def _volumes(self, *, all_homes: bool = False) -> list[dict[str, Any]]:
        """Our workspace volumes (labelled, and named after the session their labels give)."""
        filters = self._label_filter(all_homes)
        answer: dict[str, Any] = await self.engine.call(
            lambda: self.engine.client.api.volumes(filters=filters), what="list session volumes", idempotent=True
        )
        return [
            volume
            for volume in answer.get("Volumes") or []
            if _ours(volume.get("Labels")) and volume.get("Name") == volume_name(volume["Labels"][LABEL_SESSION])
        ]

    async def list_sessions(self, *, owner: str | None = None, all_homes: bool = False) -> list[SessionInfo]:
        """See :meth:`Backend.list_sessions`."""
        return await self._list(owner=owner, unclaimed=False, all_homes=all_homes)

    async def _list(self, *, owner: str | None, unclaimed: bool, all_homes: bool = False) -> list[SessionInfo]:
        infos: list[SessionInfo] = []
        for row in await self._rows(all_homes=all_homes):
            labels: dict[str, str] = row["Labels"]
            claim = self._read_claim(labels[LABEL_SESSION]) if labels.get(LABEL_POOL) else None
            if labels.get(LABEL_POOL) and claim is None and not unclaimed:
                continue  # a warm pool's session waiting to be claimed is nobody's yet
            usage, _ = read_usage(usage_path(self.settings.home, labels[LABEL_SESSION]))
            infos.append(_info(row["Id"], row.get("Image", ""), row.get("State", ""), labels, claim, usage=usage))
        seen = {info.id for info in infos}
        for volume in await self._volumes(all_homes=all_homes):
            volume_labels: dict[str, str] = volume["Labels"]
            if volume_labels.get(LABEL_NAME) and volume_labels[LABEL_SESSION] not in seen:
                infos.append(_info("", "", "exited", volume_labels, workspace_only=True))
        if owner is not None:
            infos = [info for info in infos if info.owner == owner]
        return sorted(infos, key=lambda info: (info.created_at, info.id))

    async def find_session(self, id_or_name: str, *, all_homes: bool = False) -> SessionInfo:
        """See :meth:`Backend.find_session`."""
        return await self._find(id_or_name, unclaimed=False, all_homes=all_homes)

    async def _find(self, id_or_name: str, *, unclaimed: bool, all_homes: bool = False) -> SessionInfo:
        key = LABEL_SESSION
        try:
            validate_session_id(id_or_name)
        except SessionNotFound:
            key = LABEL_NAME
        found = [
            info
            for info in await self._list(owner=None, unclaimed=unclaimed, all_homes=all_homes)
            if (info.id if key == LABEL_SESSION else info.name) == id_or_name
        ]
        if found:
            return next((info for info in found if info.state == "running"), found[-1])
        raise SessionNotFound(f"no session {id_or_name!r}; `executor session ls` lists them")

    async def stop_idle(self, *, skip: frozenset[str] = frozenset(), before_stop: BeforeStop | None = None) -> GcReport:
        """See :meth:`Backend.stop_idle`."""
        removed: list[str] = []
        kept: list[str] = []
        stopped: list[str] = []
        now = _now()
        for row in await self._rows():
            labels: dict[str, str] = row["Labels"]
            session_id = labels[LABEL_SESSION]
            limit = _parse_idle(labels.get(LABEL_IDLE))
            if limit is None or session_id in skip or row.get("State") != "running":
                continue
            # The usage file stays locked while the session is stopped: a call starting meanwhile is not missed.
            path = usage_path(self.settings.home, session_id)
            usage, held = await trio.to_thread.run_sync(functools.partial(read_usage, path, hold=True))
            try:
                info = _info(row["Id"], row.get("Image", ""), "running", labels, usage=usage)
                if usage.busy or info.idle_for_s(now) <= limit:
                    continue
                named = info.name is not None
                if before_stop is not None:
                    await before_stop(info)
                # Under the name's lock, as every stop: a process finding and reaching the session by its name (an
                # attach, a --create) holds it, and the session is not removed under it.
                async with name_lock(self.settings.home, info.name, wait=False) as ours:
                    if not ours:
                        continue
                    await self._remove(session_id, graceful=True, keep_volume=named)
            finally:
                if held is not None:
                    os.close(held)
            removed.append(container_name(session_id))
            (kept if named else removed).append(volume_name(session_id))
            stopped.append(info.name or session_id)
        return GcReport(removed=tuple(removed), kept=tuple(kept), idle_stopped=tuple(stopped))

    async def gc(
        self, *, all_homes: bool = False, skip: frozenset[str] = frozenset(), before_stop: BeforeStop | None = None
    ) -> GcReport:
        """See :meth:`Backend.gc`."""
        idle = await self.stop_idle(skip=skip, before_stop=before_stop)
        removed: list[str] = list(idle.removed)
        kept: list[str] = list(idle.kept)
        min_age = self.settings.docker.gc_min_age_s
        now = _now()
        live: set[str] = set()
        # The warm pools' leases nobody holds any more (their process is gone): their unclaimed sessions go below,
        # and their lock files at the end, whether or not any of their sessions is still there to name them.
        pools = self.settings.home / "pools"
        dead_leases: set[str] = set()
        with suppress(OSError):
            dead_leases = {lock.stem for lock in pools.glob("*.lock") if self._lease_dead(lock.stem)}
        for row in await self._rows(all_homes=all_homes):
            labels: dict[str, str] = row["Labels"]
            session_id = labels[LABEL_SESSION]
            state = row.get("State", "")
            age = (now - _parse_created(labels.get(LABEL_CREATED))).total_seconds()
            reap = state in ("exited", "dead") or (state == "created" and age >= min_age)
            if not reap and labels.get(LABEL_HOLDER, "") in dead_leases:
                # An unnamed session whose process was killed before it could remove it: nobody has it any more.
                reap = True
            if not reap and labels.get(LABEL_POOL, "") in dead_leases:
                # A warm pool's session whose process is gone: unclaimed, nobody will ever claim it; claimed by that
                # process for a call (not kept), nobody has it any more.
                claim = self._read_claim(session_id)
                reap = claim is None or claim.get("held") is not None
            if not reap:
                live.add(session_id)
                continue
            # A named session's container that merely stopped (a dockerd restart does that) goes; its data stays
            # until someone stops that session. Not while another process holds its name: it may be recreating
            # that very session (same id, same container name) right now.
            named = labels.get(LABEL_NAME) or None
            async with name_lock(self.settings.home, named, wait=False) as ours:
                current = await self._state(session_id) if named and ours else None
                if not ours or (current is not None and current.get("Status") not in ("exited", "dead")):
                    live.add(session_id)  # being recreated, or recreated since the listing: not a leftover
                    continue
                await self._remove(session_id, graceful=False, keep_volume=named is not None)
            removed.append(container_name(session_id))
            (kept if named else removed).append(volume_name(session_id))
        for volume in await self._volumes(all_homes=all_homes):
            labels = volume["Labels"]
            name = str(volume["Name"])
            if labels[LABEL_SESSION] in live:
                continue
            if labels.get(LABEL_NAME):
                if name not in kept:
                    kept.append(name)
                continue
            age = (now - _parse_created(labels.get(LABEL_CREATED))).total_seconds()
            if age < min_age:
                continue
            await self._remove(labels[LABEL_SESSION], graceful=False)
            removed.append(name)
        for lease in dead_leases:
            with suppress(FileNotFoundError):
                (pools / f"{lease}.lock").unlink()
        return GcReport(removed=tuple(removed), kept=tuple(kept), idle_stopped=idle.idle_stopped)

    async def aclose(self) -> None:
        """See :meth:`Backend.aclose`."""
        if self._lease is not None:
            token, fd = self._lease
            self._lease = None
            with suppress(FileNotFoundError):
                (self.settings.home / "pools" / f"{token}.lock").unlink()
            os.close(fd)
        await self.engine.aclose()


async def _ignore_missing(call: Any) -> None:
    try:
        await call
    except SessionNotFound:
        pass
    except EngineError as exc:
        # 409 "removal already in progress" means another caller is doing our job.
        if "in progress" not in str(exc) and "is already" not in str(exc):
            raise


def _make_private_dir(path: Path) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.mkdir(mode=0o700, exist_ok=True)
    path.chmod(0o700)
