"""The service's state: the sessions it holds, the work it runs, the asks it waits on, and its counters.

Everything a request starts that changes a session (exec, write, uploads, task starts) runs in the service's *work*
nursery, not in the request's task: a client that disconnects cancels nothing, and the command keeps capturing to
its artifact. Sessions are held open by tasks in the *holds* nursery (one task per session, entered and left by that
task, as ``async with`` requires). On shutdown (:meth:`Service.drain`) no new work is taken, running work gets a
grace period, then it is cancelled (the agent kills each run's process group) and every held session is closed:
unnamed sessions the service opened are removed, named and attached ones are left running for the next start.
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, Final, Literal, TypeVar

import trio

from executor.config import Settings
from executor.errors import (
    AgentProtocolError,
    ApprovalNotFound,
    Draining,
    ExecutorError,
    SandboxLost,
    SessionNotFound,
    SessionStopped,
)
from executor.gate.approvals import Answered, ApprovalHandler, ApprovalRequest
from executor.ids import is_session_id
from executor.sandbox.names import name_lock
from executor.sandbox.usage import UsageMark, read_usage, usage_path
from executor.service.files import unlinked_file
from executor.service.wire import (
    ApprovalView,
    ChunkEvent,
    DroppedEvent,
    ErrorEvent,
    PendingEvent,
    ResultEvent,
)
from executor.session import Executor, Session
from executor.session.pool import PoolStats

__all__ = [
    "Held",
    "LiveStream",
    "Metrics",
    "RawStreams",
    "Service",
    "open_service",
    "owns",
    "session_not_found_message",
]

logger = logging.getLogger("executor.service")

T = TypeVar("T")
Stream = Literal["stdout", "stderr"]
_REAP_EVERY_S: Final = 1.0
_CLOSE_BUDGET_S: Final = 20.0
_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, math.inf)


def owns(session_owner: str | None, caller: str | None) -> bool:
    """Whether ``caller`` may touch what ``session_owner`` owns: the unix socket's caller (None) owns everything;
    a token owns only what it created (compared in constant time)."""
    if caller is None:
        return True
    return session_owner is not None and secrets.compare_digest(session_owner, caller)


# ----------------------------------------------------------------------------------------------------------------
# Live streams.


_COALESCE_MAX: Final = 1024 * 1024
_SPOOL_READ_MAX: Final = 1024 * 1024


class _Spilled:
    """Bytes of one stream waiting in the spool file (``size`` bytes from ``offset``)."""

    __slots__ = ("offset", "size", "stream")

    def __init__(self, stream: Stream, offset: int, size: int) -> None:
        self.stream: Stream = stream
        self.offset = offset
        self.size = size


class _Held:
    """Bytes of one stream waiting in memory: the chunks as the tee gave them (kept, not copied)."""

    __slots__ = ("parts", "size", "stream")

    def __init__(self, stream: Stream, data: bytes) -> None:
        self.stream: Stream = stream
        self.parts = [data]
        self.size = len(data)

    def take(self) -> bytes:
        return self.parts[0] if len(self.parts) == 1 else b"".join(self.parts)


_Queued = _Held | _Spilled | DroppedEvent | PendingEvent | ResultEvent | ErrorEvent
_Item = tuple[Stream, bytes] | DroppedEvent | PendingEvent | ResultEvent | ErrorEvent


class LiveStream:
    """Events between a running command and its client; the command never waits for the client.

    What a slow client has not read yet waits in memory up to ``limit`` bytes per stream, then in an unlinked file
    under ``directory`` up to ``spool`` bytes (the file's size; it starts again empty each time the reader catches
    up), so a reader that falls behind gets every byte, later. Past both bounds it loses chunks: a ``dropped``
    event says how many bytes, and the final result counts them (``stdout_dropped``/``stderr_dropped``). A gone
    client (:meth:`detach`) loses the rest.

    Chunks of one stream that queue up in memory behind a slower reader are merged (up to 1 MiB an event), so a
    reader that falls behind catches up with fewer, larger events.
    """

    def __init__(self, limit: int, *, spool: int = 0, directory: Path | None = None) -> None:
        self._limit = limit
        self._spool = spool if directory is not None else 0
        self._directory = directory
        self._events: deque[_Queued] = deque()
        self._buffered: dict[str, int] = {"stdout": 0, "stderr": 0}
        self._dropped: dict[str, int] = {"stdout": 0, "stderr": 0}
        self.skipped: dict[Stream, int] = {"stdout": 0, "stderr": 0}
        """Bytes of each stream this stream did not carry (past both bounds), over its whole life."""
        self._file: int | None = None
        self._file_w = 0
        self._spilled = 0
        self.spilled_bytes = 0
        """Bytes that went through the spool file, over the stream's life."""
        self._wake = trio.Event()
        self._closed = False
        self.detached = False
        self.begun = trio.Event()
        """Set once there is something to answer with: the command started (:meth:`started`), or a first event."""

    def started(self) -> None:
        """The command was spawned (its cwd existed): the stream may begin."""
        self.begun.set()

    def failed_before_start(self) -> ErrorEvent | None:
        """The error that ended the stream before anything else happened, if that is how it ended."""
        if self._closed and len(self._events) == 1 and isinstance(self._events[0], ErrorEvent):
            return self._events[0]
        return None

    def chunk(self, stream: str, data: bytes) -> None:
        """Queue bytes of ``stream`` (a capture tee: never blocks, never raises)."""
        if self.detached or self._closed or stream not in self._buffered or not data:
            return
        name: Stream = "stdout" if stream == "stdout" else "stderr"
        if self._buffered[name] + len(data) <= self._limit:
            self._flush_dropped(name)
            last = self._events[-1] if self._events else None
            if isinstance(last, _Held) and last.stream == name and last.size + len(data) <= _COALESCE_MAX:
                last.parts.append(data)
                last.size += len(data)
            else:
                self._events.append(_Held(name, data))
            self._buffered[name] += len(data)
        elif not self._spill(name, data):
            self._dropped[name] += len(data)
            self.skipped[name] += len(data)
            return
        self._wake.set()
        self.begun.set()

    def _spill(self, name: Stream, data: bytes) -> bool:
        if self._file_w + len(data) > self._spool or self._directory is None:
            return False
        try:
            if self._file is None:
                self._file = unlinked_file(self._directory, prefix="live-")
                self._file_w = 0
            offset = self._file_w
            view = memoryview(data)
            while view:
                view = view[os.pwrite(self._file, view, self._file_w) :]
                self._file_w = offset + len(data) - len(view)
        except OSError:
            # A full disk: these bytes are dropped (and counted) like any past the bounds; never raised into a tee.
            logger.warning("a live exec stream could not spool %d bytes of %s", len(data), name, exc_info=True)
            return False
        self._flush_dropped(name)
        last = self._events[-1] if self._events else None
        if isinstance(last, _Spilled) and last.stream == name and last.offset + last.size == offset:
            last.size += len(data)
        else:
            self._events.append(_Spilled(name, offset, len(data)))
        self._spilled += len(data)
        self.spilled_bytes += len(data)
        return True

    def note(self, event: PendingEvent) -> None:
        """Queue an out-of-band note (an approval the command waits for)."""
        if not (self.detached or self._closed):
            self._events.append(event)
            self._wake.set()
            self.begun.set()

    def close(self, event: ResultEvent | ErrorEvent) -> None:
        """Queue the final event; nothing follows it. A result learns how many bytes the stream skipped."""
        if self._closed:
            return
        self._flush_dropped("stdout")
        self._flush_dropped("stderr")
        if isinstance(event, ResultEvent) and any(self.skipped.values()):
            update = {"stdout_dropped": self.skipped["stdout"], "stderr_dropped": self.skipped["stderr"]}
            event = ResultEvent(result=event.result.model_copy(update=update))
        self._events.append(event)
        self._closed = True
        self._wake.set()
        self.begun.set()

    @property
    def ended(self) -> bool:
        """Whether the final event (the command's result or error) was queued."""
        return self._closed

    def detach(self) -> None:
        """The client is gone (or done): drop what is queued and everything after, and the spool file."""
        self.detached = True
        self._events.clear()
        self._close_file()

    def _close_file(self) -> None:
        if self._file is not None:
            os.close(self._file)
            self._file = None
        self._file_w = self._spilled = 0

    def _flush_dropped(self, name: Stream) -> None:
        if self._dropped[name]:
            self._events.append(DroppedEvent(stream=name, bytes=self._dropped[name]))
            self._dropped[name] = 0

    async def events(self) -> AsyncIterator[ChunkEvent | DroppedEvent | PendingEvent | ResultEvent | ErrorEvent]:
        """The events in order, until the final one."""
        async for item in self.items():
            yield ChunkEvent(stream=item[0], data=item[1]) if isinstance(item, tuple) else item

    def _take(self, spilled: _Spilled) -> bytes:
        assert self._file is not None
        data = os.pread(self._file, min(spilled.size, _SPOOL_READ_MAX), spilled.offset)
        if not data:
            raise OSError("the live stream's spool file ended early")
        spilled.offset += len(data)
        spilled.size -= len(data)
        self._spilled -= len(data)
        if spilled.size:
            self._events.appendleft(spilled)
        elif not self._spilled:
            # The reader caught up with the file: it starts again empty (its size is what the bound counts).
            os.ftruncate(self._file, 0)
            self._file_w = 0
        return data

    async def items(self) -> AsyncIterator[_Item]:
        """The events in order, until the final one, with chunks as plain ``(stream, bytes)`` pairs: the hot path of
        a stream builds no model per chunk."""
        while True:
            for item in self._take_batch(0):
                yield item
            if await self._drained():
                return

    async def batches(self, max_bytes: int = _COALESCE_MAX) -> AsyncIterator[list[_Item]]:
        """The events in order, until the final one, in batches of what is queued when the reader asks (chunk bytes
        up to about ``max_bytes`` a batch): a reader that writes a batch at once makes one write of many chunks."""
        while True:
            batch = self._take_batch(max_bytes)
            if batch:
                yield batch
            if await self._drained():
                return

    def _take_batch(self, max_bytes: int) -> list[_Item]:
        """At least one queued item (if any), then more while their bytes stay under ``max_bytes``."""
        batch: list[_Item] = []
        size = 0
        while self._events and (not batch or size < max_bytes):
            item = self._events.popleft()
            if isinstance(item, _Spilled):
                data = self._take(item)
                batch.append((item.stream, data))
                size += len(data)
            elif isinstance(item, _Held):
                self._buffered[item.stream] -= item.size
                batch.append((item.stream, item.take()))
                size += item.size
            else:
                batch.append(item)
        return batch

    async def _drained(self) -> bool:
        """True once the final event was taken; else waits until something is queued (or returns at once)."""
        if self._events:
            return False
        if self._closed:
            return True
        # No checkpoint between the emptiness check and the new event: a producer cannot slip in unseen.
        self._wake = trio.Event()
        await self._wake.wait()
        return False


