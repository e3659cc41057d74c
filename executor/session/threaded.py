"""The session API for asyncio programs: a trio loop hosted in a thread, behind awaitable calls.

::

    executor = ThreadedExecutor(settings)
    await executor.open()                       # setup and cleanup are separate calls
    session = await executor.open_session()
    result = await session.exec(["python3", "-c", "print(1)"])
    await session.close()
    await executor.close()

Every method is a coroutine an asyncio task (or any anyio backend's task) awaits; the work runs on the executor's
own trio loop (one thread per :class:`ThreadedExecutor`), so sessions are opened and closed by one trio task each,
as the trio API requires, while the caller may open and close them from any task, in any order. Errors leave as
the executor's own exceptions, never as exception groups. Cancelling the awaiting task (``asyncio`` task cancel,
``wait_for``, an anyio cancel scope such as inspect's time limits) cancels the trio call at once, as an in-process
call is cancelled: a command's process group is killed and its outcome journaled as ``cancelled``. Closing a
session (or the executor) first cancels its calls still running and waits for them, so every one of them ends
journaled; a call on a closed session raises :class:`~executor.errors.SessionClosed`. Calls do not share a thread
pool's bound: each waits in a thread of its own.

An approval handler (the executor's, or one given to a call) is the caller's code: opened from asyncio, it runs on
the caller's asyncio loop (an ``async def`` that awaits ``asyncio`` works); cancelling the call cancels it there. A
handler that says it runs on trio (``runs_on_trio = True``, as
:class:`~executor.gate.approvals.TerminalApprovalHandler`) runs on the executor's trio loop, as does every handler
of an executor opened from another loop than asyncio's.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal, TypeVar

import anyio.to_thread
import trio

from executor.config import Settings
from executor.errors import SessionClosed
from executor.gate.approvals import ApprovalHandler, ApprovalRequest
from executor.gate.judge import Judge
from executor.session.api import (
    USE_DEFAULT,
    ArtifactBytes,
    FileContent,
    HandlerChoice,
    TaskBytes,
    TaskInfo,
    ToolResult,
)
from executor.session.executor import Executor, open_executor
from executor.session.tools import Session

__all__ = ["ThreadedExecutor", "ThreadedSession"]

_T = TypeVar("_T")
_JOIN_BUDGET_S: Final = 60.0


class _OnCallersLoop:
    """An approval handler run on the asyncio loop of the program that opened the executor, from the trio thread."""

    def __init__(self, handler: ApprovalHandler, loop: asyncio.AbstractEventLoop) -> None:
        self._handler = handler
        self._loop = loop
        answerer = getattr(handler, "answerer", None)
        if answerer is not None:
            self.answerer = answerer  # who answers, as the journal records it

    async def __call__(self, request: ApprovalRequest) -> Any:
        async def answer() -> Any:
            return await self._handler(request)

        future = asyncio.run_coroutine_threadsafe(answer(), self._loop)
        try:
            # Abandoned on cancellation: the future is cancelled below, which ends the waiting thread too.
            return await trio.to_thread.run_sync(future.result, abandon_on_cancel=True)
        finally:
            future.cancel()  # nothing once it is done


def _sole(exc: BaseException) -> BaseException:
    """The one error inside nested single-error groups (a nursery's strict wrapping); a real group stays."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


class ThreadedSession:
    """One session, driven from asyncio. Get it from :meth:`ThreadedExecutor.open_session`; :meth:`close` it."""

    def __init__(self, owner: ThreadedExecutor, session: Session) -> None:
        self._owner = owner
        self.session = session
        """The trio session (call it only from the executor's trio thread)."""
        self._close_requested = trio.Event()
        self._closed = trio.Event()
        self._error: BaseException | None = None
        self._calls = _Calls()
        self._closing = False

    @property
    def id(self) -> str:
        """The session id."""
        return self.session.id

    @property
    def name(self) -> str | None:
        """The session's name, if it was given one."""
        return self.session.name

    @property
    def owner(self) -> str | None:
        """The owner token the session was opened with."""
        return self.session.owner

    @property
    def journal_path(self) -> Path:
        """The session's decision journal (ndjson)."""
        return self.session.journal_path

    @property
    def settings(self) -> Settings:
        """The executor's settings (its bounds: ``bash.max_timeout_ms``, ``write.read_max_bytes``, ...)."""
        return self._owner._settings

    def _handled(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        if "approval_handler" in kwargs:
            kwargs = {**kwargs, "approval_handler": self._owner.handler_for_trio(kwargs["approval_handler"])}
        return kwargs

    async def _call(self, fn: Callable[[], Awaitable[_T]]) -> _T:
        if self._closing:
            raise SessionClosed(f"session {self.id} is closed; open a new one (or attach to it again)")
        return await self._owner._run(fn, calls=self._calls)

    async def exec(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout_ms: int | None = None,
        user: str | None = None,
        max_output_bytes: int | None = None,
        approval_handler: HandlerChoice = USE_DEFAULT,
    ) -> ToolResult:
        """See :meth:`executor.session.Session.exec`."""
        return await self._call(
            lambda: self.session.exec(
                argv,
                stdin=stdin,
                cwd=cwd,
                env=env,
                timeout_ms=timeout_ms,
                user=user,
                max_output_bytes=max_output_bytes,
                approval_handler=self._owner.handler_for_trio(approval_handler),
            )
        )

    async def bash(self, command: str, **kwargs: Any) -> ToolResult:
        """See :meth:`executor.session.Session.bash` (same keyword arguments)."""
        return await self._call(lambda: self.session.bash(command, **self._handled(kwargs)))

    async def write_file(
        self,
        path: str,
        content: bytes | str,
        *,
        create_parents: bool = False,
        approval_handler: HandlerChoice = USE_DEFAULT,
    ) -> ToolResult:
        """See :meth:`executor.session.Session.write_file`."""
        return await self._call(
            lambda: self.session.write_file(
                path,
                content,
                create_parents=create_parents,
                approval_handler=self._owner.handler_for_trio(approval_handler),
            )
        )

    async def read_file(
        self, path: str, *, max_bytes: int | None = None, approval_handler: HandlerChoice = USE_DEFAULT
    ) -> FileContent:
        """See :meth:`executor.session.Session.read_file`."""
        return await self._call(
            lambda: self.session.read_file(
                path, max_bytes=max_bytes, approval_handler=self._owner.handler_for_trio(approval_handler)
            )
        )

    async def read_artifact(
        self, artifact_id: str, *, stream: str | None = None, offset: int = 0, max_bytes: int = 1 << 20
    ) -> ArtifactBytes:
        """See :meth:`executor.session.Session.read_artifact`."""
        return await self._call(
            lambda: self.session.read_artifact(artifact_id, stream=stream, offset=offset, max_bytes=max_bytes)
        )

    async def read_output(self, artifact_id: str, **kwargs: Any) -> ToolResult:
        """See :meth:`executor.session.Session.read_output` (same keyword arguments): what a result's hint names."""
        return await self._call(lambda: self.session.read_output(artifact_id, **kwargs))

    async def search_output(self, artifact_id: str, **kwargs: Any) -> ToolResult:
        """See :meth:`executor.session.Session.search_output` (same keyword arguments)."""
        return await self._call(lambda: self.session.search_output(artifact_id, **kwargs))

    async def start_task(self, command: str, **kwargs: Any) -> ToolResult:
        """See :meth:`executor.session.Session.start_task` (same keyword arguments)."""
        return await self._call(lambda: self.session.start_task(command, **self._handled(kwargs)))

    async def read_task(self, task_id: str, **kwargs: Any) -> ToolResult:
        """See :meth:`executor.session.Session.read_task` (same keyword arguments)."""
        return await self._call(lambda: self.session.read_task(task_id, **kwargs))

    async def read_task_bytes(self, task_id: str, **kwargs: Any) -> TaskBytes:
        """See :meth:`executor.session.Session.read_task_bytes` (same keyword arguments)."""
        return await self._call(lambda: self.session.read_task_bytes(task_id, **kwargs))

    async def stop_task(self, task_id: str, *, owner: str | None = None) -> TaskInfo:
        """See :meth:`executor.session.Session.stop_task`."""
        return await self._call(lambda: self.session.stop_task(task_id, owner=owner))

    async def list_tasks(self, *, owner: str | None = None) -> list[TaskInfo]:
        """See :meth:`executor.session.Session.list_tasks`."""
        return await self._call(lambda: self.session.list_tasks(owner=owner))

    async def close(self) -> None:
        """Leave the session: everything it started is killed and its container removed. Idempotent, also once the
        executor is closed (which closed its sessions)."""
        if self._owner._token is None:
            return
        await self._owner._run(self._close)

    async def _close(self) -> None:
        self._closing = True  # no new call from here on
        await self._calls.cancel_and_wait()  # they end journaled before the session's journal closes
        self._owner._sessions.discard(self)
        self._close_requested.set()
        await self._closed.wait()
        if self._error is not None:
            error, self._error = self._error, None
            raise error


class _Calls:
    """The calls in flight on one session, as trio cancel scopes (touched only on the trio thread)."""

    def __init__(self) -> None:
        self.scopes: set[trio.CancelScope] = set()
        self.closed = False
        self._idle = trio.Event()
        self._idle.set()

    def enter(self, scope: trio.CancelScope) -> None:
        if self.closed:
            raise SessionClosed("the session is closed; open a new one (or attach to it again)")
        if not self.scopes:
            self._idle = trio.Event()
        self.scopes.add(scope)

    def leave(self, scope: trio.CancelScope) -> None:
        self.scopes.discard(scope)
        if not self.scopes:
            self._idle.set()

    async def cancel_and_wait(self) -> None:
        self.closed = True
        for scope in list(self.scopes):
            scope.cancel()
        await self._idle.wait()


class ThreadedExecutor:
    """An executor on its own trio loop in a thread, for asyncio programs (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        *,
        approval_handler: ApprovalHandler | None = None,
        judge: Judge | None = None,
    ) -> None:
        self._settings = settings
        self._given_handler = approval_handler
        self._loop: asyncio.AbstractEventLoop | None = None
        self._judge = judge
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._executor: Executor | None = None
        self._stop: trio.Event | None = None
        self._failure: BaseException | None = None
        self._sessions: set[ThreadedSession] = set()

    @property
    def executor(self) -> Executor:
        """The trio executor (call it only from its trio thread)."""
        if self._executor is None:
            raise RuntimeError("the executor is not open; await open() first")
        return self._executor

    async def open(self) -> None:
        """Start the trio thread and open the executor (engine, artifact store, judge).

        Raises:
            EngineUnavailable: no Docker engine answers.
            RuntimeError: already open.
        """
        if self._thread is not None:
            raise RuntimeError("the executor is already open")
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None  # another anyio backend: handlers run on the trio thread
        handler = self.handler_for_trio(self._given_handler)
        ready = threading.Event()

        async def host() -> None:
            self._stop = trio.Event()
            try:
                async with (
                    open_executor(self._settings, approval_handler=handler, judge=self._judge) as executor,
                    trio.open_nursery() as nursery,
                ):
                    self._executor, self._nursery = executor, nursery
                    self._token = trio.lowlevel.current_trio_token()
                    ready.set()
                    await self._stop.wait()
                    nursery.cancel_scope.cancel()
            except BaseException as exc:
                self._failure = _sole(exc)
            finally:
                ready.set()

        self._thread = threading.Thread(target=trio.run, args=(host,), name="executor-trio", daemon=True)
        self._thread.start()
        await anyio.to_thread.run_sync(ready.wait)
        if self._token is None or self._failure is not None:
            await anyio.to_thread.run_sync(self._thread.join, _JOIN_BUDGET_S)
            self._thread = None
            failure, self._failure = self._failure, None
            raise failure or RuntimeError("the executor's trio thread stopped during open")

    def handler_for_trio(self, handler: Any) -> Any:
        """``handler`` (an approval handler, None or ``USE_DEFAULT``) as the trio thread calls it: on the caller's
        asyncio loop, unless it runs on trio (see the module docstring)."""
        if handler is None or handler is USE_DEFAULT or self._loop is None or getattr(handler, "runs_on_trio", False):
            return handler
        return _OnCallersLoop(handler, self._loop)

    async def _run(self, fn: Callable[[], Awaitable[_T]], *, calls: _Calls | None = None) -> _T:
        """Run ``fn`` on the trio thread; cancelling the awaiting task cancels it there (see the module docstring)."""
        token = self._token
        if token is None:
            if calls is not None:
                raise SessionClosed("the executor is closed, and its sessions with it; open a new one")
            raise RuntimeError("the executor is not open; await open() first")
        state: dict[str, Any] = {}

        async def call() -> _T:
            with trio.CancelScope() as scope:
                state["scope"] = scope
                if state.get("abandoned"):
                    scope.cancel()
                if calls is not None:
                    calls.enter(scope)  # outside the try: a refused call never leaves
                try:
                    return await fn()
                finally:
                    if calls is not None:
                        calls.leave(scope)
            # Cancelled here: its caller went away (nobody reads this), or its session is closing.
            raise SessionClosed("the session was closed while this call ran; it was cancelled")

        def abandon() -> None:  # on the trio thread
            state["abandoned"] = True
            scope = state.get("scope")
            if scope is not None:
                scope.cancel()

        def blocking() -> _T:
            return trio.from_thread.run(call, trio_token=token)

        try:
            # A limiter of its own: calls are not bounded by anyio's shared pool of 40 threads.
            return await anyio.to_thread.run_sync(blocking, abandon_on_cancel=True, limiter=anyio.CapacityLimiter(1))
        except anyio.get_cancelled_exc_class():
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(abandon)
            raise
        except BaseExceptionGroup as group:
            raise _sole(group) from None

    async def open_session(
        self,
        *,
        profile: str | None = None,
        image: str | None = None,
        name: str | None = None,
        owner: str | None = None,
        idle_s: float | Literal["none"] | None = None,
    ) -> ThreadedSession:
        """Start a session container; :meth:`ThreadedSession.close` removes it. ``idle_s`` is a named session's
        idle limit, as in :meth:`executor.session.Executor.open_session`.

        Raises:
            ConfigError, ImageError, AgentError, EngineUnavailable, EngineError: see
                :meth:`executor.session.Executor.open_session`.
        """

        async def host(task_status: trio.TaskStatus[ThreadedSession]) -> None:
            handle: ThreadedSession | None = None
            try:
                async with self.executor.open_session(
                    profile=profile, image=image, name=name, owner=owner, idle_s=idle_s
                ) as s:
                    handle = ThreadedSession(self, s)
                    self._sessions.add(handle)
                    task_status.started(handle)
                    await handle._close_requested.wait()
            except BaseException as exc:
                if handle is None:
                    raise
                if not isinstance(exc, trio.Cancelled):
                    handle._error = _sole(exc)  # the closer re-raises it; the executor's other sessions live on
                else:
                    raise
            finally:
                if handle is not None:
                    handle._closed.set()

        async def start() -> ThreadedSession:
            assert self._nursery is not None
            session: ThreadedSession = await self._nursery.start(host)
            return session

        return await self._run(start)

    async def close(self) -> None:
        """Close every session still open and the executor, and stop the trio thread. Idempotent."""
        thread, token, stop = self._thread, self._token, self._stop
        if thread is None:
            return
        for session in list(self._sessions):  # their calls in flight end journaled first
            with contextlib.suppress(Exception):
                await session.close()
        if token is not None and stop is not None:
            with contextlib.suppress(trio.RunFinishedError):
                await anyio.to_thread.run_sync(lambda: trio.from_thread.run_sync(stop.set, trio_token=token))
        await anyio.to_thread.run_sync(thread.join, _JOIN_BUDGET_S)
        self._thread = self._token = self._nursery = self._executor = None
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure
