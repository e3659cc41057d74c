"""The ``/v1`` JSON API as an ASGI app (starlette), over a :class:`~executor.service.core.Service`.

Identity: a request on the unix socket (mode 0600, so only the socket's user reaches it) is the home's owner and
sees everything; a request over TCP must carry one of ``service.tokens`` as a bearer token, and that token is an
*owner* (``owner_for_token``, the MCP server's scheme): it sees only the sessions, tasks, artifacts and approvals it
created; another token's are "not found". Errors are JSON (:class:`~executor.service.wire.ErrorResponse`) naming
the class in the executor's exception tree, so the client raises the same exception.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import posixpath
import secrets
import shlex
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from datetime import UTC, datetime
from functools import partial
from typing import Any, Final, TypeVar

import trio
from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from executor.artifacts import tee_captures
from executor.artifacts.hints import Surface
from executor.errors import (
    ApprovalNotFound,
    ArtifactError,
    CommandRejected,
    ConfigError,
    ContentRejected,
    Draining,
    ExecutorError,
    ImageError,
    OutputRangeError,
    PathRejected,
    PatternError,
    PatternTimeout,
    SandboxError,
    SessionNameTaken,
    SessionNotFound,
    SessionNotRunning,
    SessionRejected,
    SessionStopped,
    SpawnFailed,
    StreamNotFound,
    TaskNotFound,
    WriteError,
    public_name,
)
from executor.ids import is_session_id
from executor.mcp.server import owner_for_token, refuse_long_head
from executor.models import StdinFile
from executor.nesting import NestingTooDeep, check_json_depth
from executor.sandbox.agent.client import on_run_started
from executor.sandbox.base import SessionInfo
from executor.service.core import Held, LiveStream, RawStreams, Service, owns, session_not_found_message
from executor.service.files import Spool, spooled_body
from executor.service.openapi import openapi_document
from executor.service.wire import (
    EXEC_FRAMES,
    ApprovalAnswer,
    ChunkEvent,
    ErrorEvent,
    ErrorInfo,
    ErrorResponse,
    ExecRequest,
    FilesQuery,
    Health,
    PageEvent,
    ReadQuery,
    ResultEvent,
    SearchQuery,
    SessionCreate,
    SessionView,
    TaskReadQuery,
    TaskStart,
    TaskView,
    WriteRequest,
    range_message,
    validation_message,
)
from executor.session import Session, TaskBytes, ToolResult
from executor.session.output import OutputTools
from executor.session.presentation import results_read_by
from executor.tools.archive import archive_bounds, pack_command, unpack_command, write_entry_stream
from executor.tools.bash import build_run_spec

__all__ = ["build_app"]

logger = logging.getLogger("executor.service")

M = TypeVar("M", bound=BaseModel)
_OWNER_KEY: Final = "executor.owner"
_NDJSON: Final = "application/x-ndjson"
_FOLLOW_POLL_S: Final = 0.2
_VERSION: Final = "0.1.0"
_JSON_ENVELOPE_BYTES: Final = 1024 * 1024
"""Room in a JSON body for what is neither the carried bytes nor the command (path, cwd, env, flags)."""


class _HttpError(Exception):
    def __init__(self, status: int, type_: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.type = type_


def _refuse_declared(request: Request, limit: int, bound: int) -> None:
    """Refuse a body whose declared length passes ``limit`` before reading any of it (413 naming ``bound``, the
    ``service.max_request_bytes`` the limit derives from)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(bound)


def _too_large(limit: int) -> _HttpError:
    message = f"the request carries more than {limit} bytes (service.max_request_bytes)"
    return _HttpError(413, "RequestTooLarge", message)


def _status_of(exc: ExecutorError) -> int:
    if isinstance(exc, Draining):
        return 503
    if isinstance(exc, SessionNotFound | TaskNotFound | ApprovalNotFound | StreamNotFound) or (
        isinstance(exc, ArtifactError) and isinstance(exc, LookupError)
    ):
        return 404
    if isinstance(
        exc,
        CommandRejected
        | PathRejected
        | ContentRejected
        | ConfigError
        | OutputRangeError
        | PatternError
        | PatternTimeout
        | ImageError,
    ):
        return 400
    if isinstance(exc, WriteError | SessionStopped | SessionNameTaken):
        return 409
    if isinstance(exc, SessionRejected):
        return 400
    if isinstance(exc, SpawnFailed):
        # The session cannot start a process now (its pids limit, descriptors): a later call may succeed once
        # what runs in it ends. A missing cwd never gets here: the tools raise it as CommandRejected.
        return 503
    if isinstance(exc, SandboxError):
        return 502
    return 503


def _error(status: int, type_: str, message: str, headers: dict[str, str] | None = None) -> Response:
    body = ErrorResponse(error=ErrorInfo(type=type_, message=message))
    return Response(body.model_dump_json(), status_code=status, media_type="application/json", headers=headers)


def _json(model: BaseModel | Sequence[BaseModel], status: int = 200) -> Response:
    if isinstance(model, BaseModel):
        text = model.model_dump_json()
    else:
        text = "[" + ",".join(item.model_dump_json() for item in model) + "]"
    return Response(text, status_code=status, media_type="application/json")


