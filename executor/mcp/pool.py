"""The session pool: sessions held open across tool calls, each by a task of the pool's nursery."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field

import trio

from executor.errors import ExecutorError
from executor.session import ExecutorAPI, SessionAPI

__all__ = ["LeaseKey", "Opener", "SessionPool"]

logger = logging.getLogger(__name__)


@dataclass
class _Lease:
    session: SessionAPI
    closing: trio.Event = field(default_factory=trio.Event)
    done: trio.Event = field(default_factory=trio.Event)
    busy: int = 0
    """Tool calls using the session now."""
    quiet: trio.Event = field(default_factory=trio.Event)
    """Set whenever no tool call uses the session."""

    def __post_init__(self) -> None:
        self.quiet.set()

    def enter(self) -> None:
        self.busy += 1
        if self.busy == 1:
            self.quiet = trio.Event()

    def leave(self) -> None:
        self.busy -= 1
        if self.busy == 0:
            self.quiet.set()


LeaseKey = tuple[str, ...]
"""Which session a call uses: ("stdio",), ("connection", id, owner), ("owner", owner) or ("named", name)."""
Opener = Callable[[], AbstractAsyncContextManager[SessionAPI]]
"""Opens (or attaches) the session of a key."""


class SessionPool:
    """Sessions opened for clients, each held by a task in the pool's nursery.

    A session is an ``async with`` object, so it is entered and left by one task that lives exactly as long as the
    session: the tool call that first needs it starts the task and waits until the session is open; the end of the
    client's connection (or of the server) tells the task to leave. Tool calls use a session inside :meth:`use` (or
    :meth:`use_open`), so a session that goes away under them is closed only once they have ended.
    """

    def __init__(self, executor: ExecutorAPI, nursery: trio.Nursery) -> None:
        self._executor = executor
        self._nursery = nursery
        self._leases: dict[LeaseKey, _Lease] = {}
        self._locks: dict[LeaseKey, trio.Lock] = {}
        self._lost: set[LeaseKey] = set()
        self._closing = False

    def was_lost(self, key: LeaseKey) -> bool:
        """Whether the named session last held under ``key`` went away (and none has been opened under it since)."""
        return key in self._lost

    def forget_loss(self, key: LeaseKey) -> None:
        """Open the next session under ``key`` as a first one (the loss was reported to the client)."""
        self._lost.discard(key)

    @asynccontextmanager
    async def use(self, key: LeaseKey, opener: Opener) -> AsyncIterator[SessionAPI]:
        """The session under ``key`` (opened with ``opener`` if it is not open yet), kept open while this is entered."""
        lease = await self._acquire(key, opener)
        try:
            yield lease.session
        finally:
            lease.leave()

    @asynccontextmanager
    async def use_open(self, key: LeaseKey) -> AsyncIterator[SessionAPI | None]:
        """The session already open under ``key`` (None if none is), kept open while this is entered."""
        lease = self._leases.get(key)
        if lease is None:
            yield None
            return
        lease.enter()
        try:
            yield lease.session
        finally:
            lease.leave()

    async def _acquire(self, key: LeaseKey, opener: Opener) -> _Lease:
        """The lease under ``key``, opened if needed, already marked in use (no checkpoint between the two: a loss
        cannot close it in between)."""
        lock = self._locks.setdefault(key, trio.Lock())
        async with lock:
            lease = self._leases.get(key)
            if lease is None:
                if self._closing:
                    raise ExecutorError("the MCP server is shutting down; reconnect and retry")
                lease = await self._nursery.start(self._hold, key, opener)
                self._lost.discard(key)
            lease.enter()
            return lease

    async def release(self, key: LeaseKey) -> None:
        """Close the session under ``key`` (if open) and wait until it is closed."""
        lease = self._leases.get(key)
        if lease is not None:
            lease.closing.set()
            await lease.done.wait()

    def close_all(self) -> None:
        """Tell every held session to close; the pool's nursery waits for them."""
        self._closing = True
        for lease in list(self._leases.values()):
            lease.closing.set()

    async def _hold(
        self,
        key: LeaseKey,
        opener: Opener,
        *,
        task_status: trio.TaskStatus[_Lease],
    ) -> None:
        lease: _Lease | None = None
        try:
            async with opener() as session:
                lease = _Lease(session)
                self._leases[key] = lease
                task_status.started(lease)
                async with trio.open_nursery() as watch:
                    if key[0] == "named":
                        watch.start_soon(self._let_go_when_lost, key, lease)
                    await lease.closing.wait()
                    watch.cancel_scope.cancel()
        except Exception:
            if lease is None:
                raise  # not started yet: the tool call that asked for the session gets the error
            logger.exception("closing an MCP client's session failed")
        finally:
            if lease is not None:
                self._drop(key, lease)
                lease.done.set()

    async def _let_go_when_lost(self, key: LeaseKey, lease: _Lease) -> None:
        """Let go of a named session whose container went away (idle-stopped, stopped, died): the next call attaches
        again (see :meth:`was_lost`) instead of failing 'sandbox lost' until the server restarts. (A default session
        is not replaced behind the client's back: its files would be gone.)"""
        await lease.session.wait_lost()
        if self._drop(key, lease):
            self._lost.add(key)
        # A call running in it ends on the lost connection with its own result (cancelled, when the session was
        # stopped), which the session journals: closing it now (its journal included) would fail that call. The
        # wait ends when the server closes it anyway (then _hold cancels this watcher).
        await lease.quiet.wait()
        lease.closing.set()

    def _drop(self, key: LeaseKey, lease: _Lease) -> bool:
        """Stop listing ``lease`` under ``key`` (if it still is); whether it was."""
        if self._leases.get(key) is lease:
            del self._leases[key]
            return True
        return False
