"""The warm pool: per profile, sessions created, started, connected and handshaken before anyone asks.

A :class:`WarmPool` keeps ``size`` ready sessions of one profile. :meth:`WarmPool.claim` hands out one of them (or,
when none is ready, waits in line for the next one the pool creates) and wakes the refill. Creations are bounded by
``pool.max_creating``: fifty opens at once against a pool of eight take the eight ready ones and queue for the rest,
instead of starting fifty containers on two cores. While the engine fails the pool backs off
(``pool.backoff_initial_s`` doubling up to ``pool.backoff_max_s``), and each failure is handed to the oldest waiting
open, so an open never hangs on a broken engine.

Lifetimes (structured concurrency): every pooled session lives in a task of the pool's nursery, which the executor's
``async with`` owns. That task creates the container (a pooled backend session: unnamed, ownerless, hidden from
listings until claimed, ending itself after ``agent.orphan_exit_s`` if this process dies), holds the agent client,
and waits to be claimed, retired (stale image, ``pool.max_idle_s``) or lost (the container went away: the
connection closes and the pool refills). Unclaimed sessions are removed by their task, shielded and bounded. A
claimed session belongs to its claimer, which removes it when the session ends; a pooled container is handed out
once and never reused.

Identity: a container's labels cannot change after creation, so a claimed session's owner is recorded host-side by
:meth:`Backend.claim_session <executor.sandbox.base.Backend.claim_session>` and honoured by list and find. Named
sessions never come from the pool: their name must be on the container for every process and engine to see, and a
named session must not end itself like an unnamed one does. They open cold, as do sessions whose profile (image,
limits, environment) differs from every pool's.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass, field
from typing import Final

import trio
from pydantic import BaseModel, ConfigDict

from executor.config import Profile
from executor.errors import ExecutorError
from executor.sandbox.agent.client import AgentClient
from executor.sandbox.base import Backend, SessionInfo

__all__ = ["PoolEntry", "PoolStats", "WarmPool"]

_CLEANUP_BUDGET_S: Final = 15.0


class PoolStats(BaseModel):
    """A snapshot of one warm pool's counters."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    profile: str
    """The profile the pool serves."""
    size: int
    """Ready sessions it keeps."""
    ready: int
    """Sessions ready to be claimed now."""
    creating: int
    """Sessions being created now."""
    waiting: int
    """Opens waiting for the next ready session."""
    max_creating_seen: int
    """The most creations that ran at once since the pool opened (bounded by ``pool.max_creating``)."""
    created: int
    """Sessions created since the pool opened."""
    claimed: int
    """Sessions handed out."""
    retired: int
    """Unclaimed sessions removed: idle too long, made from a rebuilt image, or lost."""
    failures: int
    """Creations that failed."""


@dataclass(eq=False)
class PoolEntry:
    """One pooled session: its backend record, its connected agent client and its bookkeeping."""

    info: SessionInfo
    """The backend's record (``created_at`` is when the pool created it)."""
    client: AgentClient
    """The handshaken agent connection; it stays usable until :attr:`released` is set."""
    image_id: str | None
    """The image id the profile named just before the container was created."""
    created_wall: float
    """When the pool created it (seconds since the epoch)."""
    claimed: bool = False
    """Handed out; the claimer owns the container from then on."""
    wake: trio.Event = field(default_factory=trio.Event)
    """Set when it is claimed, retired or lost."""
    released: trio.Event = field(default_factory=trio.Event)
    """Set by the claimer when its session ends: the pool then closes the agent client."""

    def usable(self, image_id: str | None) -> bool:
        """Not claimed, not lost, and made from ``image_id`` (when that is known)."""
        stale = image_id is not None and self.image_id != image_id
        return not (self.claimed or self.wake.is_set() or stale)


@dataclass(eq=False)
class _Waiter:
    done: trio.Event = field(default_factory=trio.Event)
    entry: PoolEntry | None = None
    error: BaseException | None = None


