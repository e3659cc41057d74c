"""The :class:`Executor`: a backend, an artifact store, a judge and the approval handler, shared by sessions.

:func:`open_executor` opens one; :meth:`Executor.open_session` starts a session container (removed on exit) and
:meth:`Executor.attach_session` connects to a running one (left running).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import signal
import threading
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import (
    AbstractAsyncContextManager,
    AsyncExitStack,
    ExitStack,
    asynccontextmanager,
    contextmanager,
    suppress,
)
from pathlib import Path
from typing import Final, Literal, TypeVar

import trio

from executor.artifacts import ArtifactStore
from executor.artifacts.hints import Surface
from executor.config import Profile, Settings
from executor.errors import (
    ConfigError,
    ExecutorError,
    JournalError,
    SandboxError,
    SessionNameTaken,
    SessionNotFound,
    SessionNotRunning,
)
from executor.gate.approvals import ApprovalHandler
from executor.gate.cache import AnswerCache
from executor.gate.gate import DEFAULT_CACHE, Gate
from executor.gate.judge import Judge, open_judge
from executor.gate.policy import Policy, load_profile_policy, policy_path
from executor.ids import is_session_id
from executor.journal import JournalWriter, interruption_journaler, load_journal_key
from executor.journal.events import SessionClosed, SessionOpened
from executor.sandbox.agent.client import AgentClient, open_agent_client
from executor.sandbox.base import Backend, GcReport, SessionInfo, open_backend
from executor.sandbox.names import name_lock
from executor.session.gating import Gatekeeper, owner_matches
from executor.session.output import OutputTools
from executor.session.pool import PoolStats, WarmPool
from executor.session.presentation import Views
from executor.session.tools import Session

__all__ = ["Executor", "PoolMode", "open_executor", "open_output_reader"]

PoolMode = Literal["api", "service", "off"]
"""Which warm-pool size each profile keeps: ``pool.size`` (the in-process API), ``pool.service_size`` (the
service), or none."""

_CLEANUP_BUDGET_S: Final = 10.0


@contextmanager
def _uninterrupted() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT; the CLI turns SIGTERM and SIGHUP into it) off while a session that is not kept is removed,
    at most :data:`_CLEANUP_BUDGET_S`: a second Ctrl-C in the middle of the removal left the container and its volume
    behind. Only on the main thread (where signal handlers live); the previous handler is back afterwards."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is None:
        yield
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


_T = TypeVar("_T")


class _SoleErrors:
    """Errors leave the API as themselves: a group of exactly one error (a nursery's strict wrapping) is unwrapped.

    ``thrown`` is the caller's own exception, thrown into the ``async with`` block: unwrapping stops there, so a
    caller's own exception group is left as it was. A group of several errors propagates unchanged.
    """

    def __init__(self) -> None:
        self.thrown: BaseException | None = None

    def __enter__(self) -> _SoleErrors:
        return self

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if not isinstance(exc, BaseExceptionGroup):
            return
        leaf: BaseException = exc
        while isinstance(leaf, BaseExceptionGroup) and leaf is not self.thrown and len(leaf.exceptions) == 1:
            leaf = leaf.exceptions[0]
        if leaf is exc or (isinstance(leaf, BaseExceptionGroup) and leaf is not self.thrown):
            return
        context = leaf.__context__
        try:
            raise leaf
        finally:
            # Raising inside this handler would chain the group as the leaf's context; keep the leaf's own.
            leaf.__context__ = context
            del leaf, exc, context


@asynccontextmanager
async def _sole_errors_around(manager: AbstractAsyncContextManager[_T]) -> AsyncIterator[_T]:
    with _SoleErrors() as errors:
        async with manager as value:
            try:
                yield value
            except BaseException as exc:
                errors.thrown = exc
                raise


class Executor:
    """The executor: a backend, an artifact store, a gate and the approval handler, shared by sessions."""

    def __init__(
        self,
        settings: Settings,
        backend: Backend,
        store: ArtifactStore,
        judge: Judge | None,
        cache: AnswerCache | None,
        approval_handler: ApprovalHandler | None,
        surface: Surface = "python",
        pools: Mapping[str, WarmPool] | None = None,
    ) -> None:
        self.settings = settings
        self.surface: Surface = surface
        """Who reads this executor's results (the recovery hints are written in its words)."""
        self.backend = backend
        self.store = store
        self.judge = judge
        self.cache = cache
        self.approval_handler = approval_handler
        self._pools = dict(pools or {})
        self._policies: dict[tuple[str, str, str], Policy] = {}

    def _policy(self, profile: Profile) -> Policy:
        """The profile's policy, parsed and example-checked once per content of its files (the file and every file
        it extends): a warm open must not spend its budget re-checking an unchanged policy.

        Raises:
            ConfigError: the policy cannot be loaded.
        """
        key = (profile.policy, profile.workspace, profile.home)
        cached = self._policies.get(key)
        if cached is not None and self._policy_current(cached):
            return cached
        policy = load_profile_policy(self.settings.gate, profile)
        if self._policy_current(policy):  # unchanged since it was read
            self._policies[key] = policy
        else:
            self._policies.pop(key, None)
        return policy

    def _policy_current(self, policy: Policy) -> bool:
        """True when the files ``policy`` was loaded from (its source chain) are still the ones its names resolve
        to on the search path, with the content it was loaded from (its chained SHA-256)."""
        files = [Path(item) for item in policy.source.split(" < ")]
        digest = ""
        try:
            if any(policy_path(self.settings.gate, path.stem) != path for path in files):
                return False
            for path in reversed(files):  # as load_policy chains them: a file's bytes, then its base's digest
                hasher = hashlib.sha256(path.read_bytes())
                if digest:
                    hasher.update(bytes.fromhex(digest))
                digest = hasher.hexdigest()
        except (OSError, ConfigError):
            return False
        return digest == policy.sha256

    def open_output_reader(self, session_id: str) -> AbstractAsyncContextManager[OutputTools]:
        """``read_output``/``search_output`` on ``session_id``'s stored streams through this executor's store and
        judge, whether its container runs or is gone (see :func:`open_output_reader`). Who may read them is the
        caller's to check (:meth:`ArtifactStore.session_owner`).

        Raises:
            SessionNotFound: ``session_id`` is not a session id.
            ConfigError: the default profile's policy cannot be loaded.
        """
        return _output_reader(self.settings, self.store, session_id, judge=self.judge, surface=self.surface)

    def pool_stats(self) -> list[PoolStats]:
        """The warm pools' counters (one per profile that keeps one)."""
        return [pool.stats() for pool in self._pools.values()]

    def _profile(self, name: str | None, image: str | None) -> tuple[str, Profile]:
        profile_name = name or self.settings.default_profile
        profile = self.settings.profile(profile_name)
        if image:
            profile = profile.model_copy(update={"image": image})
        return profile_name, profile

    @asynccontextmanager
    async def open_session(
        self,
        *,
        profile: str | None = None,
        image: str | None = None,
        name: str | None = None,
        owner: str | None = None,
        keep: bool = False,
        idle_s: float | Literal["none"] | None = None,
    ) -> AsyncIterator[Session]:
        """Start a new session container and yield its :class:`Session`; on exit everything the session started is
        killed and the container and its workspace are removed (unless ``keep``).

        ``idle_s`` is a named session's idle limit, stored with it (seconds, or ``"none"``; None: ``sessions.idle_s``);
        an unnamed session stores none (the service keeps its own sessions' limits).

        Raises:
            ConfigError: unknown profile or an unloadable policy.
            ImageError, AgentError, EngineUnavailable, EngineError: the session could not start.
        """
        profile_name, chosen = self._profile(profile, image)
        policy = self._policy(chosen)  # fail before a container exists
        pool = next((p for p in self._pools.values() if p.serves(profile_name, chosen, name=name)), None)
        if pool is not None:
            entry = await pool.claim()
            info = entry.info
            try:
                await self.backend.claim_session(info.id, owner=owner, held=not keep)
                info = info.model_copy(update={"owner": owner, "pooled": True})
                opened = self._session(info, chosen, policy, entry.client, pool_created_at=entry.created_wall)
                async with _sole_errors_around(opened) as session:
                    yield session
            finally:
                entry.released.set()
                if not keep:
                    with _uninterrupted(), trio.CancelScope(shield=True), trio.move_on_after(_CLEANUP_BUDGET_S):
                        await self.backend.stop_session(info.id)
            return
        async with self.name_lock(name):
            if name is not None:
                kept = next(
                    (
                        s
                        for s in await self.backend.list_sessions()
                        if s.name == name and (s.stopped_named or s.half_made) and owner_matches(s.owner, owner)
                    ),
                    None,
                )
                if kept is not None and kept.profile != profile_name:
                    profile_name, chosen = self._profile(_kept_profile(kept, profile), image)
                    policy = self._policy(chosen)
            info = await self.backend.open_session(
                profile=chosen,
                profile_name=profile_name,
                name=name,
                owner=owner,
                held=name is None and not keep,
                idle_limit_s=_idle_choice(idle_s),
            )
        try:
            async with _sole_errors_around(self._connect(info, chosen, policy)) as session:
                yield session
        finally:
            if not keep:
                with _uninterrupted(), trio.CancelScope(shield=True), trio.move_on_after(_CLEANUP_BUDGET_S):
                    await self.backend.stop_session(info.id)

    @asynccontextmanager
    async def attach_session(
        self,
        id_or_name: str,
        *,
        owner: str | None = None,
        create: bool = False,
        profile: str | None = None,
        image: str | None = None,
        idle_s: float | Literal["none"] | None = None,
    ) -> AsyncIterator[Session]:
        """Connect to an existing session (left running on exit); with ``create``, start a named one if missing, or
        recreate the container of a stopped named session on its kept workspace (with ``idle_s`` as its idle limit;
        None keeps the stopped session's own, else ``sessions.idle_s``). A well-formed session id is never created.

        ``owner``: who asks; None is the home's operator, who may use every owner's session (as the service's unix
        socket may); a token's owner only its own.

        Raises:
            SessionNotFound: no such session, or it belongs to another owner.
            SessionNotRunning: a stopped named session, asked for without ``create`` (or by its id): the message says
                how to start it again.
            SessionUnhealthy: the session was found unresponsive earlier; stop it first.
        """
        policy: Policy | None = None
        # By name, every process of the home finds (and with create, starts) the session under the name's lock: a
        # session another caller is starting is waited for, never seen half made, and never started twice; and it is
        # reached under the lock too, so a stop (which takes it) cannot remove it between finding and reaching it.
        by_name = not is_session_id(id_or_name)
        async with AsyncExitStack() as stack:
            async with self.name_lock(id_or_name if by_name else None):
                try:
                    info = await self.backend.find_session(id_or_name)
                    if (info.stopped_named or (by_name and info.half_made)) and owner_matches(info.owner, owner):
                        # Asked by name with create: recreated below, on its kept workspace, with the profile it was
                        # made with. Else the caller is told how.
                        profile = _kept_profile(info, profile)
                        raise SessionNotRunning(info.not_running_message())
                except SessionNotFound as exc:
                    if not create or (isinstance(exc, SessionNotRunning) and is_session_id(id_or_name)):
                        raise
                    if is_session_id(id_or_name):
                        # An id is never a name to start: a typo or a stopped session, not a request for a new one.
                        raise SessionNotFound(f"no session {id_or_name}; `executor session ls` lists them") from exc
                    profile_name, chosen = self._profile(profile, image)
                    policy = self._policy(chosen)  # fail before a container exists
                    info = await self.backend.open_session(
                        profile=chosen,
                        profile_name=profile_name,
                        name=id_or_name,
                        owner=owner,
                        idle_limit_s=_idle_choice(idle_s),
                    )
                if not owner_matches(info.owner, owner):
                    raise SessionNotFound(f"no session {id_or_name!r}; `executor session ls` lists yours")
                try:
                    chosen = self.settings.profile(info.profile)
                except ConfigError:
                    chosen = self.settings.profile()
                if policy is None:
                    policy = self._policy(chosen)
                session = await stack.enter_async_context(_sole_errors_around(self._connect(info, chosen, policy)))
            yield session

    async def list_sessions(self, *, owner: str | None = None, all_homes: bool = False) -> list[SessionInfo]:
        """This home's sessions (every home's with ``all_homes``; only ``owner``'s when given)."""
        return await self.backend.list_sessions(owner=owner, all_homes=all_homes)

    async def stop_session(self, id_or_name: str, *, owner: str | None = None, all_homes: bool = False) -> None:
        """Kill everything a session started and remove its container and workspace.

        Raises:
            SessionNotFound: no such session (in this home, unless ``all_homes``), or another owner's.
        """
        info = await self.backend.find_session(id_or_name, all_homes=all_homes)
        async with self.name_lock(info.name):
            if info.name is not None:
                info = await self.backend.find_session(info.id, all_homes=all_homes)  # as it is now, under the lock
            if not owner_matches(info.owner, owner):
                raise SessionNotFound(f"no session {id_or_name!r}; `executor session ls` lists yours")
            await self._end_tasks(info)
            await self.backend.stop_session(info.id)

    async def gc(self, *, all_homes: bool = False, skip: frozenset[str] = frozenset()) -> GcReport:
        """:meth:`Backend.gc`; a session its idle limit stops has its background tasks stopped first, their output
        kept, as :meth:`stop_session` does.

        Raises:
            EngineUnavailable: no engine answers.
        """
        return await self.backend.gc(all_homes=all_homes, skip=skip, before_stop=self._end_tasks)

    async def _end_tasks(self, info: SessionInfo) -> None:
        """Stop the background tasks of a session about to be stopped and keep their output: it lives in the agent,
        which goes with the container, and their artifacts would stay cut short (``detached``), saying they still
        run. Bounded by ``docker.stop_timeout_s``; a session that cannot be reached is stopped all the same."""
        if info.state != "running" or all(record.finished for record in self.store.session(info.id).tasks().values()):
            return
        with trio.move_on_after(self.settings.docker.stop_timeout_s), suppress(ExecutorError):
            async with self.attach_session(info.id, owner=info.owner) as session:
                await session.end_tasks()

    @asynccontextmanager
    async def name_lock(self, name: str | None) -> AsyncIterator[None]:
        """Hold this home's lock on a session name (see :mod:`executor.sandbox.names`) for the block; nothing for
        None. Waits as long as the holder's own bounded work (a start, a stop)."""
        async with name_lock(self.settings.home, name):
            yield

    @asynccontextmanager
    async def _connect(self, info: SessionInfo, profile: Profile, policy: Policy) -> AsyncIterator[Session]:
        async with (
            _open_client(self.backend, self.settings, info) as client,
            self._session(info, profile, policy, client) as session,
        ):
            yield session

    @asynccontextmanager
    async def _session(
        self,
        info: SessionInfo,
        profile: Profile,
        policy: Policy,
        client: AgentClient,
        *,
        pool_created_at: float | None = None,
    ) -> AsyncIterator[Session]:
        gate_settings = self.settings.gate_for(profile)
        gate = Gate(gate_settings, policy=policy, judge=self.judge, cache=self.cache)
        journal = JournalWriter(
            self.settings.home / "sessions" / info.id / "journal.ndjson",
            session_id=info.id,
            settings=self.settings.journal,
            key=load_journal_key(self.settings.home, create=True),
        )
        with journal:
            journal.emit(
                SessionOpened(
                    profile=info.profile,
                    trust=gate_settings.trust,
                    policy=profile.policy,
                    pool_created_at=pool_created_at,
                    gate_mode=profile.gate_mode,
                )
            )
            reason = "closed"
            try:
                async with trio.open_nursery() as nursery:
                    session = Session(
                        info,
                        profile,
                        settings=self.settings,
                        artifacts=self.store.session(info.id, owner=info.owner),
                        client=client,
                        journal=journal,
                        gate=gate,
                        nursery=nursery,
                        approval_handler=self.approval_handler,
                        surface=self.surface,
                        was_stopped=functools.partial(self.backend.was_stopped, info.id),
                    )
                    try:
                        yield session
                    finally:
                        session._mark_closed()
                        nursery.cancel_scope.cancel()
            except BaseException as exc:
                reason = f"error: {_leaf_name(exc)}"
                with contextlib.suppress(JournalError):  # a full disk: the failure that ended it is what to report
                    journal.emit(SessionClosed(reason=reason))
                raise
            try:
                journal.emit(SessionClosed(reason=reason))
            except JournalError as exc:
                raise JournalError(
                    f"{exc}; the session's close is not journaled (each finished action is, and its output is kept)"
                ) from exc


def _leaf_name(exc: BaseException) -> str:
    """The class name of what ended a session: the one exception a group wraps (the nursery's), else the group's."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return type(exc).__name__


def _idle_choice(idle_s: float | Literal["none"] | None) -> float | Literal["none", "default"]:
    return "default" if idle_s is None else idle_s


@asynccontextmanager
async def open_executor(
    settings: Settings,
    *,
    approval_handler: ApprovalHandler | None = None,
    judge: Judge | None = None,
    answer_cache: AnswerCache | object | None = DEFAULT_CACHE,
    api_key: str | None = None,
    surface: Surface = "python",
    pool: PoolMode = "api",
) -> AsyncIterator[Executor]:
    """Open the executor: the engine backend, the artifact store, the judge, the shared answer cache and the warm
    pools (one per profile whose pool size for ``pool`` is above 0; their sessions are removed on exit).

    Args:
        settings: the one settings object (built by the entry point).
        approval_handler: who answers the gate's asks by default; None means nobody (asks come back blocked).
        judge: a judge to use instead of the configured provider.
        answer_cache: the shared exact-answer cache; the default builds one from ``gate.cache``; None disables it.
        api_key: the key for the ``openai`` judge provider (the entry point reads it from the environment).
        surface: who reads the results: ``python`` (this API), ``mcp`` or ``cli``; recovery hints are written as
            calls in its words.
        pool: ``api`` keeps each profile's ``pool.size`` ready sessions (0 by default), ``service`` its
            ``pool.service_size`` (the service's small default), ``off`` none.

    Raises:
        EngineUnavailable: no Docker engine answers; the message says how to start one.
    """
    opened = _open_executor(
        settings,
        approval_handler=approval_handler,
        judge=judge,
        answer_cache=answer_cache,
        api_key=api_key,
        surface=surface,
        pool=pool,
    )
    async with _sole_errors_around(opened) as executor:
        yield executor


@asynccontextmanager
async def _open_executor(
    settings: Settings,
    *,
    approval_handler: ApprovalHandler | None,
    judge: Judge | None,
    answer_cache: AnswerCache | object | None,
    api_key: str | None,
    surface: Surface,
    pool: PoolMode,
) -> AsyncIterator[Executor]:
    cache = AnswerCache.from_settings(settings.gate.cache) if answer_cache is DEFAULT_CACHE else answer_cache
    assert cache is None or isinstance(cache, AnswerCache)
    settings.home.mkdir(parents=True, exist_ok=True, mode=0o700)
    async with open_backend(settings) as backend:
        store = ArtifactStore.open(
            settings.home, settings.artifacts, on_interrupted=interruption_journaler(settings.home, settings.journal)
        )
        try:
            async with AsyncExitStack() as stack:
                chosen = judge
                if chosen is None:
                    chosen = await stack.enter_async_context(open_judge(settings.gate.judge, api_key=api_key))
                pools = _pools(settings, backend, pool)
                executor = Executor(settings, backend, store, chosen, cache, approval_handler, surface, pools)
                if settings.docker.gc_on_start:
                    # Best effort: leftovers of killed runs are reaped here, and a failure is `executor session gc`'s
                    # to report.
                    with trio.move_on_after(settings.docker.api_timeout_s), suppress(SandboxError):
                        await executor.gc()
                async with trio.open_nursery() as nursery:
                    for warm in pools.values():
                        await nursery.start(warm.run)
                    try:
                        yield executor
                    finally:
                        # The pools' tasks remove their unclaimed sessions, shielded and bounded, as they unwind.
                        nursery.cancel_scope.cancel()
        finally:
            store.close()


@asynccontextmanager
async def _open_client(backend: Backend, settings: Settings, info: SessionInfo) -> AsyncIterator[AgentClient]:
    """A handshaken agent client for ``info``: the one way both cold opens and warm pools reach an agent."""
    stream = await backend.connect(info.id)
    async with open_agent_client(
        stream,
        max_frame=settings.agent.max_frame_bytes,
        handshake_timeout_s=settings.agent.connect_timeout_s,
        host_margin_s=settings.agent.host_margin_s,
        kill_grace_ms=settings.bash.grace_ms,
        on_unhealthy=functools.partial(backend.mark_unhealthy, info.id),
    ) as client:
        yield client


def _pools(settings: Settings, backend: Backend, mode: PoolMode) -> dict[str, WarmPool]:
    pools: dict[str, WarmPool] = {}
    for name, profile in settings.profiles.items():
        size = {"api": profile.pool.size, "service": profile.pool.service_size, "off": 0}[mode]
        if size > 0:
            pools[name] = WarmPool(
                backend,
                profile_name=name,
                profile=profile,
                size=size,
                open_client=functools.partial(_open_client, backend, settings),
            )
    return pools


@asynccontextmanager
async def open_output_reader(
    settings: Settings,
    session_id: str,
    *,
    judge: Judge | None = None,
    api_key: str | None = None,
    surface: Surface = "python",
) -> AsyncIterator[OutputTools]:
    """``read_output``/``search_output`` on a session's stored streams without its container (it may be gone).

    Pages are rendered, sanitized (the judge's ``sanitize`` reflex under the default profile's policy) and the
    judgment is journaled in the session's journal, exactly as the session's own tools do. No engine is needed.

    Raises:
        SessionNotFound: ``session_id`` is not a session id.
        ConfigError: the default profile's policy cannot be loaded.
        ArtifactError: the artifact index cannot be opened.
    """
    store = ArtifactStore.open(
        settings.home, settings.artifacts, on_interrupted=interruption_journaler(settings.home, settings.journal)
    )
    try:
        async with AsyncExitStack() as stack:
            chosen = (
                judge
                if judge is not None
                else await stack.enter_async_context(open_judge(settings.gate.judge, api_key=api_key))
            )
            async with _output_reader(settings, store, session_id, judge=chosen, surface=surface) as reader:
                yield reader
    finally:
        store.close()


@asynccontextmanager
async def _output_reader(
    settings: Settings, store: ArtifactStore, session_id: str, *, judge: Judge | None, surface: Surface
) -> AsyncIterator[OutputTools]:
    """The recovery tools over ``session_id``'s artifacts in ``store``, judged by ``judge`` (see
    :func:`open_output_reader`)."""
    profile = settings.profile()
    policy = load_profile_policy(settings.gate, profile)
    artifacts = store.session(session_id)
    journal = JournalWriter(
        settings.home / "sessions" / session_id / "journal.ndjson",
        session_id=session_id,
        settings=settings.journal,
        key=load_journal_key(settings.home, create=True),
    )
    with ExitStack() as stack:
        # A session with no folder stores nothing: every read fails before a judgment is journaled, and no
        # journal is created for an id that never ran.
        if journal.path.parent.is_dir():
            stack.enter_context(journal)
        gate = Gate(
            settings.gate_for(profile),
            policy=policy,
            judge=judge,
            cache=AnswerCache.from_settings(settings.gate.cache),
        )
        gatekeeper = Gatekeeper(session_id=session_id, profile=profile, gate=gate, journal=journal, artifacts=artifacts)
        views = Views(
            session_id=session_id, settings=settings, artifacts=artifacts, gatekeeper=gatekeeper, surface=surface
        )
        yield OutputTools(artifacts=artifacts, views=views)


def _kept_profile(kept: SessionInfo, asked: str | None) -> str:
    """The profile a stopped named session is recreated with: the one it was made with (its workspace was made for
    that profile's isolation: an ``untrusted`` session must not come back under runc).

    Raises:
        SessionNameTaken: the caller asked for another profile.
    """
    if asked is not None and asked != kept.profile:
        raise SessionNameTaken(
            f"session {kept.name!r} keeps a workspace made with profile {kept.profile!r}; recreate it with that "
            f"profile (or name none), or `executor session stop {kept.name}` to start afresh with {asked!r}"
        )
    return kept.profile
