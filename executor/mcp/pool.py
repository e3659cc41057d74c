"""The session pool: sessions held open across tool calls, each by a task of the pool's nursery."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
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


LeaseKey = tuple[str, ...]
"""Which session a call uses: ("stdio",), ("connection", id, owner), ("owner", owner) or ("named", name)."""
Opener = Callable[[], AbstractAsyncContextManager[SessionAPI]]
"""Opens (or attaches) the session of a key."""


class SessionPool:
    """Sessions opened for clients, each held by a task in the pool's nursery.

    A session is an ``async with`` object, so it is entered and left by one task that lives exactly as long as the
    session: the tool call that first needs it starts the task and waits until the session is open; the end of the
    client's connection (or of the server) tells the task to leave.
    """

    def __init__(self, executor: ExecutorAPI, nursery: trio.Nursery) -> None:
        self._executor = executor
        self._nursery = nursery
        self._leases: dict[LeaseKey, _Lease] = {}
        self._locks: dict[LeaseKey, trio.Lock] = {}
        self._closing = False

    def get(self, key: LeaseKey) -> SessionAPI | None:
        """The session already open under ``key``, if any."""
        lease = self._leases.get(key)
        return lease.session if lease is not None else None

    async def acquire(self, key: LeaseKey, opener: Opener) -> SessionAPI:
        """The session under ``key``, opening it with ``opener`` if it is not open yet."""
        lock = self._locks.setdefault(key, trio.Lock())
        async with lock:
            lease = self._leases.get(key)
            if lease is not None:
                return lease.session
            if self._closing:
                raise ExecutorError("the MCP server is shutting down; reconnect and retry")
            started: _Lease = await self._nursery.start(self._hold, key, opener)
            return started.session

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
                        # A named session whose container went away (idle-stopped, stopped, died) is let go at
                        # once: the next call attaches again, which recreates it on its kept workspace. (A default
                        # session is not replaced behind the client's back: its files would be gone.)
                        watch.start_soon(_set_when, session.wait_lost, lease.closing)
                    await lease.closing.wait()
                    watch.cancel_scope.cancel()
        except Exception:
            if lease is None:
                raise  # not started yet: the tool call that asked for the session gets the error
            logger.exception("closing an MCP client's session failed")
        finally:
            if lease is not None:
                if self._leases.get(key) is lease:
                    del self._leases[key]
                lease.done.set()


async def _set_when(happens: Callable[[], Awaitable[None]], event: trio.Event) -> None:
    await happens()
    event.set()