class WarmPool:
    """Ready sessions of one profile; run it with :meth:`run` in a nursery the executor owns.

    Args:
        backend: where sessions are created (pooled) and removed.
        profile_name: the profile's name, as opens name it.
        profile: the exact profile an open must ask for to be served.
        size: ready sessions to keep.
        open_client: how the executor reaches a session's agent (the same for cold opens), so pooled and cold
            sessions get the same client.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        profile_name: str,
        profile: Profile,
        size: int,
        open_client: Callable[[SessionInfo], AbstractAsyncContextManager[AgentClient]],
    ) -> None:
        self.profile_name = profile_name
        """The profile's name."""
        self.profile = profile
        """The exact profile a session must ask for to be served from this pool."""
        self.size = size
        """Ready sessions to keep."""
        self._backend = backend
        self._open_client = open_client
        self._settings = profile.pool
        self._ready: deque[PoolEntry] = deque()
        self._waiters: deque[_Waiter] = deque()
        self._creating = 0
        self._max_creating_seen = 0
        self._counts = {"created": 0, "claimed": 0, "retired": 0, "failures": 0}
        self._backoff = 0.0
        self._not_before = -math.inf
        self._refill_at = -math.inf
        self._image_id: str | None = None
        self._poked = trio.Event()

    def serves(self, profile_name: str, profile: Profile, *, name: str | None) -> bool:
        """Whether an open of ``profile`` (called ``profile_name``) with ``name`` may be served from this pool."""
        return name is None and profile_name == self.profile_name and profile == self.profile

    def stats(self) -> PoolStats:
        """The pool's counters now."""
        return PoolStats(
            profile=self.profile_name,
            size=self.size,
            ready=len(self._ready),
            creating=self._creating,
            waiting=len(self._waiters),
            max_creating_seen=self._max_creating_seen,
            **self._counts,
        )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep the pool filled until cancelled; on cancellation every unclaimed session is removed."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch_image)
            task_status.started()
            while True:
                now = trio.current_time()
                if now < self._not_before:  # backing off while the engine fails
                    await trio.sleep_until(self._not_before)
                    continue
                # Within refill_delay_s of a claim only opens waiting in line are served.
                delayed = now < self._refill_at
                while self._deficit(waiters_only=delayed) > 0 and self._creating < self._settings.max_creating:
                    self._creating += 1
                    self._max_creating_seen = max(self._max_creating_seen, self._creating)
                    nursery.start_soon(self._hold)
                self._poked = trio.Event()
                with trio.move_on_at(self._refill_at if delayed else math.inf):
                    await self._poked.wait()

    async def claim(self) -> PoolEntry:
        """A ready session, marked claimed (the caller must set its ``released`` and remove its container); waits
        in line for the next creation when none is ready.

        Raises:
            ImageError, AgentError, EngineUnavailable, EngineError: the creation this open waited for failed.
        """
        while self._ready:
            entry = self._ready.popleft()
            if entry.usable(self._image_id):
                # Its replacement waits a moment (unless opens queue): the engine's work would slow this session's
                # first commands on a small machine.
                self._refill_at = trio.current_time() + self._settings.refill_delay_s
                return self._hand_out(entry)
            self._retire(entry)
        waiter = _Waiter()
        self._waiters.append(waiter)
        self._poke()
        try:
            await waiter.done.wait()
        except BaseException:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
            elif waiter.entry is not None:
                # Handed over just as this open was cancelled: nobody used it, so it goes, and nothing is reused.
                waiter.entry.released.set()
                await self._remove(waiter.entry.info.id)
            raise
        if waiter.error is not None:
            raise waiter.error
        assert waiter.entry is not None
        return waiter.entry

    def _deficit(self, *, waiters_only: bool = False) -> int:
        target = len(self._waiters) if waiters_only else self.size + len(self._waiters)
        return target - len(self._ready) - self._creating

    def _poke(self) -> None:
        self._poked.set()

    def _hand_out(self, entry: PoolEntry) -> PoolEntry:
        entry.claimed = True
        entry.wake.set()
        self._counts["claimed"] += 1
        self._poke()  # the refill starts now, in the background
        return entry

    def _retire(self, entry: PoolEntry) -> None:
        if entry in self._ready:
            self._ready.remove(entry)
        if not entry.wake.is_set():
            entry.wake.set()
        self._poke()

    def _offer(self, entry: PoolEntry) -> None:
        if self._waiters:
            waiter = self._waiters.popleft()
            waiter.entry = self._hand_out(entry)
            waiter.done.set()
        else:
            self._ready.append(entry)

    def _failed(self, exc: BaseException) -> None:
        self._counts["failures"] += 1
        initial, ceiling = self._settings.backoff_initial_s, self._settings.backoff_max_s
        self._backoff = min(ceiling, self._backoff * 2) if self._backoff else initial
        self._not_before = trio.current_time() + self._backoff
        if self._waiters:
            waiter = self._waiters.popleft()
            waiter.error = exc
            waiter.done.set()

    async def _hold(self) -> None:
        """Create one pooled session and keep it until it is claimed (then until released), retired or lost."""
        info: SessionInfo | None = None
        entry: PoolEntry | None = None
        try:
            async with AsyncExitStack() as stack:
                try:
                    image_id = await self._backend.image_id(self.profile.image)  # read before: a rebuild is caught
                    info = await self._backend.open_session(
                        profile=self.profile, profile_name=self.profile_name, pooled=True
                    )
                    if image_id is None:  # the open built it
                        image_id = await self._backend.image_id(self.profile.image)
                    client = await stack.enter_async_context(self._open_client(info))
                except (ExecutorError, OSError) as exc:
                    self._failed(exc)
                    return
                finally:
                    self._creating -= 1
                    self._poke()  # a creation slot is free
                self._backoff = 0.0
                self._counts["created"] += 1
                entry = PoolEntry(info=info, client=client, image_id=image_id, created_wall=time.time())
                await self._keep(entry)
        finally:
            if info is not None and (entry is None or not entry.claimed):
                if entry is not None:
                    self._counts["retired"] += 1
                    if entry in self._ready:
                        self._ready.remove(entry)
                await self._remove(info.id)
            self._poke()

    async def _remove(self, session_id: str) -> None:
        """Remove a session nobody uses: shielded, bounded and best effort (``session gc`` reaps what is left)."""
        with trio.CancelScope(shield=True), trio.move_on_after(_CLEANUP_BUDGET_S):
            for attempt in range(2):
                try:
                    await self._backend.stop_session(session_id)
                    return
                except ExecutorError:
                    # Typically someone else's removal of the same container is still in progress (its volume is
                    # "in use"); once more after a pause, then leave it to gc.
                    if attempt == 0:
                        await trio.sleep(1.0)

    async def _keep(self, entry: PoolEntry) -> None:
        self._offer(entry)
        async with trio.open_nursery() as watchers:

            async def lost() -> None:
                await entry.client.wait_closed()
                entry.wake.set()

            watchers.start_soon(lost)
            with trio.move_on_after(self._settings.max_idle_s):
                await entry.wake.wait()
            if entry.claimed:
                await entry.released.wait()
            watchers.cancel_scope.cancel()

    async def _watch_image(self) -> None:
        """Look the profile's image up every ``pool.image_check_s``; retire waiting sessions of an older build."""
        while True:
            try:
                current = await self._backend.image_id(self.profile.image)
            except ExecutorError:
                current = None  # the engine is failing: the creations' backoff deals with it
            if current is not None:
                self._image_id = current
                for entry in list(self._ready):
                    if not entry.usable(current):
                        self._retire(entry)
            await trio.sleep(self._settings.image_check_s)
