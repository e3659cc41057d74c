"""The MCP server: the executor's tools for agents, over stdio or streamable HTTP.

One :class:`McpSurface` binds an open executor to an :class:`~mcp.server.mcpserver.MCPServer`:

* tools ``bash``, ``write_file``, ``read_output``, ``search_output`` and the background-task tools
  ``task_start``, ``task_read``, ``task_stop``, ``task_list``; every result carries the presented
  ``ToolResult.text`` as its content and the structured facts (outcome, artifact id, exit code, ...) as its
  structured content; errors are ``is_error`` results whose text says what to do next;
* sessions: one per client connection, opened lazily on the first tool call that needs one and closed when the
  connection ends, or one named session (``--session NAME``) attached to or created for each owner;
* approvals through MCP elicitation, showing the command or the diff. On a handshake-era connection
  (protocol <= 2025-11-25) the question is sent in the middle of the call; on the 2026-07-28 protocol, which has
  no server-to-client requests, the call answers ``input_required`` and the client retries with the answer. A
  client that did not declare elicitation gets the pipeline's blocked result ("ask the user");
* over HTTP, bearer tokens from the settings, compared in constant time; each token is an *owner* (a hash of the
  token, never the token) that owns its sessions, tasks and artifacts; another token gets "not found".

What counts as "a connection": the stdio process is one; an HTTP client on the handshake protocol has one per
``Mcp-Session-Id``; an HTTP client on the 2026-07-28 protocol is stateless, so its token's default session is
used, kept until the server stops.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any, Final, Literal, TypeVar

import hypercorn.config
import hypercorn.trio
import trio
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import (
    PARSE_ERROR,
    CallToolResult,
    InputRequiredResult,
    TextContent,
    ToolAnnotations,
)
from mcp_types.version import is_version_at_least
from pydantic import Field
from starlette.requests import Request

from executor.config import BashSettings, Settings, WriteSettings
from executor.errors import (
    ArtifactNotFound,
    ExecutorError,
    SessionNotFound,
    SessionNotRunning,
    SessionStopped,
    TaskNotFound,
    public_name,
)
from executor.gate.approvals import Answered, ApprovalHandler, ApprovalRequest
from executor.mcp.approvals import (
    APPROVAL_SCHEMA,
    INPUT_REQUIRED_VERSION,
    InputRound,
    approval_message,
    decision,
    elicitation_supported,
    gated,
    mcp_answerer,
)
from executor.mcp.auth import (
    McpTransport,
    TokenVerifier,
    check_session_name,
    no_tokens_error,
    owner_for_token,
    session_name_for,
)
from executor.mcp.descriptions import (
    BASH_DOC,
    INSTRUCTIONS,
    READ_OUTPUT_DOC,
    SEARCH_OUTPUT_DOC,
    TASK_LIST_DOC,
    TASK_READ_DOC,
    TASK_START_DOC,
    TASK_STOP_DOC,
    WRITE_DOC,
    ArtifactIdArg,
    CommandArg,
    CwdArg,
    EnvArg,
    StreamArg,
    TaskIdArg,
)
from executor.mcp.pool import LeaseKey, Opener, SessionPool
from executor.mcp.results import (
    ARTIFACT_HINT,
    TASK_HINT,
    error_hint,
    error_result,
    not_found,
    task_facts,
    task_result,
    tool_result,
)
from executor.nesting import DEFAULT_MAX_DEPTH, NestingTooDeep, check_json_depth
from executor.session import ExecutorAPI, SessionAPI, ToolResult, open_executor
from executor.session.presentation import results_read_by

__all__ = [
    "APPROVAL_SCHEMA",
    "MAX_HEAD_BYTES",
    "McpSurface",
    "McpTransport",
    "head_bytes",
    "message_limit",
    "no_tokens_error",
    "open_surface",
    "owner_for_token",
    "refuse_long_head",
    "serve_http",
    "serve_http_app",
    "serve_stdio",
]

logger = logging.getLogger(__name__)


_R = TypeVar("_R")


@dataclass(frozen=True)
class _Missing:
    """What a call on an existing session answers when the id it names is not there (or not the caller's)."""

    kind: str
    ident: str
    hint: str
    error: type[ExecutorError]

    @classmethod
    def artifact(cls, artifact_id: str) -> _Missing:
        return cls("artifact", artifact_id, ARTIFACT_HINT, ArtifactNotFound)

    @classmethod
    def task(cls, task_id: str) -> _Missing:
        return cls("task", task_id, TASK_HINT, TaskNotFound)

    def result(self) -> CallToolResult:
        return not_found(self.kind, self.ident, self.hint)


class McpSurface:
    """The executor's tools bound to one :class:`MCPServer`.

    Args:
        executor: an open executor (``executor.session.open_executor``).
        pool: where client sessions are held (see :func:`open_surface`).
        transport: ``stdio`` (one client: the process) or ``http`` (bearer tokens, owners).
        session_name: use this named session (attach-or-create per owner) instead of one per connection.
        tokens: the HTTP bearer tokens (ignored for stdio).
        host: the address HTTP binds (turns on the SDK's DNS-rebinding protection for loopback).
    """

    def __init__(
        self,
        executor: ExecutorAPI,
        pool: SessionPool,
        *,
        transport: McpTransport,
        session_name: str | None = None,
        tokens: Sequence[str] = (),
        host: str = "127.0.0.1",
    ) -> None:
        if transport == "http" and not tokens:
            raise no_tokens_error()
        if session_name is not None:
            check_session_name(session_name, transport)
        self._executor = executor
        self._pool = pool
        self._transport: McpTransport = transport
        self._session_name = session_name
        self._host = host
        auth_kwargs: dict[str, Any] = {}
        if transport == "http":
            # Resource-server mode with our own verifier: no OAuth routes are served (no provider, no
            # resource_server_url); the issuer URL is required by the model but never used or advertised.
            auth_kwargs = {
                "token_verifier": TokenVerifier(tokens),
                "auth": AuthSettings(issuer_url="http://127.0.0.1/", resource_server_url=None),
            }
        self.server: MCPServer[Any] = MCPServer(
            "executor",
            instructions=INSTRUCTIONS,
            log_level="WARNING",
            **auth_kwargs,
        )
        self._register()

    def http_app(self, *, max_depth: int = DEFAULT_MAX_DEPTH, max_bytes: int | None = None) -> Any:
        """The streamable-HTTP ASGI app (bearer auth in front of every MCP route), its bodies bounded before the SDK
        reads or parses them: nesting by ``max_depth`` (``service.max_json_depth``), size by ``max_bytes`` (None:
        what the default settings allow a message, :func:`message_limit`)."""
        return _BoundedBodies(
            self.server.streamable_http_app(host=self._host),
            max_bytes=max_bytes if max_bytes is not None else _message_bytes(WriteSettings(), BashSettings()),
            max_depth=max_depth,
        )

    # -- identity and sessions ------------------------------------------------------------------------------

    def _owner(self, ctx: Context[Any, Any]) -> str | None:
        if self._transport == "stdio":
            return None
        request = ctx.request_context.request
        user = request.scope.get("user") if isinstance(request, Request) else None
        if not isinstance(user, AuthenticatedUser):
            # The auth middleware refuses unauthenticated requests before they get here; fail closed anyway.
            raise PermissionError("unauthenticated request")
        return user.access_token.client_id

    def _default_key(self, ctx: Context[Any, Any], owner: str | None) -> LeaseKey:
        if self._transport == "stdio":
            return ("stdio",)
        # The SDK keeps the per-connection state (and its teardown stack) on the request's ServerSession; there
        # is no public accessor in mcp 2.3.0 (pinned). A handshake-era HTTP client has an Mcp-Session-Id there.
        connection = getattr(ctx.request_context.session, "_connection", None)
        session_id = getattr(connection, "session_id", None)
        assert owner is not None
        if connection is None or session_id is None:
            return ("owner", owner)
        key: LeaseKey = ("connection", str(session_id), owner)
        registered: set[LeaseKey] = connection.state.setdefault("executor.leases", set())
        if key not in registered:
            registered.add(key)
            connection.exit_stack.push_async_callback(self._pool.release, key)
        return key

    def _key_and_opener(self, ctx: Context[Any, Any], owner: str | None) -> tuple[LeaseKey, Opener]:
        if self._session_name is not None:
            name = session_name_for(self._session_name, owner)
            key: LeaseKey = ("named", name)
            if self._pool.was_lost(key):
                return key, partial(self._attach_again, key, name, owner)
            # Attach (or create and keep) the named session; leaving it disconnects and leaves it running.
            return key, partial(self._executor.attach_session, name, owner=owner, create=True)
        return self._default_key(ctx, owner), partial(self._executor.open_session, owner=owner)

    @asynccontextmanager
    async def _attach_again(self, key: LeaseKey, name: str, owner: str | None) -> AsyncIterator[SessionAPI]:
        """The named session this server held went away: attach to it again, or to the session started since under
        its name; a stopped container (idle limit, crash) is recreated on its kept workspace. A removed session
        (``session stop``) is not replaced by an empty one behind the client's back: the call says so, and the next
        one starts a new session."""
        async with AsyncExitStack() as stack:
            try:
                session = await stack.enter_async_context(self._executor.attach_session(name, owner=owner))
            except SessionNotRunning:
                session = await stack.enter_async_context(self._executor.attach_session(name, owner=owner, create=True))
            except SessionNotFound as exc:
                self._pool.forget_loss(key)
                raise SessionStopped(
                    f"session {self._session_name!r} was stopped and removed while this server used it (its "
                    "workspace is gone); nothing ran. Call again to start a new, empty session under its name"
                ) from exc
            yield session

    @asynccontextmanager
    async def _using(
        self, ctx: Context[Any, Any], owner: str | None, *, existing: bool = False
    ) -> AsyncIterator[SessionAPI | None]:
        """The caller's session, kept open while this is entered. With ``existing``, an unopened default session
        holds nothing, so none is opened (None); a named one is attached to."""
        key, opener = self._key_and_opener(ctx, owner)
        if existing and self._session_name is None:
            async with self._pool.use_open(key) as found:
                yield found
        else:
            async with self._pool.use(key, opener) as session:
                yield session

    # -- approvals ------------------------------------------------------------------------------------------

    def _approval(self, ctx: Context[Any, Any], owner: str | None) -> tuple[ApprovalHandler | None, InputRound | None]:
        """The approval handler for this call: None (blocked) unless the client can be asked."""
        if not elicitation_supported(ctx):
            return None, None
        if ctx.protocol_version is not None and is_version_at_least(ctx.protocol_version, INPUT_REQUIRED_VERSION):
            round_ = InputRound.from_context(ctx, owner)
            return round_.handler, round_
        session = ctx.request_context.session
        if not session.can_send_request:
            return None, None
        related = ctx.request_id

        async def ask(request: ApprovalRequest) -> Answered | None:
            try:
                answer = await session.elicit_form(
                    message=approval_message(request), requested_schema=APPROVAL_SCHEMA, related_request_id=related
                )
            except Exception:
                # A client that fails to answer has not approved anything.
                logger.warning("approval elicitation failed; treating it as unanswered", exc_info=True)
                return None
            decided = decision(answer)
            return None if decided is None else Answered(decided, by=mcp_answerer(owner))

        return ask, None

    # -- tools ----------------------------------------------------------------------------------------------

    def _register(self) -> None:
        server = self.server
        mutating = ToolAnnotations(destructive_hint=True, idempotent_hint=False, open_world_hint=False)
        reading = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
        server.add_tool(self.bash, name="bash", description=BASH_DOC, annotations=mutating)
        server.add_tool(self.write_file, name="write_file", description=WRITE_DOC, annotations=mutating)
        server.add_tool(self.read_output, name="read_output", description=READ_OUTPUT_DOC, annotations=reading)
        server.add_tool(self.search_output, name="search_output", description=SEARCH_OUTPUT_DOC, annotations=reading)
        server.add_tool(self.task_start, name="task_start", description=TASK_START_DOC, annotations=mutating)
        server.add_tool(
            self.task_read,
            name="task_read",
            description=TASK_READ_DOC,
            annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
        )
        server.add_tool(self.task_stop, name="task_stop", description=TASK_STOP_DOC, annotations=mutating)
        server.add_tool(
            self.task_list,
            name="task_list",
            description=TASK_LIST_DOC,
            annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
        )

    async def _call(
        self,
        ctx: Context[Any, Any],
        body: Callable[[SessionAPI, str | None], Awaitable[_R]],
        *,
        missing: _Missing | None = None,
    ) -> _R | CallToolResult:
        """The one bracket of every tool handler: the caller's owner, its session, and errors as results.

        With ``missing`` the call needs an existing session (an unopened default session holds nothing, so none is
        opened) and answers "not found" when there is none or when the session raises ``missing.error``; without it
        the caller's session is opened if needed.
        """
        try:
            owner = self._owner(ctx)
            async with self._using(ctx, owner, existing=missing is not None) as session:
                if session is None:
                    assert missing is not None
                    return missing.result()
                # The executor may serve other surfaces too (executor serve): hints in this result name MCP's tools.
                with results_read_by("mcp"):
                    return await body(session, owner)
        except ExecutorError as exc:
            if missing is not None and isinstance(exc, missing.error):
                return missing.result()
            return error_result(error_hint(exc), kind=public_name(exc))

    def _gated_call(
        self,
        ctx: Context[Any, Any],
        run: Callable[[SessionAPI, str | None, ApprovalHandler | None], Awaitable[ToolResult]],
    ) -> Awaitable[CallToolResult | InputRequiredResult]:
        """A gated tool call: its approval handler (or ``input_required`` round) bound to the caller's connection."""

        async def body(session: SessionAPI, owner: str | None) -> CallToolResult | InputRequiredResult:
            handler, round_ = self._approval(ctx, owner)
            return await gated(round_, partial(run, session, owner, handler))

        return self._call(ctx, body)

    async def bash(
        self,
        command: CommandArg,
        ctx: Context[Any, Any],
        cwd: CwdArg = None,
        env: EnvArg = None,
        stdin: Annotated[str | None, Field(description="Text fed to the command's stdin (default: empty).")] = None,
        timeout_ms: Annotated[
            int | None,
            Field(ge=1, description="Deadline in milliseconds; the whole process group is killed when it passes."),
        ] = None,
        focus_mode: Annotated[
            Literal["off", "shadow", "on"] | None,
            Field(description="Focus the view on the sections relevant to `intent` (default: configured mode)."),
        ] = None,
        intent: Annotated[
            str | None,
            Field(description="What you are looking for in the output (e.g. 'why test_x fails'); guides focus."),
        ] = None,
    ) -> CallToolResult | InputRequiredResult:
        async def run(session: SessionAPI, owner: str | None, handler: ApprovalHandler | None) -> ToolResult:
            return await session.bash(
                command,
                cwd=cwd,
                env=env,
                stdin=None if stdin is None else stdin.encode("utf-8"),
                timeout_ms=timeout_ms,
                focus_mode=focus_mode,
                intent=intent,
                approval_handler=handler,
            )

        return await self._gated_call(ctx, run)

    async def write_file(
        self,
        path: Annotated[str, Field(min_length=1, description="File path, relative to the workspace.")],
        content: Annotated[str, Field(description="The complete new file content.")],
        ctx: Context[Any, Any],
        encoding: Annotated[
            Literal["utf-8", "base64"], Field(description='How `content` is encoded: "utf-8" text or "base64" bytes.')
        ] = "utf-8",
    ) -> CallToolResult | InputRequiredResult:
        data: bytes | str = content
        if encoding == "base64":
            try:
                data = base64.b64decode(content, validate=True)
            except (binascii.Error, ValueError):
                return error_result(
                    "content is not valid base64; send text with encoding='utf-8' or fix the encoding",
                    kind="bad_input",
                )

        async def run(session: SessionAPI, owner: str | None, handler: ApprovalHandler | None) -> ToolResult:
            return await session.write_file(path, data, approval_handler=handler)

        return await self._gated_call(ctx, run)

    async def read_output(
        self,
        artifact_id: ArtifactIdArg,
        ctx: Context[Any, Any],
        stream: StreamArg = None,
        start_line: Annotated[int, Field(ge=1, description="First line to show, 1-based.")] = 1,
        line_count: Annotated[
            int | None, Field(ge=1, description="How many lines to show (default: artifacts.read_page_lines).")
        ] = None,
        start_byte_in_line: Annotated[
            int | None,
            Field(ge=0, description="Continue inside start_line from this byte (given where a long line was cut)."),
        ] = None,
    ) -> CallToolResult:
        async def body(session: SessionAPI, owner: str | None) -> CallToolResult:
            result = await session.read_output(
                artifact_id,
                stream=stream,
                start_line=start_line,
                line_count=line_count,
                start_byte_in_line=start_byte_in_line,
            )
            return tool_result(result)

        return await self._call(ctx, body, missing=_Missing.artifact(artifact_id))

    async def search_output(
        self,
        artifact_id: ArtifactIdArg,
        pattern: Annotated[str, Field(min_length=1, description="A regular expression (Python syntax).")],
        ctx: Context[Any, Any],
        stream: StreamArg = None,
        limit: Annotated[int, Field(ge=1, description="Most matching lines to return.")] = 20,
        start_line: Annotated[int, Field(ge=1, description="Search from this line, 1-based.")] = 1,
    ) -> CallToolResult:
        async def body(session: SessionAPI, owner: str | None) -> CallToolResult:
            result = await session.search_output(
                artifact_id, pattern=pattern, stream=stream, limit=limit, start_line=start_line
            )
            return tool_result(result)

        return await self._call(ctx, body, missing=_Missing.artifact(artifact_id))

    async def task_start(
        self, command: CommandArg, ctx: Context[Any, Any], cwd: CwdArg = None, env: EnvArg = None
    ) -> CallToolResult | InputRequiredResult:
        async def run(session: SessionAPI, owner: str | None, handler: ApprovalHandler | None) -> ToolResult:
            return await session.start_task(command, cwd=cwd, env=env, owner=owner, approval_handler=handler)

        return await self._gated_call(ctx, run)

    async def task_read(
        self,
        task_id: TaskIdArg,
        ctx: Context[Any, Any],
        stream: Annotated[Literal["stdout", "stderr"], Field(description="Which stream to read.")] = "stdout",
        offset: Annotated[
            int, Field(ge=0, le=2**63 - 1, description="Byte offset to read from (the last read's next_offset).")
        ] = 0,
        max_bytes: Annotated[int, Field(ge=1, le=2**63 - 1, description="Most bytes to return.")] = 65536,
    ) -> CallToolResult:
        async def body(session: SessionAPI, owner: str | None) -> CallToolResult:
            result = await session.read_task(task_id, stream=stream, offset=offset, max_bytes=max_bytes, owner=owner)
            return tool_result(result)

        return await self._call(ctx, body, missing=_Missing.task(task_id))

    async def task_stop(self, task_id: TaskIdArg, ctx: Context[Any, Any]) -> CallToolResult:
        async def body(session: SessionAPI, owner: str | None) -> CallToolResult:
            return task_result(await session.stop_task(task_id, owner=owner), "stopped")

        return await self._call(ctx, body, missing=_Missing.task(task_id))

    async def task_list(self, ctx: Context[Any, Any]) -> CallToolResult:
        try:
            owner = self._owner(ctx)
            async with self._using(ctx, owner, existing=True) as session:
                tasks = [] if session is None else await session.list_tasks(owner=owner)
        except ExecutorError as exc:
            return error_result(error_hint(exc), kind=public_name(exc))
        if tasks:
            text = "\n".join(
                f"{info.task_id}  {'running' if info.running else 'ended'}  artifact={info.artifact_id}  {info.command}"
                for info in tasks
            )
        else:
            text = "no background tasks in this session (start one with task_start)"
        return CallToolResult(
            content=[TextContent(type="text", text=text)],
            structured_content={"outcome": "completed", "tasks": [task_facts(info) for info in tasks]},
        )


# --------------------------------------------------------------------------------------------------------------
# Running it.


@asynccontextmanager
async def open_surface(
    executor: ExecutorAPI,
    *,
    transport: McpTransport,
    session_name: str | None = None,
    tokens: Sequence[str] = (),
    host: str = "127.0.0.1",
) -> AsyncIterator[McpSurface]:
    """Build the surface over an open executor; leaving closes every session it opened for clients.

    Raises:
        ConfigError: HTTP without tokens.
    """
    if transport == "http" and not tokens:
        raise no_tokens_error()  # before anything starts, so the caller gets it unwrapped
    if session_name is not None:
        check_session_name(session_name, transport)
    async with trio.open_nursery() as nursery:
        pool = SessionPool(executor, nursery)
        try:
            yield McpSurface(executor, pool, transport=transport, session_name=session_name, tokens=tokens, host=host)
        finally:
            pool.close_all()


MAX_HEAD_BYTES: Final = 64 * 1024
"""Longest request line plus headers an HTTP listener takes (431 past it). h11's own bound (hypercorn's
``h11_max_incomplete_size``) only applies while the head is still arriving, so a head that arrives whole in one read
could be twice as long; this is counted on what the server parsed."""


def head_bytes(scope: Any) -> int:
    """The size of a request's line and headers as sent (``METHOD target HTTP/x.y`` and ``name: value`` lines)."""
    size = len(scope.get("method", "")) + len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
    return size + 16 + sum(len(name) + len(value) + 4 for name, value in scope.get("headers", ()))


async def refuse_long_head(scope: Any, send: Any) -> bool:
    """Answer 431 (JSON) when the request's head is longer than :data:`MAX_HEAD_BYTES`; True when it did."""
    if scope.get("type") != "http" or head_bytes(scope) <= MAX_HEAD_BYTES:
        return False
    payload = json.dumps(
        {
            "error": {
                "type": "RequestHeaderFieldsTooLarge",
                "message": f"the request line and headers are longer than {MAX_HEAD_BYTES} bytes; send less",
            }
        }
    ).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": 431, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
    return True


class _BoundedBodies:
    """ASGI middleware: a POST body longer than ``max_bytes`` or nested deeper than ``max_depth`` is answered with a
    JSON-RPC parse error (413 or 400) before the SDK holds it whole (it reads bodies without a limit) or parses it;
    any other body is handed on unchanged."""

    def __init__(self, app: Any, *, max_bytes: int, max_depth: int) -> None:
        self._app = app
        self._max_bytes = max_bytes
        self._max_depth = max_depth

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if await refuse_long_head(scope, send):
            return
        if scope.get("type") != "http" or scope.get("method") != "POST":
            await self._app(scope, receive, send)
            return
        body = bytearray()
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = bool(message.get("more_body", False))
            if len(body) > self._max_bytes:
                await _json_rpc_refusal(send, 413, f"Parse error: the body is longer than {self._max_bytes} bytes")
                return
        try:
            check_json_depth(bytes(body), max_depth=self._max_depth, setting="service.max_json_depth")
        except NestingTooDeep as exc:
            await _json_rpc_refusal(send, 400, f"Parse error: {exc}")
            return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self._app(scope, replay, send)


async def _json_rpc_refusal(send: Any, status: int, message: str) -> None:
    payload = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": PARSE_ERROR, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


def message_limit(settings: Settings) -> int:
    """Longest MCP message (a stdio line, an HTTP body): a write's content as base64 (``write.max_bytes``) beside a
    command at its most escaped (six characters a byte), plus room for the JSON-RPC envelope."""
    return _message_bytes(settings.write, settings.bash)


def _message_bytes(write: WriteSettings, bash: BashSettings) -> int:
    return 4 * -(-write.max_bytes // 3) + 6 * bash.max_command_bytes + 1024 * 1024


async def serve_stdio(settings: Settings, *, session_name: str | None = None, api_key: str | None = None) -> None:
    """Serve one client over stdin/stdout until stdin closes (EOF), then close its session.

    Args:
        settings: the one settings object.
        session_name: use this named session (attach or create) instead of one for the connection.
        api_key: the ``openai`` judge's key (the entry point reads it from the environment).
    """
    from mcp.server.stdio import stdio_server

    from executor.mcp.stdio import guarded_stdio

    async with (
        open_executor(settings, api_key=api_key, surface="mcp") as executor,
        open_surface(executor, transport="stdio", session_name=session_name) as surface,
        guarded_stdio(max_depth=settings.service.max_json_depth, max_line_chars=message_limit(settings)) as (
            stdin,
            stdout,
        ),
        stdio_server(stdin, stdout) as (read_stream, write_stream),
    ):
        # MCPServer.run_stdio_async, on streams that answer invalid messages (executor/mcp/stdio.py).
        lowlevel = surface.server._lowlevel_server
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())


def _bind(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def serve_http_app(
    app: Any, host: str, port: int, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED
) -> None:
    """Serve an ASGI app with hypercorn on trio; reports the MCP endpoint URL once it is bound."""
    config = hypercorn.config.Config()
    config.bind = [_bind(host, port)]
    config.accesslog = None
    config.errorlog = logger
    async with trio.open_nursery() as nursery:
        bound: list[str] = await nursery.start(partial(hypercorn.trio.serve, app, config, mode="asgi"))
        task_status.started(bound[0].rstrip("/") + "/mcp")


async def serve_http(
    settings: Settings,
    *,
    session_name: str | None = None,
    api_key: str | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve streamable HTTP on ``settings.mcp.host:port`` until cancelled; reports the endpoint URL when bound.

    Raises:
        ConfigError: no bearer tokens are configured (checked before anything starts).
    """
    if not settings.mcp.tokens:
        raise no_tokens_error()
    async with (
        open_executor(settings, api_key=api_key, surface="mcp") as executor,
        open_surface(
            executor,
            transport="http",
            session_name=session_name,
            tokens=settings.mcp.tokens,
            host=settings.mcp.host,
        ) as surface,
    ):
        await serve_http_app(
            surface.http_app(max_depth=settings.service.max_json_depth, max_bytes=message_limit(settings)),
            settings.mcp.host,
            settings.mcp.port,
            task_status=task_status,
        )