def _line(event: BaseModel) -> bytes:
    if isinstance(event, ChunkEvent):
        return _chunk_line(event.stream, event.data)
    return event.model_dump_json().encode() + b"\n"


def _chunk_line(stream: str, data: bytes) -> bytes:
    # The hot path of a stream, written by hand: the same JSON as ChunkEvent's, without a model.
    return b'{"kind":"chunk","stream":"' + stream.encode() + b'","data":"' + base64.b64encode(data) + b'"}\n'


_FRAME_KIND: Final = {"stdout": 1, "stderr": 2}
_EVENT_KIND: Final = 3


_FRAME_HEADER: Final = struct.Struct(">B3xI")
"""A frame's header in the binary exec stream (:data:`executor.service.wire.EXEC_FRAMES`): kind, 3 zero bytes,
the payload's length."""


def _wants_frames(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return any(part.split(";", 1)[0].strip() == EXEC_FRAMES for part in accept.split(","))


class _LiveResponse(StreamingResponse):
    """A live exec stream's response: however it ends (even before its body starts, when the client went away
    first), the stream is detached, so its memory and spool file go at once."""

    def __init__(self, live: LiveStream, body: AsyncIterator[bytes], *, media_type: str) -> None:
        super().__init__(body, media_type=media_type)
        self._live = live

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._live.detach()


class _Api:
    def __init__(self, service: Service, settings_sha256: str | None, environment_sha256: str | None) -> None:
        self.service = service
        self.svc = service.svc
        self.settings_sha256 = settings_sha256
        self.environment_sha256 = environment_sha256

    # -- plumbing ----------------------------------------------------------------------------------------------

    @staticmethod
    def owner(request: Request) -> str | None:
        owner = request.scope.get(_OWNER_KEY)
        return owner if isinstance(owner, str) else None

    def json_limit(self) -> int:
        """Largest JSON body: ``service.max_request_bytes`` bounds the bytes a request carries (a write's content,
        an exec's stdin), not their base64, so a JSON body may hold that much base64 beside a command as long as
        ``bash.max_command_bytes`` in its most escaped JSON form (``\\uXXXX``: six characters a byte)."""
        carried = self.svc.max_request_bytes
        return 4 * -(-carried // 3) + 6 * self.service.settings.bash.max_command_bytes + _JSON_ENVELOPE_BYTES

    async def body(self, request: Request, limit: int) -> bytes:
        _refuse_declared(request, limit, self.svc.max_request_bytes)
        parts = bytearray()
        async for chunk in request.stream():
            parts += chunk
            if len(parts) > limit:
                raise _too_large(self.svc.max_request_bytes)
        return bytes(parts)

    async def parse(self, request: Request, model: type[M]) -> M:
        raw = await self.body(request, self.json_limit())
        try:
            # Measured before any parser recurses into it (executor/nesting.py).
            check_json_depth(raw, max_depth=self.svc.max_json_depth, setting="service.max_json_depth")
        except NestingTooDeep as exc:
            raise _HttpError(400, "ValidationError", f"the request body is refused: {exc}") from None
        try:
            parsed = model.model_validate_json(raw or b"{}")
        except ValidationError as exc:
            raise _HttpError(422, "ValidationError", validation_message(exc)) from exc
        del raw
        carried = getattr(parsed, "stdin", None) or getattr(parsed, "content", None)
        if isinstance(carried, bytes) and len(carried) > self.svc.max_request_bytes:
            raise _too_large(self.svc.max_request_bytes)
        return parsed

    @staticmethod
    def query(request: Request, model: type[M], *, refused: str = "ValidationError") -> M:
        """The query parameters as ``model``; refused (422) as the error type ``refused`` names (a read's bad range
        is ``OutputRangeError``, as in-process, so a client raises the same exception)."""
        try:
            return model.model_validate(dict(request.query_params), strict=False)
        except ValidationError as exc:
            # Only a value out of its range is ``refused``; anything else (an unknown or missing parameter, a word
            # where a number goes) stays a malformed request.
            if all(error["type"] in _RANGE_ERRORS for error in exc.errors()):
                raise _HttpError(422, refused, range_message(model, exc)) from exc
            raise _HttpError(422, "ValidationError", validation_message(exc)) from exc

    async def held(self, request: Request) -> Held:
        return await self.service.get(request.path_params["session"], self.owner(request))

    def view(self, held: Held | None, info: SessionInfo) -> SessionView:
        idle: float | None
        if held is not None:
            idle = 0.0 if held.busy else time.monotonic() - held.last_used
        else:
            idle = None if info.workspace_only else info.idle_for_s(datetime.now(UTC))
        return SessionView(
            id=info.id,
            name=info.name,
            image=info.image,
            profile=info.profile,
            state=info.state,
            created_at=info.created_at,
            held=held is not None,
            owner=info.owner,
            idle_limit_s=held.idle_limit_s if held is not None else info.idle_limit_s,
            idle_s=idle,
            workspace_only=info.workspace_only,
        )

    # -- health, metrics, openapi ------------------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        service = self.service
        return _json(
            Health(
                status="draining" if service.draining else "ok",
                version=_VERSION,
                sessions=len(service.held),
                running=service.running,
                settings_sha256=self.settings_sha256,
                environment_sha256=self.environment_sha256,
            )
        )

    async def metrics(self, request: Request) -> Response:
        service = self.service
        text = service.metrics.render(
            sessions=len(service.held),
            running=service.running,
            approvals=len(service.approvals(None)),
            draining=service.draining,
            pools=service.executor.pool_stats(),
        )
        return Response(text, media_type="text/plain; version=0.0.4")

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(openapi_document(_VERSION))

    # -- sessions ----------------------------------------------------------------------------------------------

    async def list_sessions(self, request: Request) -> Response:
        infos = await self.service.executor.list_sessions(owner=self.owner(request))
        return _json([self.view(self.service.held.get(info.id), info) for info in infos])

    async def create_session(self, request: Request) -> Response:
        body = await self.parse(request, SessionCreate)
        owner = self.owner(request)
        created: list[Held] = []
        failure: Exception | None = None
        left = trio.Event()
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                # The body is read: the next message is the client going away (a Ctrl-C on the CLI). The create is
                # then cancelled, which removes what it made (the backend's cleanup on any exception).
                while (await request.receive())["type"] != "http.disconnect":
                    pass
                left.set()
                if not created:
                    nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
            try:
                created.append(
                    await self.service.create(
                        owner=owner,
                        profile=body.profile,
                        image=body.image,
                        name=body.name,
                        idle_s=body.idle_s,
                        throwaway=body.throwaway,
                    )
                )
                # A disconnect already queued is seen before the session is handed over.
                await trio.lowlevel.checkpoint()
            except Exception as exc:  # raised past the nursery, not wrapped in a group: the route maps it
                failure = exc
            nursery.cancel_scope.cancel()
        if failure is not None:
            raise failure
        if not created:
            return Response(status_code=499)  # nobody reads it: the client left while the session was made
        held = created[0]
        if left.is_set() and body.name is None:
            # Made just as its client left: nobody will ever name it, so it goes now rather than at its idle limit.
            await self.service.stop(held.session.id, owner)
            return Response(status_code=499)
        return _json(self.view(held, held.session.info), status=201)

    async def inspect_session(self, request: Request) -> Response:
        ident = request.path_params["session"]
        info = await self.service.executor.backend.find_session(ident)
        if not owns(info.owner, self.owner(request)):
            raise SessionNotFound(session_not_found_message(ident))
        return _json(self.view(self.service.held.get(info.id), info))

    async def stop_session(self, request: Request) -> Response:
        await self.service.stop(request.path_params["session"], self.owner(request))
        return Response(status_code=204)

    # -- exec --------------------------------------------------------------------------------------------------

    async def exec(self, request: Request) -> Response:
        body = await self.parse(request, ExecRequest)
        held = await self.held(request)
        session = held.session
        # Refused input is a 400 before the stream starts (the same check the session makes again).
        build_run_spec(
            body.command,
            settings=self.service.settings.bash,
            profile=session.profile,
            cwd=body.cwd,
            env=body.env,
            stdin=body.stdin,
            timeout_ms=body.timeout_ms,
        )
        live = LiveStream(
            self.svc.stream_buffer_bytes,
            spool=self.svc.stream_spool_bytes,
            directory=self.service.settings.home / "tmp",
        )
        raw = RawStreams(self.svc.result_stream_max_bytes)
        owner = self.owner(request)
        handler = self.service.approval_handler(session.id, owner, live.note) if body.approvals == "wait" else None

        def tee(stream: str, data: bytes) -> None:
            raw.add(stream, data)
            live.chunk(stream, data)

        artifacts: list[str] = []

        async def job() -> None:
            started = time.monotonic()
            try:
                async with self.service.using(held):
                    with tee_captures(tee, kind="bash", on_begin=artifacts.append), on_run_started(live.started):
                        result = await session.bash(
                            body.command,
                            cwd=body.cwd,
                            env=body.env,
                            stdin=body.stdin,
                            timeout_ms=body.timeout_ms,
                            focus_mode=body.focus_mode,
                            intent=body.intent,
                            approval_handler=handler,
                        )
            except SessionStopped:
                artifact = artifacts[-1] if artifacts else None
                self.service.metrics.command("cancelled", time.monotonic() - started)
                action = _action_of(session, artifact)
                live.close(ResultEvent(result=_cancelled(raw, artifact, action, "the session was stopped")))
                return
            except ExecutorError as exc:
                live.close(ErrorEvent(error=ErrorInfo(type=public_name(exc), message=str(exc))))
                return
            except Exception as exc:
                logger.exception("exec failed")
                live.close(ErrorEvent(error=ErrorInfo(type="ExecutorError", message=f"the service failed: {exc}")))
                return
            except BaseException:
                # Cancelled by the service's shutdown: the agent has killed the run's process group.
                artifact = artifacts[-1] if artifacts else None
                self.service.metrics.command("cancelled", time.monotonic() - started)
                action = _action_of(session, artifact)
                live.close(ResultEvent(result=_cancelled(raw, artifact, action, "the service is shutting down")))
                raise
            self.service.metrics.command(result.outcome, time.monotonic() - started)
            if result.run is not None and result.run.cause == "sandbox_lost":
                self.service.release(held)
            live.close(ResultEvent(result=_exec_result(result, raw, streams=body.result_streams)))

        self.service.spawn(job)
        # The stream begins once the command has started (or the gate answered, or it asks for an approval): a
        # command that cannot start is then a plain error response: a cwd that does not exist like other input
        # (400), a session that cannot start a process now (its pids limit) like a busy service (503).
        await live.begun.wait()
        failed = live.failed_before_start()
        plain = _PLAIN_BEFORE_START.get(failed.error.type) if failed is not None else None
        if failed is not None and plain is not None:
            return _error(_status_of(plain(failed.error.message)), failed.error.type, failed.error.message)

        async def lines() -> AsyncIterator[bytes]:
            try:
                async for item in live.items():
                    yield _chunk_line(*item) if isinstance(item, tuple) else _line(item)
            finally:
                gone(live)

        async def frames() -> AsyncIterator[bytes]:
            # What is queued goes out as one body chunk: one join (the only copy of the bytes here) and one send
            # through the server for many frames.
            try:
                async for batch in live.batches():
                    parts: list[bytes] = []
                    for item in batch:
                        if isinstance(item, tuple):
                            parts += (_FRAME_HEADER.pack(_FRAME_KIND[item[0]], len(item[1])), item[1])
                        else:
                            payload = item.model_dump_json().encode()
                            parts += (_FRAME_HEADER.pack(_EVENT_KIND, len(payload)), payload)
                    yield b"".join(parts)
            finally:
                gone(live)

        def gone(live: LiveStream) -> None:
            # A client gone mid-stream: the command goes on into its artifact, unless its session was made for it.
            ended = live.ended
            live.detach()
            if not ended:
                self.service.abandoned(held)

        if _wants_frames(request):
            return _LiveResponse(live, frames(), media_type=EXEC_FRAMES)
        return _LiveResponse(live, lines(), media_type=_NDJSON)

    # -- write and files ---------------------------------------------------------------------------------------

    async def _gated_bash(
        self,
        held: Held,
        owner: str | None,
        command: str,
        *,
        stdin: bytes | StdinFile | None = None,
        wait: bool = True,
    ) -> tuple[ToolResult, RawStreams]:
        raw = RawStreams(self.svc.download_max_bytes)
        handler = self.service.approval_handler(held.session.id, owner) if wait else None

        async def run() -> ToolResult:
            async with self.service.using(held):
                with tee_captures(raw.add, kind="bash"):
                    return await held.session.bash(command, stdin=stdin, approval_handler=handler)

        result = await self.service.run(run)
        self.service.metrics.command(result.outcome, (result.run.duration_ms / 1000) if result.run else 0.0)
        if result.run is not None and result.run.cause == "sandbox_lost":
            self.service.release(held)
        return result, raw

    async def write(self, request: Request) -> Response:
        body = await self.parse(request, WriteRequest)
        held = await self.held(request)
        owner = self.owner(request)
        wait = body.approvals == "wait"
        if body.parents:
            parent = posixpath.dirname(body.path)
            if parent:
                made, _ = await self._gated_bash(held, owner, f"mkdir -p -- {shlex.quote(parent)}", wait=wait)
                if made.outcome != "completed":
                    return _json(made)
        handler = self.service.approval_handler(held.session.id, owner) if wait else None

        async def run() -> ToolResult:
            async with self.service.using(held):
                return await held.session.write_file(body.path, body.content, approval_handler=handler)

        result = await self.service.run(run)
        if result.outcome == "completed" and body.mode is not None:
            path = str((result.data or {}).get("path") or body.path)
            mode = body.mode.lstrip("0") or "0"
            chmod, _ = await self._gated_bash(held, owner, f"chmod {mode} -- {shlex.quote(path)}", wait=wait)
            if chmod.outcome != "completed":
                # The file is written: the write's own result (its action, artifact and facts), marked with what
                # became of the mode, never the chmod's "nothing ran" alone.
                note = f"[the file was written, but its mode was not set to {mode}: the chmod was {chmod.outcome}]"
                data = {**(result.data or {}), "mode_set": None, "mode_action_id": chmod.action_id}
                update = {"outcome": chmod.outcome, "text": f"{result.text}\n{note}\n{chmod.text}", "data": data}
                return _json(result.model_copy(update=update))
            # The write reports the mode it staged with; say what the file has now.
            update = {"text": f"{result.text}\n[mode set to {mode}]", "data": {**(result.data or {}), "mode_set": mode}}
            result = result.model_copy(update=update)
        return _json(result)

    async def upload(self, request: Request) -> Response:
        query = self.query(request, FilesQuery)
        command = unpack_command(query.path)  # a path no command can take is refused before the body is read
        held = await self.held(request)
        # Unpacked by the agent's fs-unpack inside the container, as the session user, following no symlink: the
        # sandbox is the boundary, and the action is gated like any command, bound to the hash of the entry stream
        # (its stdin). The body goes to a private file as it arrives (the hash needs every byte before the gate),
        # then, as an entry stream, to fs-unpack's stdin a frame at a time: never whole in memory.
        limit = self.svc.max_request_bytes
        with spooled_body(self.service.settings.home / "tmp", limit) as spool:
            _refuse_declared(request, limit, limit)
            async for chunk in request.stream():
                if not spool.write(chunk):
                    raise _too_large(limit)
            # What the session is sent is the archive's entries as they will be written (read once here, within
            # the archive.* bounds): the gate judges exactly those and the agent writes those and nothing else.
            with spooled_body(self.service.settings.home / "tmp", limit) as entries:
                bounds = archive_bounds(self.service.settings.archive)
                await trio.to_thread.run_sync(
                    partial(write_entry_stream, spool.path, entries.path, bounds=bounds, spool_dir=entries.path.parent)
                )
                stdin = StdinFile(path=str(entries.path), size=entries.path.stat().st_size)
                wait = query.approvals == "wait"
                result, raw = await self._gated_bash(held, self.owner(request), command, stdin=stdin, wait=wait)
        return _json(_exec_result(result, raw))

    async def download(self, request: Request) -> Response:
        query = self.query(request, FilesQuery)
        command = pack_command(query.path)
        held = await self.held(request)
        owner = self.owner(request)
        limit = self.svc.download_max_bytes
        scope = trio.CancelScope()
        spool = Spool(
            limit=limit,
            memory=self.svc.stream_buffer_bytes,
            directory=self.service.settings.home / "tmp",
            on_overflow=scope.cancel,
        )
        handler = self.service.approval_handler(held.session.id, owner) if query.approvals == "wait" else None
        artifacts: list[str] = []
        box: dict[str, Any] = {}
        errors = RawStreams(self.svc.result_stream_max_bytes)

        def tee(stream: str, data: bytes) -> None:
            if stream == "stdout":
                spool.add(stream, data)
            else:
                errors.add(stream, data)

        async def job() -> None:
            started = time.monotonic()
            try:
                with scope:
                    async with self.service.using(held):
                        with tee_captures(tee, kind="bash", on_begin=artifacts.append):
                            result = await held.session.bash(command, approval_handler=handler)
                    box["result"] = result
                    self.service.metrics.command(result.outcome, time.monotonic() - started)
                    if result.run is not None and result.run.cause == "sandbox_lost":
                        self.service.release(held)
            except Exception as exc:
                box["error"] = exc
            finally:
                spool.close()

        self.service.spawn(job)
        too_large = _HttpError(
            413,
            "RequestTooLarge",
            f"the archive is above {limit} bytes (service.download_max_bytes); download a smaller folder",
        )
        try:
            # Errors found early (refused, denied, a missing path, too large) are still a status and a JSON body;
            # past the first bytes the stream is on its way and a failure cuts it short.
            await spool.wait_for(_DOWNLOAD_HEAD_BYTES)
        except BaseException:
            scope.cancel()
            spool.discard()
            raise
        if spool.closed or spool.overflow:
            await spool.wait_closed()
            early: ToolResult | None = box.get("result")
            if "error" in box or spool.overflow or early is None or early.outcome != "completed":
                spool.discard()
            if "error" in box:
                raise box["error"]
            if spool.overflow:
                raise too_large
            if early is None:
                raise ExecutorError("the service cancelled this download while shutting down")
            if early.outcome != "completed":
                raise _HttpConflict(_exec_result(early, errors))

        async def body() -> AsyncIterator[bytes]:
            finished = False
            try:
                async for chunk in spool.chunks():
                    yield chunk
                finished = True
            finally:
                if not finished:
                    scope.cancel()  # the client went away: stop tar
            late: ToolResult | None = box.get("result")
            if spool.overflow or late is None or late.outcome != "completed":
                why = "it grew past service.download_max_bytes" if spool.overflow else _why(late, box.get("error"))
                logger.warning("download of %s cut short: %s", query.path, why)
                # The response has started: cutting the connection (no final chunk) is how the client learns it.
                raise _DownloadCut(f"the download of {query.path} was cut short: {why}")

        # The bound goes with the stream: a client whose download is cut at it can say why (a cut says nothing).
        artifact = artifacts[-1] if artifacts else None
        headers = {
            "x-executor-artifact": artifact or "",
            "x-executor-action": _action_of(held.session, artifact) or "",
            _DOWNLOAD_BOUND_HEADER: str(limit),
        }
        return _CuttableResponse(body(), media_type="application/x-tar", headers=headers)

    # -- output ------------------------------------------------------------------------------------------------

    @asynccontextmanager
    async def output_tools(self, request: Request) -> AsyncIterator[Session | OutputTools]:
        """The recovery tools of the session a request names: its own while it runs, else (an id, its container
        gone) its stored artifacts, which outlive it, for the caller that owned it (the owner the artifact index
        recorded with the session; another's are "not found", as while it ran)."""
        ident = request.path_params["session"]
        try:
            held = await self.held(request)
        except SessionNotFound as exc:
            if not is_session_id(ident):
                raise  # a name is resolved only through a container, and there is none
            try:
                recorded = self.service.executor.store.session_owner(ident)
            except SessionNotFound:
                raise exc from None
            if not owns(recorded, self.owner(request)):
                raise exc from None
            async with self.service.executor.open_output_reader(ident) as reader:
                yield reader
            return
        async with self.service.using(held):
            yield held.session

    async def read_output(self, request: Request) -> Response:
        query = self.query(request, ReadQuery, refused="OutputRangeError")
        async with self.output_tools(request) as tools:
            result = await tools.read_output(
                request.path_params["artifact"],
                stream=query.stream,
                start_line=query.start_line,
                line_count=query.line_count,
                start_byte_in_line=query.start_byte_in_line,
            )
        return _json(result)

    async def search_output(self, request: Request) -> Response:
        query = self.query(request, SearchQuery, refused="OutputRangeError")
        async with self.output_tools(request) as tools:
            result = await tools.search_output(
                request.path_params["artifact"],
                pattern=query.pattern,
                stream=query.stream,
                limit=query.limit,
                start_line=query.start_line,
            )
        return _json(result)

    # -- tasks -------------------------------------------------------------------------------------------------

    async def list_tasks(self, request: Request) -> Response:
        held = await self.held(request)
        owner = self.owner(request)
        infos = await held.session.list_tasks(owner=owner)
        return _json([TaskView(**info.model_dump(exclude={"owner", "result"}), run=info.result) for info in infos])

    async def start_task(self, request: Request) -> Response:
        body = await self.parse(request, TaskStart)
        held = await self.held(request)
        owner = self.owner(request)
        handler = self.service.approval_handler(held.session.id, owner) if body.approvals == "wait" else None

        async def run() -> ToolResult:
            async with self.service.using(held):
                return await held.session.start_task(
                    body.command, cwd=body.cwd, env=body.env, owner=owner, approval_handler=handler
                )

        result = await self.service.run(run)
        # 201 only when a task was made: a gated start (denied, blocked, an unanswered ask) made nothing and is
        # answered as exec and write answer theirs, 200 with the result saying why.
        return _json(result, status=201 if result.outcome == "completed" else 200)

    async def read_task(self, request: Request) -> Response:
        query = self.query(request, TaskReadQuery, refused="OutputRangeError")
        held = await self.held(request)
        owner = self.owner(request)
        task_id = request.path_params["task"]
        session = held.session

        async def page(offset: int) -> tuple[ToolResult, TaskBytes]:
            """A page as ``task`` read presents it, and the exact bytes it shows (any bytes, UTF-8 or not)."""
            async with self.service.using(held):
                return await session.read_task_page(
                    task_id, stream=query.stream, offset=offset, max_bytes=query.max_bytes, owner=owner
                )

        if not query.follow:
            view, _ = await page(query.offset)
            return _json(view)

        async def lines() -> AsyncIterator[bytes]:
            at, sent = query.offset, False
            while True:
                try:
                    view, raw = await page(at)
                except ExecutorError as exc:
                    yield _line(ErrorEvent(error=ErrorInfo(type=public_name(exc), message=str(exc))))
                    return
                done = not raw.running and raw.next_offset >= raw.end
                if raw.data or done or not sent:
                    # Pages with nothing new are not sent: a follower sees new bytes, and the end.
                    yield _line(PageEvent(result=view))
                    sent = True
                if done:
                    return
                if not raw.data:
                    await _sleep(_FOLLOW_POLL_S)
                at = raw.next_offset

        return StreamingResponse(lines(), media_type=_NDJSON)

    async def stop_task(self, request: Request) -> Response:
        held = await self.held(request)
        owner = self.owner(request)
        task_id = request.path_params["task"]

        async def run() -> Any:
            async with self.service.using(held):
                return await held.session.stop_task(task_id, owner=owner)

        info = await self.service.run(run)
        return _json(TaskView(**info.model_dump(exclude={"owner", "result"}), run=info.result))

    # -- approvals ---------------------------------------------------------------------------------------------

    async def list_approvals(self, request: Request) -> Response:
        return _json(self.service.approvals(self.owner(request)))

    async def answer_approval(self, request: Request) -> Response:
        body = await self.parse(request, ApprovalAnswer)
        self.service.answer(request.path_params["approval"], body.approve, self.owner(request))
        return Response(status_code=204)


_DOWNLOAD_BOUND_HEADER: Final = "x-executor-max-bytes"
"""Names ``service.download_max_bytes`` on a download's response."""
_DOWNLOAD_HEAD_BYTES: Final = 64 * 1024
"""A download whose tar fails or is refused within this many bytes still answers with a status and JSON."""


class _DownloadCut(Exception):
    """A download failed after its response started."""


class _CuttableResponse(StreamingResponse):
    """A streamed body its producer may cut short (:class:`_DownloadCut`, logged where it is raised): the response
    then ends without its final chunk, so the server closes the connection and the client learns the body is
    incomplete, with no traceback in the service's log."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except* _DownloadCut:
            pass


class _HttpConflict(Exception):
    def __init__(self, result: ToolResult) -> None:
        super().__init__(result.text)
        self.result = result


def _why(result: ToolResult | None, error: object) -> str:
    if error is not None:
        return f"{type(error).__name__}: {error}"
    if result is None:
        return "the service is shutting down"
    return f"tar ended {result.outcome} (exit {result.exit_code}); see artifact {result.artifact_id}"


async def _sleep(seconds: float) -> None:
    import anyio  # starlette's own loop abstraction; the service runs it on trio

    await anyio.sleep(seconds)


_PLAIN_BEFORE_START: Final[dict[str, type[ExecutorError]]] = {
    cls.__name__: cls for cls in (CommandRejected, PathRejected, ContentRejected, SpawnFailed)
}
"""Errors of an exec before anything ran that are a plain response (status by :func:`_status_of`), not a stream:
the caller's input refused, or a session that cannot start a process now."""


def _exec_result(result: ToolResult, raw: RawStreams, *, streams: bool = True) -> ToolResult:
    """A command's result with the raw streams the service kept (up to ``service.result_stream_max_bytes`` each,
    not the display budget the session cuts them at); a call that ran no command keeps its empty streams."""
    if result.stdout_whole is None and result.stderr_whole is None:
        return result
    stdout, stdout_whole = raw.get("stdout")
    stderr, stderr_whole = raw.get("stderr")
    if not streams:
        stdout = stderr = b""
    return result.model_copy(
        update={"stdout": stdout, "stderr": stderr, "stdout_whole": stdout_whole, "stderr_whole": stderr_whole}
    )


def _action_of(session: Session, artifact_id: str | None) -> str | None:
    """The action whose capture ``artifact_id`` is (its record's meta), or None."""
    if artifact_id is None:
        return None
    try:
        action = session.artifacts.record(artifact_id).meta.get("action_id")
    except ExecutorError:
        return None
    return action if isinstance(action, str) else None


def _cancelled(raw: RawStreams, artifact_id: str | None, action_id: str | None, why: str) -> ToolResult:
    stdout, stdout_whole = raw.get("stdout")
    stderr, stderr_whole = raw.get("stderr")
    kept = f"; partial output is kept in artifact {artifact_id}" if artifact_id else ""
    return ToolResult(
        tool="bash",
        outcome="cancelled",
        text=f"[cancelled: {why}; the whole process group was killed{kept}]",
        artifact_id=artifact_id,
        action_id=action_id,
        stdout=stdout,
        stderr=stderr,
        stdout_whole=stdout_whole,
        stderr_whole=stderr_whole,
    )


_RANGE_ERRORS: Final = frozenset({"greater_than", "greater_than_equal", "less_than", "less_than_equal"})
"""pydantic's error types for a number out of its bounds."""
_READERS: Final[dict[str, Surface]] = {"cli": "cli", "mcp": "mcp", "client": "client"}
_HINTS_HEADER: Final = "x-executor-hints"
"""A request header naming who reads the results (``cli`` for the thin CLI, ``client`` for ``executor.client``,
``mcp``): their recovery hints are written in that reader's words (default: the Python API's)."""


class _NoAnswer(Response):
    """Sends nothing: for a client that is gone."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        return None


def _guarded(
    handler: Callable[[Request], Awaitable[Response]], *, drain_limit: Callable[[], int]
) -> Callable[[Request], Awaitable[Response]]:
    """Answer ``handler``'s errors as JSON. A request refused before its body was read has the body read and dropped
    first (up to ``drain_limit()`` bytes; a refusal for size is not drained): a client that sends its whole body
    before it reads the answer (most do) would otherwise block on a service that no longer reads."""

    async def guarded(request: Request) -> Response:
        try:
            reader = _READERS.get(request.headers.get(_HINTS_HEADER, ""))
            if reader is not None:
                with results_read_by(reader):
                    return await handler(request)
            return await handler(request)
        except _HttpError as exc:
            if exc.status != 413:
                await _drain(request, drain_limit())
            return _error(exc.status, exc.type, str(exc))
        except _HttpConflict as exc:
            return _json(exc.result, status=409)
        except ExecutorError as exc:
            await _drain(request, drain_limit())
            ident = request.path_params.get("session")
            if isinstance(exc, SessionNotFound) and not isinstance(exc, SessionNotRunning) and ident is not None:
                # One text for a session that does not exist and one that is another owner's, whichever layer
                # found it missing: a 404 must not tell a caller which ids and names exist.
                return _error(404, "SessionNotFound", session_not_found_message(ident))
            return _error(_status_of(exc), public_name(exc), str(exc))
        except ClientDisconnect:
            # The client went away mid-request: nobody to answer, and an answer would race the server's own.
            return _NoAnswer()
        except Exception as exc:
            logger.exception("request failed: %s %s", request.method, request.url.path)
            return _error(500, "ExecutorError", f"the service failed ({type(exc).__name__}); see its log")

    return guarded


async def _drain(request: Request, limit: int) -> None:
    """Read and drop what is left of a request's body, up to ``limit`` bytes (nothing when it was read already)."""
    seen = 0
    with suppress(RuntimeError, ClientDisconnect):  # RuntimeError: the body was consumed already
        async for chunk in request.stream():
            seen += len(chunk)
            if seen > limit:
                return


class _Auth:
    """Unix socket: the home's owner (None) unless a valid token is shown; TCP: a valid bearer token, or 401."""

    def __init__(self, app: ASGIApp, tokens: Sequence[str], mcp: ASGIApp | None) -> None:
        self._app = app
        self._mcp = mcp
        self._tokens = {hashlib.sha256(t.encode()).digest(): t for t in tokens}

    def _token_owner(self, scope: Scope) -> tuple[bool, str | None]:
        header = ""
        for key, value in scope.get("headers", ()):
            if key == b"authorization":
                header = value.decode("latin-1")
        if not header:
            return False, None
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer":
            return True, None
        presented = hashlib.sha256(token.strip().encode()).digest()
        match = None
        for digest, known in self._tokens.items():
            # Every digest is compared: the time does not say which token (if any) matched.
            if secrets.compare_digest(digest, presented):
                match = known
        return True, owner_for_token(match) if match is not None else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            if self._mcp is not None:
                await self._mcp(scope, receive, send)
            else:
                await self._app(scope, receive, send)
            return
        if await refuse_long_head(scope, send):
            return
        path: str = scope.get("path", "")
        if self._mcp is not None and (path == "/mcp" or path.startswith("/mcp/")):
            await self._mcp(scope, receive, send)
            return
        shown, owner = self._token_owner(scope)
        local = scope.get("server") is None  # hypercorn gives no server address for a unix socket
        if (shown and owner is None) or (not local and owner is None):
            response = _error(
                401,
                "Unauthorized",
                "a valid bearer token is required over TCP (Authorization: Bearer <one of service.tokens>)",
                headers={"www-authenticate": "Bearer"},
            )
            await response(scope, receive, send)
            return
        scope[_OWNER_KEY] = owner
        await self._app(scope, receive, send)


def build_app(
    service: Service,
    *,
    mcp: ASGIApp | None = None,
    settings_sha256: str | None = None,
    environment_sha256: str | None = None,
) -> ASGIApp:
    """The service's ASGI app: ``/v1/...`` and, when given, the MCP endpoint at ``/mcp`` (``settings_sha256`` and
    ``environment_sha256``: the digests of the settings file and of the ``EXECUTOR_*`` settings it runs with, told by
    ``/v1/health``)."""
    api = _Api(service, settings_sha256, environment_sha256)

    def _guard(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        return _guarded(handler, drain_limit=lambda: max(api.json_limit(), api.svc.max_request_bytes))

    p = "/v1/sessions/{session}"
    routes = [
        Route("/v1/health", _guard(api.health), methods=["GET"]),
        Route("/v1/metrics", _guard(api.metrics), methods=["GET"]),
        Route("/v1/openapi.json", _guard(api.openapi), methods=["GET"]),
        Route("/v1/sessions", _guard(api.list_sessions), methods=["GET"]),
        Route("/v1/sessions", _guard(api.create_session), methods=["POST"]),
        Route(p, _guard(api.inspect_session), methods=["GET"]),
        Route(p, _guard(api.stop_session), methods=["DELETE"]),
        Route(p + "/exec", _guard(api.exec), methods=["POST"]),
        Route(p + "/write", _guard(api.write), methods=["POST"]),
        Route(p + "/files", _guard(api.upload), methods=["PUT"]),
        Route(p + "/files", _guard(api.download), methods=["GET"]),
        Route(p + "/artifacts/{artifact}", _guard(api.read_output), methods=["GET"]),
        Route(p + "/artifacts/{artifact}/search", _guard(api.search_output), methods=["GET"]),
        Route(p + "/tasks", _guard(api.list_tasks), methods=["GET"]),
        Route(p + "/tasks", _guard(api.start_task), methods=["POST"]),
        Route(p + "/tasks/{task}", _guard(api.read_task), methods=["GET"]),
        Route(p + "/tasks/{task}", _guard(api.stop_task), methods=["DELETE"]),
        Route("/v1/approvals", _guard(api.list_approvals), methods=["GET"]),
        Route("/v1/approvals/{approval}", _guard(api.answer_approval), methods=["POST"]),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        return _error(404, "NotFound", f"no route {request.method} {request.url.path}; see /v1/openapi.json")

    async def not_allowed(request: Request, exc: Exception) -> Response:
        # Every method of every route on the path (starlette's own 405 names the first route's only), as RFC 9110
        # requires of a 405.
        allowed = sorted(
            {
                method
                for route in routes
                if route.matches(request.scope)[0] is not Match.NONE
                for method in route.methods or ()
            }
        )
        return _error(
            405,
            "MethodNotAllowed",
            f"{request.method} is not allowed on {request.url.path}; it takes {', '.join(allowed)}",
            headers={"allow": ", ".join(allowed)},
        )

    app = Starlette(routes=routes, exception_handlers={404: not_found, 405: not_allowed})
    return _Auth(app, service.svc.tokens, mcp)