class RawStreams:
    """The first ``limit`` bytes of each stream, for a result's raw ``stdout``/``stderr``."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._parts: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        self.total: dict[str, int] = {"stdout": 0, "stderr": 0}

    def add(self, stream: str, data: bytes) -> None:
        """Keep what fits (a capture tee)."""
        part = self._parts.get(stream)
        if part is None:
            return
        self.total[stream] += len(data)
        room = self._limit - len(part)
        if room > 0:
            part += data[:room]

    def get(self, stream: str) -> tuple[bytes, bool]:
        """The kept bytes and whether they are the whole stream."""
        part = self._parts[stream]
        return bytes(part), len(part) == self.total[stream]


# ----------------------------------------------------------------------------------------------------------------
# Metrics.


@dataclass
class Metrics:
    """Counters for ``/v1/metrics`` (Prometheus text)."""

    commands: dict[str, int] = field(default_factory=dict)
    buckets: list[int] = field(default_factory=lambda: [0] * len(_BUCKETS))
    latency_sum: float = 0.0
    latency_count: int = 0
    requests_rejected: int = 0

    def command(self, outcome: str, seconds: float) -> None:
        """Count one finished command."""
        self.commands[outcome] = self.commands.get(outcome, 0) + 1
        for i, bound in enumerate(_BUCKETS):
            if seconds <= bound:
                self.buckets[i] += 1
        self.latency_sum += seconds
        self.latency_count += 1

    def render(
        self, *, sessions: int, running: int, approvals: int, draining: bool, pools: Sequence[PoolStats] = ()
    ) -> str:
        """The Prometheus text exposition."""
        out = [
            "# HELP executor_sessions Sessions the service holds.",
            "# TYPE executor_sessions gauge",
            f"executor_sessions {sessions}",
            "# HELP executor_running_commands Commands running now.",
            "# TYPE executor_running_commands gauge",
            f"executor_running_commands {running}",
            "# HELP executor_pending_approvals Asks waiting for an answer.",
            "# TYPE executor_pending_approvals gauge",
            f"executor_pending_approvals {approvals}",
            "# HELP executor_draining 1 after SIGTERM.",
            "# TYPE executor_draining gauge",
            f"executor_draining {int(draining)}",
            "# HELP executor_pool_warm_sessions Warm sessions ready to be claimed, per profile.",
            "# TYPE executor_pool_warm_sessions gauge",
            *(f'executor_pool_warm_sessions{{profile="{p.profile}"}} {p.ready}' for p in pools),
            "# HELP executor_pool_creating_sessions Warm sessions being created, per profile.",
            "# TYPE executor_pool_creating_sessions gauge",
            *(f'executor_pool_creating_sessions{{profile="{p.profile}"}} {p.creating}' for p in pools),
            "# HELP executor_commands_total Finished commands by outcome.",
            "# TYPE executor_commands_total counter",
        ]
        for outcome, count in sorted(self.commands.items()):
            out.append(f'executor_commands_total{{outcome="{outcome}"}} {count}')
        out += [
            "# HELP executor_command_seconds Command latency through the service (gate, run, capture, view).",
            "# TYPE executor_command_seconds histogram",
        ]
        for bound, count in zip(_BUCKETS, self.buckets, strict=True):
            le = "+Inf" if bound == math.inf else repr(bound)
            out.append(f'executor_command_seconds_bucket{{le="{le}"}} {count}')
        out += [
            f"executor_command_seconds_sum {self.latency_sum}",
            f"executor_command_seconds_count {self.latency_count}",
        ]
        return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------------------------------------------
# Sessions and approvals.


@dataclass
class Held:
    """A session the service holds open."""

    session: Session
    idle_limit_s: float | None
    closing: trio.Event = field(default_factory=trio.Event)
    done: trio.Event = field(default_factory=trio.Event)
    last_used: float = field(default_factory=time.monotonic)
    busy: int = 0
    stopping: bool = False
    """Stopped by a caller: new work is refused and running work is being cancelled."""
    work: set[trio.CancelScope] = field(default_factory=set)
    """The scopes of the requests using the session now (:meth:`Service.using`)."""
    quiet: trio.Event = field(default_factory=trio.Event)
    """Set whenever nothing uses the session."""
    throwaway: bool = False
    """Made for one command: removed when an exec stream's client goes away before its command ends."""
    idle_stop: trio.Event | None = None
    """Set (to an unset event) once its idle limit stops it; the event is set when that stop is done."""

    def __post_init__(self) -> None:
        self.quiet.set()


@dataclass
class _Pending:
    view_of: ApprovalRequest
    approval_id: str
    session_id: str
    owner: str | None
    deadline: float
    answered: trio.Event = field(default_factory=trio.Event)
    answer: Answered | None = None


class Service:
    """The service's state over an open executor. Made by :func:`open_service`."""

    def __init__(
        self, executor: Executor, settings: Settings, holds: trio.Nursery, work: trio.Nursery, started: float
    ) -> None:
        self.executor = executor
        self.settings = settings
        self.svc = settings.service
        self._holds = holds
        self._work = work
        self.started = started
        self.held: dict[str, Held] = {}
        self._attach_lock = trio.Lock()
        self._pending: dict[str, _Pending] = {}
        self.metrics = Metrics()
        self.running = 0
        self._idle = trio.Event()
        self._idle.set()
        self.draining = False

    # -- sessions ----------------------------------------------------------------------------------------------

    def _idle_limit(self, asked: float | str | None) -> float | None:
        if asked == "none":
            return None
        if asked is None:
            return self.settings.sessions.idle_s
        return float(asked)

    async def create(
        self,
        *,
        owner: str | None,
        profile: str | None,
        image: str | None,
        name: str | None,
        idle_s: float | str | None,
        throwaway: bool = False,
    ) -> Held:
        """Open a new session (named ones are kept running when the service stops; a ``throwaway`` one goes with
        the client of its command, see :meth:`abandoned`)."""
        self.check_open()
        stored: float | Literal["none"] | None = (
            None if idle_s is None else ("none" if idle_s == "none" else float(idle_s))
        )
        opener = partial(
            self.executor.open_session,
            profile=profile,
            image=image,
            name=name,
            owner=owner,
            keep=name is not None,
            idle_s=stored,
        )
        held = await self._start_hold(opener, self._idle_limit(idle_s))
        held.throwaway = throwaway
        if name is not None:
            # What the session stores (a recreated one keeps its own limit unless asked otherwise) is the limit.
            held.idle_limit_s = held.session.info.idle_limit_s
        return held

    async def _start_hold(
        self, opener: Callable[[], AbstractAsyncContextManager[Session]], idle_limit_s: float | None
    ) -> Held:
        held: Held = await self._holds.start(self._hold, opener, idle_limit_s)
        return held

    async def _hold(
        self,
        opener: Callable[[], AbstractAsyncContextManager[Session]],
        idle_limit_s: float | None,
        *,
        task_status: trio.TaskStatus[Held],
    ) -> None:
        held: Held | None = None
        try:
            async with opener() as session:
                held = Held(session, idle_limit_s)
                self.held[session.id] = held
                task_status.started(held)
                async with trio.open_nursery() as watch:
                    watch.start_soon(self._release_when_lost, held)
                    await held.closing.wait()
                    watch.cancel_scope.cancel()
        except Exception:
            if held is None:
                raise  # not started: the request that asked gets the error
            logger.exception("closing session %s failed", held.session.id)
        finally:
            if held is not None:
                self._forget(held)
                held.done.set()

    async def _release_when_lost(self, held: Held) -> None:
        """Let go of a session whose container died while held: the next request finds it again by its labels (a
        named one's ``--create`` recreates it on its kept workspace) instead of failing on the dead connection."""
        await held.session.wait_lost()
        if held.closing.is_set() or held.stopping:
            return  # a stop took it down, and closes it once the removal is done (closing it now raced the removal)
        logger.warning("session %s lost its agent (its container stopped or died)", held.session.id)
        self._forget(held)
        # What runs in it fails on the dead connection now (nothing to cancel): let it record that first. The wait
        # for the close itself ends when _hold, seeing ``closing``, cancels this watcher.
        await self._close_held(held, cancel=False)

    def _find_held(self, id_or_name: str) -> Held | None:
        held = self.held.get(id_or_name)
        if held is not None:
            return held
        for candidate in self.held.values():
            if candidate.session.name == id_or_name:
                return candidate
        return None

    async def get(self, id_or_name: str, owner: str | None) -> Held:
        """The held session ``id_or_name``, attaching (and holding) an existing one found by its labels.

        Raises:
            SessionNotFound: no such running session, or another owner's.
        """
        held = self._find_held(id_or_name)
        if held is not None and held.idle_stop is not None:
            # Its idle stop is under way: let it finish, then answer as for any stopped session (a named one's
            # `--create` starts it again) rather than hand out a session about to be closed.
            with trio.move_on_after(self.settings.docker.stop_timeout_s + 2 * _CLOSE_BUDGET_S):
                await held.idle_stop.wait()
            held = self._find_held(id_or_name)
        if held is None:
            held = await self._attach(id_or_name, owner)
        if not owns(held.session.owner, owner):
            raise _not_found(id_or_name)
        return held

    async def _attach(self, id_or_name: str, owner: str | None) -> Held:
        # One attach at a time: two first requests for one session must not hold it twice (attaches are rare).
        # By name, under the home's lock on it: a session another process is starting is waited for, not seen half
        # made (a container still stopped, or gone for a moment, while it is recreated).
        name = None if is_session_id(id_or_name) else id_or_name
        async with self.executor.name_lock(name), self._attach_lock:
            held = self._find_held(id_or_name)
            if held is None:
                self.check_open()
                info = await self.executor.backend.find_session(id_or_name)
                if not owns(info.owner, owner):
                    raise _not_found(id_or_name)
                held = self._find_held(info.id)
                if held is None:
                    limit = info.idle_limit_s if info.name is not None else None
                    opener = partial(self.executor.attach_session, info.id, owner=info.owner)
                    held = await self._start_hold(opener, limit)
                    # Its idle clock goes on from its last use (another process's, or before a restart).
                    held.last_used = time.monotonic() - info.idle_for_s(datetime.now(UTC))
            return held

    async def stop(self, id_or_name: str, owner: str | None) -> None:
        """Kill everything the session started and remove it.

        Raises:
            SessionNotFound: no such session, or another owner's.
        """
        held = self._find_held(id_or_name)
        if held is not None:
            if not owns(held.session.owner, owner):
                raise _not_found(id_or_name)
            session_id = held.session.id
            # Removed first, as an in-process stop does: a command running in it loses its agent to a stop it is
            # told of and ends with its own cancelled result (its run, its view), the one every surface gives;
            # closing the held session then finds nothing running (what still does is cancelled).
            held.stopping = True
            try:
                with suppress(SessionNotFound):  # the service checked the caller: act as the session's owner
                    await self.executor.stop_session(session_id, owner=held.session.owner)
            finally:
                await self._close_held(held)  # even when the removal failed: it is not left half-stopped
            return
        info = await self.executor.backend.find_session(id_or_name)
        if not owns(info.owner, owner):
            raise _not_found(id_or_name)
        await self.executor.stop_session(info.id, owner=info.owner)

    def abandoned(self, held: Held) -> None:
        """The client of a command's stream went away before the command ended: a throwaway session goes with it
        (removed in the background, which kills the command); any other session's command runs on into its
        artifact."""
        if held.throwaway and not held.stopping and self.held.get(held.session.id) is held:
            self.spawn(partial(self._remove_abandoned, held))

    async def _remove_abandoned(self, held: Held) -> None:
        with suppress(ExecutorError):
            await self.stop(held.session.id, held.session.owner)
            logger.info("removed throwaway session %s: its client went away mid-command", held.session.id)

    @staticmethod
    async def _close_held(held: Held, *, cancel: bool = True) -> None:
        """Close a held session without closing it under running work: refuse new work, cancel what runs (the
        agent kills each run's process group and the session journals it as cancelled) unless ``cancel`` is False,
        wait for that, then close the session and wait for it to close (each wait bounded)."""
        held.stopping = True
        if cancel:
            for scope in list(held.work):
                scope.cancel()
        with trio.move_on_after(_CLOSE_BUDGET_S):
            await held.quiet.wait()
        held.closing.set()
        with trio.move_on_after(_CLOSE_BUDGET_S):
            await held.done.wait()

    def _forget(self, held: Held) -> None:
        """Stop listing ``held``: the next request for its session finds it again by its labels (or not at all)."""
        if self.held.get(held.session.id) is held:
            del self.held[held.session.id]

    def release(self, held: Held) -> None:
        """Stop holding a session whose sandbox is lost: the next request finds it again (or "not found")."""
        self._forget(held)
        held.closing.set()

    @asynccontextmanager
    async def using(self, held: Held) -> AsyncIterator[Session]:
        """Mark the session busy (the idle clock stops) while a request uses it.

        Raises:
            SessionStopped: the session was stopped before or while this ran (what ran was cancelled).
        """
        if held.stopping:
            raise SessionStopped(f"session {held.session.id} is being stopped")
        held.busy += 1
        held.quiet = trio.Event() if held.busy == 1 else held.quiet
        mark = UsageMark(usage_path(self.settings.home, held.session.id))
        scope = trio.CancelScope()
        held.work.add(scope)
        try:
            with mark, scope:
                yield held.session
        except (SandboxLost, AgentProtocolError):
            # The connection is gone (a refused spawn, an AgentError, is the caller's input and keeps it).
            self.release(held)
            raise
        finally:
            held.work.discard(scope)
            held.busy -= 1
            if held.busy == 0:
                held.quiet.set()
            held.last_used = time.monotonic()
        if scope.cancelled_caught:
            raise SessionStopped(
                f"session {held.session.id} was stopped while this ran: it was cancelled (its process group killed)"
            )

    async def reap_idle(self) -> None:
        """Stop sessions past their idle limit, forever (runs in the holds nursery): the held ones every second by
        the service's own clock, and every ``sessions.idle_check_s`` the home's others by their stored limits and
        usage files (named sessions found again after a restart, or used by in-process callers). That sweep is
        ``session gc``'s: it also removes what the home's sessions left behind (the exited container of an unnamed
        session whose service was killed, and its workspace), so a long-running service leaks nothing."""
        next_sweep = trio.current_time()
        while True:
            await trio.sleep(_REAP_EVERY_S)
            now = time.monotonic()
            for held in list(self.held.values()):
                limit = held.idle_limit_s
                if limit is not None and held.busy == 0 and now - held.last_used > limit:
                    with suppress(ExecutorError):
                        await self._stop_if_idle_everywhere(held, limit)
            if trio.current_time() >= next_sweep and not self.draining:
                next_sweep = trio.current_time() + self.settings.sessions.idle_check_s
                try:
                    report = await self.executor.gc(skip=frozenset(self.held))
                except ExecutorError as exc:
                    logger.warning("looking for idle sessions and leftovers failed: %s", exc)
                else:
                    for stopped in report.idle_stopped:
                        logger.info("stopped idle session %s", stopped)
                    if report.removed:
                        logger.info("removed %s", ", ".join(report.removed))

    def _idle_here(self, held: Held, limit: float) -> bool:
        """Whether ``held`` is idle past ``limit`` by the service's clock, with nothing running in it or stopping it."""
        return (
            self.held.get(held.session.id) is held
            and not held.stopping
            and held.busy == 0
            and time.monotonic() - held.last_used > limit
        )

    async def _stop_if_idle_everywhere(self, held: Held, limit: float) -> None:
        """Stop a held session idle by the service's clock unless another process (an in-process CLI call, an MCP
        server) uses it: a command running there, or one that ended within the limit, keeps it (its usage file says
        so). The usage file stays locked while the session stops, so a call starting meanwhile is not missed."""
        path = usage_path(self.settings.home, held.session.id)
        usage, lock = await trio.to_thread.run_sync(partial(read_usage, path, hold=True))
        try:
            if usage.busy:
                return
            if usage.last_used_at is not None:
                since = (datetime.now(UTC) - usage.last_used_at).total_seconds()
                if since <= limit:
                    held.last_used = time.monotonic() - max(0.0, since)  # used elsewhere: idle from then
                    return
            await self._stop_idle_held(held, limit)
        finally:
            if lock is not None:
                os.close(lock)

    async def _stop_idle_held(self, held: Held, limit: float) -> None:
        """Stop a held session that went idle: an unnamed one is removed, a named one's workspace is kept (its name
        starts it again), as ``gc`` does. Work that came while the stop was being decided keeps it; work that comes
        once it is decided is refused, never accepted and then killed by it."""
        session = held.session
        if session.name is None:
            if self._idle_here(held, limit):  # stop() marks it stopping before its first checkpoint
                await self.stop(session.id, None)
            return
        # Under the name's lock, as every stop (and gc's idle stop): a process reaching the session by its name now
        # holds it, and keeps it; one that comes later waits for the stop and finds it stopped.
        async with name_lock(self.settings.home, session.name, wait=False) as ours:
            if not ours or not self._idle_here(held, limit):
                return
            # Decided, with no checkpoint since the check: new work is refused from here (get() waits for the stop
            # to end, using() refuses), so nothing is accepted only to be cancelled by it.
            held.stopping = True
            held.idle_stop = done = trio.Event()
            try:
                # Its background tasks go with it: stopped first, their output kept (as `session stop` does).
                with trio.move_on_after(self.settings.docker.stop_timeout_s), suppress(ExecutorError):
                    await session.end_tasks()
                await self._close_held(held)
                await self.executor.backend.stop_session(session.id, keep_workspace=True)
            finally:
                done.set()
        logger.info("stopped idle session %s (its workspace is kept)", session.name)

    # -- work --------------------------------------------------------------------------------------------------

    def check_open(self) -> None:
        """Refuse new work while draining.

        Raises:
            Draining: SIGTERM was received.
        """
        if self.draining:
            self.metrics.requests_rejected += 1
            raise Draining("the service is shutting down and takes no new work; retry against its next start")

    def _enter_work(self) -> None:
        self.check_open()
        self.running += 1
        self._idle = trio.Event() if self.running == 1 else self._idle

    def _leave_work(self) -> None:
        self.running -= 1
        if self.running == 0:
            self._idle.set()

    def spawn(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Run ``fn`` in the work nursery, counted as running work (it must not raise).

        Raises:
            Draining: SIGTERM was received.
        """
        self._enter_work()

        async def run() -> None:
            try:
                await fn()
            finally:
                self._leave_work()

        self._work.start_soon(run)

    async def run(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run ``fn`` in the work nursery and wait for its value: the caller going away does not cancel it.

        Raises:
            Draining: SIGTERM was received.
            ExecutorError: what ``fn`` raised, or a note that the service cancelled it on shutdown.
        """
        done = trio.Event()
        box: dict[str, Any] = {}

        async def job() -> None:
            try:
                box["value"] = await fn()
            except Exception as exc:
                box["error"] = exc
            finally:
                done.set()

        self.spawn(job)
        await done.wait()
        if "error" in box:
            raise box["error"]
        if "value" not in box:
            raise ExecutorError("the service cancelled this action while shutting down")
        value: T = box["value"]
        return value

    async def drain(self, grace_s: float) -> None:
        """Stop taking work; let running work finish for ``grace_s``, then cancel it (process groups killed)."""
        self.draining = True
        for pending in list(self._pending.values()):
            pending.answered.set()  # unanswered asks are denied now rather than holding the grace period
        with trio.move_on_after(grace_s):
            await self._idle.wait()
        self._work.cancel_scope.cancel()
        # Cancelled runs unwind through the agent (kill, then its result): wait for that, bounded, so their
        # clients get the final event before the listener closes.
        with trio.move_on_after(_CLOSE_BUDGET_S):
            await self._idle.wait()

    # -- approvals ---------------------------------------------------------------------------------------------

    def approval_handler(
        self, session_id: str, owner: str | None, notify: Callable[[PendingEvent], None] | None = None
    ) -> ApprovalHandler:
        """A handler that parks each ask until ``answer`` (or the timeout, which denies)."""

        async def ask(request: ApprovalRequest) -> Answered | None:
            if self.draining:
                return None
            # The journal's id for the ask (one id from the journal to the person answering it).
            approval_id = request.approval_id or f"ap-{secrets.token_hex(8)}"
            if approval_id in self._pending:
                approval_id = f"ap-{secrets.token_hex(8)}"  # never two pending asks under one id
            timeout = self.svc.approval_timeout_s
            pending = _Pending(request, approval_id, session_id, owner, time.monotonic() + timeout)
            self._pending[approval_id] = pending
            try:
                if notify is not None:
                    notify(PendingEvent(approval_id=approval_id, summary=request.summary, reasons=request.reasons))
                with trio.move_on_after(timeout):
                    await pending.answered.wait()
                return pending.answer
            finally:
                del self._pending[approval_id]

        return ask

    def approvals(self, owner: str | None) -> list[ApprovalView]:
        """The asks ``owner`` may answer."""
        now = time.monotonic()
        return [
            ApprovalView(
                approval_id=p.approval_id,
                session_id=p.session_id,
                summary=p.view_of.summary,
                reasons=p.view_of.reasons,
                identity=p.view_of.identity,
                expires_in_s=max(0.0, p.deadline - now),
            )
            for p in self._pending.values()
            if owns(p.owner, owner)
        ]

    def answer(self, approval_id: str, approve: bool, owner: str | None) -> None:
        """Answer an ask once; the session's journal records who answered (``owner``, or ``socket`` for the unix
        socket's callers).

        Raises:
            ApprovalNotFound: no such pending ask, it was answered already, or it is another owner's.
        """
        pending = self._pending.get(approval_id)
        if pending is None or pending.answered.is_set() or not owns(pending.owner, owner):
            raise ApprovalNotFound(f"no pending approval {approval_id!r}; GET /v1/approvals lists yours")
        pending.answer = Answered(approve, by=owner or "socket")
        pending.answered.set()


def _not_found(id_or_name: str) -> SessionNotFound:
    return SessionNotFound(session_not_found_message(id_or_name))


def session_not_found_message(id_or_name: str) -> str:
    """The one text of a 404 for a session: the same whether it does not exist or is another owner's."""
    return f"no session {id_or_name!r}; GET /v1/sessions lists yours"


@asynccontextmanager
async def open_service(executor: Executor, settings: Settings) -> AsyncIterator[Service]:
    """The service's state over ``executor``; leaving drains nothing (call :meth:`Service.drain` first) and closes
    every held session (unnamed ones the service opened are removed)."""
    async with trio.open_nursery() as holds:
        # The work nursery lives in a task of its own, so cancelling it (drain) cancels the work and nothing else:
        # the caller's body (the listener, answering the cancelled runs' clients) runs outside its scope.
        work: trio.Nursery = await holds.start(_own_nursery)
        service = Service(executor, settings, holds, work, time.time())
        holds.start_soon(service.reap_idle)
        try:
            yield service
        finally:
            work.cancel_scope.cancel()
            for held in list(service.held.values()):
                held.closing.set()
            holds.cancel_scope.deadline = trio.current_time() + _CLOSE_BUDGET_S
            # reap_idle never ends by itself: the holds' own exits are what the deadline waits for.
            with suppress(Exception):
                await _wait_closed(service)
            holds.cancel_scope.cancel()


async def _own_nursery(*, task_status: trio.TaskStatus[trio.Nursery]) -> None:
    async with trio.open_nursery() as nursery:
        task_status.started(nursery)
        await trio.sleep_forever()


async def _wait_closed(service: Service) -> None:
    while service.held:
        held = next(iter(service.held.values()))
        await held.done.wait()
