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
import hashlib
import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Annotated, Any, Literal, Protocol

import hypercorn.config
import hypercorn.trio
import trio
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import (
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
    TextContent,
    ToolAnnotations,
)
from mcp_types.version import is_version_at_least
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request

from executor.config import Settings
from executor.errors import ArtifactNotFound, ConfigError, ExecutorError, SessionNotFound, TaskNotFound
from executor.gate.approvals import ApprovalRequest, printable
from executor.ids import validate_session_name
from executor.models import BashAction
from executor.session import TaskInfo, ToolResult, open_executor

__all__ = [
    "APPROVAL_SCHEMA",
    "McpSurface",
    "McpTransport",
    "no_tokens_error",
    "open_surface",
    "owner_for_token",
    "serve_http",
    "serve_http_app",
    "serve_stdio",
]

logger = logging.getLogger(__name__)

McpTransport = Literal["stdio", "http"]
"""How clients reach the server."""

ApprovalHandler = Callable[[ApprovalRequest], Awaitable[bool | None]]
"""The pipeline's approval callback: only a literal True approves this exact action, once."""


# --------------------------------------------------------------------------------------------------------------
# What the surface needs from the pipeline (executor.session). Declared structurally so that this module states
# exactly which calls it makes.


class _Session(Protocol):
    async def bash(
        self,
        command: str,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        timeout_ms: int | None = None,
        focus_mode: Literal["off", "shadow", "on"] | None = None,
        intent: str | None = None,
        approval_handler: ApprovalHandler | None = None,
    ) -> ToolResult: ...

    async def write_file(
        self, path: str, content: bytes | str, *, approval_handler: ApprovalHandler | None = None
    ) -> ToolResult: ...

    async def read_output(
        self,
        artifact_id: str,
        *,
        stream: str | None = None,
        start_line: int = 1,
        line_count: int = 200,
        start_byte_in_line: int | None = None,
    ) -> ToolResult: ...

    async def search_output(
        self, artifact_id: str, *, pattern: str, stream: str | None = None, limit: int = 20, start_line: int = 1
    ) -> ToolResult: ...

    async def start_task(
        self,
        command: str,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        owner: str | None = None,
        approval_handler: ApprovalHandler | None = None,
    ) -> ToolResult: ...

    async def read_task(
        self,
        task_id: str,
        *,
        stream: Literal["stdout", "stderr"] = "stdout",
        offset: int = 0,
        max_bytes: int = 65536,
        owner: str | None = None,
    ) -> ToolResult: ...

    async def stop_task(self, task_id: str, *, owner: str | None = None) -> TaskInfo: ...

    async def list_tasks(self, *, owner: str | None = None) -> list[TaskInfo]: ...


class _Executor(Protocol):
    def open_session(
        self,
        *,
        profile: str | None = None,
        image: str | None = None,
        name: str | None = None,
        owner: str | None = None,
        keep: bool = False,
    ) -> AbstractAsyncContextManager[Any]: ...

    def attach_session(
        self,
        id_or_name: str,
        *,
        owner: str | None = None,
        create: bool = False,
        profile: str | None = None,
        image: str | None = None,
    ) -> AbstractAsyncContextManager[Any]: ...


# --------------------------------------------------------------------------------------------------------------
# Tool descriptions: they teach the agent how to work with the executor, recovery first.

_INSTRUCTIONS = """\
Run shell commands and write files inside a sandboxed container session (no network unless the operator allows it).
Every command's full stdout and stderr are kept on the host as an artifact; results show a bounded view plus the
artifact id. To see output the view left out, page it with read_output or find lines with search_output. Do not
re-run a command to see its output again: re-running costs time, may give different output and may repeat side
effects. Long-running programs (servers, watchers, builds you want to poll) go in background tasks: task_start,
then task_read by byte offset. Some actions need a person's approval; if a result says an action is blocked,
ask the user, do not retry it in a different form."""

_BASH_DOC = """\
Run one bash command (`bash -c`, no rc files) in this session's sandboxed container and wait for it.

Each call is a fresh bash process: files in the workspace persist for the session, but `cd`, exported variables
and shell functions do not carry over (pass `cwd` and `env` instead). stdin is empty unless you pass `stdin`.
The command runs under a deadline (`timeout_ms`, else the configured default); on timeout its whole process
group is killed and the output so far is kept.

The result text is a bounded, sanitized view: long output is cut, and the cut is marked. The complete stdout
and stderr are stored on the host in the artifact named in the result (`artifact_id`). To see more of it,
DO NOT run the command again: call read_output(artifact_id, stream="stdout"|"stderr", start_line, line_count)
to page lines, continue a very long line with start_byte_in_line, or call search_output(artifact_id, pattern)
to find the lines you need (then read_output around them). The structured result carries `outcome`
(completed, failed, timeout, cancelled, blocked, denied, error), `exit_code` (128+N when signal N ended it)
and `artifact_id`.

Some commands need approval: the user is asked to approve the exact command. If the result is `blocked`,
nobody could be asked: tell the user what you want to run and why, and let them decide; if it is `denied`,
do not retry the same action in another form. Commands that never finish on their own (servers, `tail -f`,
watchers) belong in task_start, not here."""

_WRITE_DOC = """\
Write a whole file in this session's workspace (created, or replaced entirely) without going through the shell.

`path` is relative to the workspace (or absolute inside it). The write is checked against the file's current
state: it refuses symlinks on the path and non-regular targets, keeps the existing file's permissions, and
writes atomically. Writes outside the workspace or to sensitive paths may need the user's approval (they are
shown the diff) or be denied. Send text as `content`; for binary data set `encoding` to "base64". To append or
edit a small part, read the file first (bash `cat`), then write the whole new content."""

_READ_OUTPUT_DOC = """\
Read lines from a stored output artifact: the complete stdout/stderr of an earlier bash call or background task
in this session, including everything the bounded view left out. Use this instead of re-running a command.

Give the `artifact_id` from the earlier result, the `stream` ("stdout" or "stderr"; default: the artifact's main
stream), `start_line` (1-based) and `line_count`. The result says which lines it covers and how many the stream
has, so you can continue with the next start_line. A line too long to show whole is cut and the cut says the
byte offset where it stopped: pass that as `start_byte_in_line` (with the same start_line) to continue inside
that line. Ids from other sessions or other clients are "not found"."""

_SEARCH_OUTPUT_DOC = """\
Search a stored output artifact (the complete stdout/stderr of an earlier bash call or background task) for a
regular expression, and get the matching lines with their line numbers. Use this to find errors, test names or
values in long output instead of re-running the command or paging through all of it; then call read_output with
a start_line just before a match to see its context. `limit` caps the matches returned; continue after the last
match with `start_line`. Patterns that are too long or too slow are refused with a message saying so."""

_TASK_START_DOC = """\
Start a long-running command (a server, a watcher, a long build you want to poll) in the background of this
session and return at once with its `task_id` and `artifact_id`. Its stdout and stderr grow in that artifact
while it runs. Read new output with task_read(task_id, stream, offset) by byte offset: each read returns the next
offset to continue from. Stop it with task_stop; see all of this session's tasks with task_list. Background tasks
are checked and approved like bash commands."""

_TASK_READ_DOC = """\
Read a background task's output from a byte offset (`offset`, 0 at the start) of `stream` ("stdout" or
"stderr"), up to `max_bytes`. The result says the next offset to pass to continue, and whether the task is still
running (with its exit status once it has ended). Once it has ended, its complete output also stays readable with
read_output / search_output on the task's artifact_id."""

_TASK_STOP_DOC = """\
Stop a background task: its whole process group is terminated (then killed after a grace period). Its output
stays readable with task_read, read_output and search_output."""

_TASK_LIST_DOC = """\
List this session's background tasks: id, command, whether each is still running, its artifact id and, once
ended, its exit status."""


# --------------------------------------------------------------------------------------------------------------
# Approvals.


class _ApprovalForm(BaseModel):
    """The one question an approval asks."""

    model_config = ConfigDict(extra="forbid")

    approve: bool = Field(description="true runs exactly this action once; false refuses it.")


APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {
            "type": "boolean",
            "title": "Approve",
            "description": "true runs exactly this action once; false refuses it.",
        }
    },
    "required": ["approve"],
}
"""The elicitation form an approval shows: a single required boolean. Only an accepted form with
``approve: true`` approves; decline, cancel, a missing or malformed answer never do."""

_INPUT_REQUIRED_VERSION = "2026-07-28"
"""First protocol revision without server-to-client requests: from it on, approvals ride ``input_required``."""

_APPROVAL_KEY = "approval"
"""Key of the approval question inside an ``input_required`` round."""

_MAX_SUMMARY_CHARS = 16_000
"""Longest command or diff shown in one approval message (clients render it; a diff is already bounded)."""


def _approval_message(request: ApprovalRequest) -> str:
    """What the person is shown: the exact command or the path and diff, why it is asked, what each answer does."""
    summary = request.summary  # already made printable by the gate (no hidden control characters)
    if len(summary) > _MAX_SUMMARY_CHARS:
        summary = summary[:_MAX_SUMMARY_CHARS] + "\n[... cut: the full diff is longer than this message allows]"
    kind = "command" if isinstance(request.action, BashAction) else "file write"
    lines = [f"The agent asks to run this {kind} in its sandbox:", "", summary]
    if request.reasons:
        lines += ["", "Why it needs approval: " + "; ".join(printable(r, keep_newlines=False) for r in request.reasons)]
    lines += ["", "Approve to run exactly this, once. Decline or cancel runs nothing."]
    return "\n".join(lines)


def _decision(answer: ElicitResult | None) -> bool | None:
    """Map an elicitation answer onto the pipeline's: True approves, False denies, None leaves it unanswered."""
    if answer is None or answer.action == "cancel":
        return None
    if answer.action == "decline":
        return False
    try:
        form = _ApprovalForm.model_validate(answer.content or {})
    except ValidationError:
        # An accepted form without a valid answer is not an approval.
        return False
    return form.approve


def _elicitation_supported(ctx: Context[Any, Any]) -> bool:
    """Whether the client declared form elicitation (a bare ``elicitation: {}`` counts as form)."""
    capabilities = ctx.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    return elicitation is not None and (elicitation.form is not None or elicitation.url is None)


class _RoundState(BaseModel):
    """What an ``input_required`` round remembers between the question and the retry.

    The SDK seals ``request_state`` (authenticated encryption, bound to the request), so the client cannot
    forge it; the owner is checked as well, so one token's question is never answered under another's.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    v: Literal[1] = 1
    identity_hash: str
    owner: str | None


@dataclass
class _InputRound:
    """Approvals on the 2026-07-28 protocol: ask by answering ``input_required``, apply the answer on the retry.

    Round one: the pipeline asks; the handler records the request and cancels the call's scope, so the gate
    records a cancelled wait (not a denial) and nothing runs; the tool answers ``input_required`` with the
    question. Retry: the pipeline prepares the action again; if its identity is the one the person answered about,
    the handler returns that answer, once. A changed action is asked about again.
    """

    owner: str | None
    answer: ElicitResult | None = None
    answered_identity: str | None = None
    pending: ApprovalRequest | None = None
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)

    @classmethod
    def from_context(cls, ctx: Context[Any, Any], owner: str | None) -> _InputRound:
        round_ = cls(owner=owner)
        responses = ctx.input_responses or {}
        response = responses.get(_APPROVAL_KEY)
        if ctx.request_state and isinstance(response, ElicitResult):
            try:
                state = _RoundState.model_validate_json(ctx.request_state)
            except ValidationError:
                return round_
            if state.owner == owner:
                round_.answer = response
                round_.answered_identity = state.identity_hash
        return round_

    async def handler(self, request: ApprovalRequest) -> bool | None:
        if self.answer is not None and hmac.compare_digest(request.identity, self.answered_identity or ""):
            answer, self.answer = self.answer, None
            return _decision(answer)
        self.pending = request
        # The question goes back to the client in this call's result; nobody answers it in this round.
        self.scope.cancel()
        await trio.sleep_forever()

    def question(self) -> InputRequiredResult:
        assert self.pending is not None
        state = _RoundState(identity_hash=self.pending.identity, owner=self.owner)
        params = ElicitRequestFormParams(message=_approval_message(self.pending), requested_schema=APPROVAL_SCHEMA)
        return InputRequiredResult(
            input_requests={_APPROVAL_KEY: ElicitRequest(params=params)},
            request_state=state.model_dump_json(),
        )


async def _gated(
    round_: _InputRound | None, call: Callable[[], Awaitable[ToolResult]]
) -> CallToolResult | InputRequiredResult:
    """Run a gated tool call; on the 2026-07-28 protocol a pending approval turns into ``input_required``."""
    if round_ is None:
        return _tool_result(await call())
    with round_.scope:
        return _tool_result(await call())
    return round_.question()  # only reached when the handler cancelled the round to ask


# --------------------------------------------------------------------------------------------------------------
# Tokens and owners.


def _session_name_for(name: str, owner: str | None) -> str:
    """The session name an owner uses for ``--session NAME``: names are global, so each token gets its own."""
    return name if owner is None else f"{name}.{owner}"


def _check_session_name(name: str, transport: McpTransport) -> None:
    sample = _session_name_for(name, owner_for_token("x" * 16) if transport == "http" else None)
    try:
        validate_session_name(sample)
    except ValueError as exc:
        room = " (over HTTP each token's session is named NAME.mcp-<hash>, 21 more characters)"
        raise ConfigError(f"--session: {exc}{room if transport == 'http' else ''}") from None


def no_tokens_error() -> ConfigError:
    """The refusal to serve HTTP without bearer tokens."""
    return ConfigError(
        "mcp.tokens: the HTTP transport refuses to start without a bearer token; set at least one (16+ "
        'characters) with [mcp] tokens = ["..."] in the config file or EXECUTOR_MCP__TOKENS=\'["..."]\''
    )


def owner_for_token(token: str) -> str:
    """The owner id a bearer token stands for: a prefix of its SHA-256, never the token itself."""
    return "mcp-" + hashlib.sha256(token.encode()).hexdigest()[:16]


class _TokenVerifier:
    """Accepts exactly the configured bearer tokens; the comparison does not stop at the first match."""

    def __init__(self, tokens: Sequence[str]) -> None:
        self._digests = [hashlib.sha256(token.encode()).digest() for token in tokens]

    async def verify_token(self, token: str) -> AccessToken | None:
        presented = hashlib.sha256(token.encode()).digest()
        matched = False
        for digest in self._digests:
            # Hashing first gives equal-length inputs; compare_digest is constant-time over them.
            matched |= hmac.compare_digest(presented, digest)
        if not matched:
            return None
        return AccessToken(token=token, client_id=owner_for_token(token), scopes=[])


# --------------------------------------------------------------------------------------------------------------
# Sessions held open across tool calls.


@dataclass
class _Lease:
    session: _Session
    closing: trio.Event = field(default_factory=trio.Event)
    done: trio.Event = field(default_factory=trio.Event)


_LeaseKey = tuple[str, ...]


class _SessionPool:
    """Sessions opened for clients, each held by a task in the pool's nursery.

    A session is an ``async with`` object, so it is entered and left by one task that lives exactly as long as the
    session: the tool call that first needs it starts the task and waits until the session is open; the end of the
    client's connection (or of the server) tells the task to leave.
    """

    def __init__(self, executor: _Executor, nursery: trio.Nursery) -> None:
        self._executor = executor
        self._nursery = nursery
        self._leases: dict[_LeaseKey, _Lease] = {}
        self._locks: dict[_LeaseKey, trio.Lock] = {}
        self._closing = False

    def get(self, key: _LeaseKey) -> _Session | None:
        """The session already open under ``key``, if any."""
        lease = self._leases.get(key)
        return lease.session if lease is not None else None

    async def acquire(self, key: _LeaseKey, opener: Callable[[], AbstractAsyncContextManager[Any]]) -> _Session:
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

    async def release(self, key: _LeaseKey) -> None:
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
        key: _LeaseKey,
        opener: Callable[[], AbstractAsyncContextManager[Any]],
        *,
        task_status: trio.TaskStatus[_Lease],
    ) -> None:
        lease: _Lease | None = None
        try:
            async with opener() as session:
                lease = _Lease(session)
                self._leases[key] = lease
                task_status.started(lease)
                await lease.closing.wait()
        except Exception:
            if lease is None:
                raise  # not started yet: the tool call that asked for the session gets the error
            logger.exception("closing an MCP client's session failed")
        finally:
            if lease is not None:
                if self._leases.get(key) is lease:
                    del self._leases[key]
                lease.done.set()


# --------------------------------------------------------------------------------------------------------------
# Results.

_ERROR_OUTCOMES = frozenset({"blocked", "denied", "error"})
"""Outcomes where nothing ran (or the executor failed): reported with ``is_error``."""


def _tool_result(result: ToolResult) -> CallToolResult:
    structured = result.model_dump(mode="json", exclude={"text"}, exclude_none=True)
    return CallToolResult(
        content=[TextContent(type="text", text=result.text)],
        structured_content=structured,
        is_error=result.outcome in _ERROR_OUTCOMES,
    )


def _error_result(message: str, *, kind: str) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=message)],
        structured_content={"outcome": "error", "error": kind, "message": message},
        is_error=True,
    )


def _task_text(info: TaskInfo, verb: str) -> str:
    state = "running" if info.running else "ended"
    lines = [f"task {info.task_id} {verb} ({state}): {info.command}"]
    if info.result is not None:
        lines.append(f"exit: {info.result.model_dump(mode='json', exclude_none=True)}")
    lines.append(
        f"output: task_read(task_id={info.task_id!r}, stream='stdout', offset=0); "
        f"whole streams: read_output(artifact_id={info.artifact_id!r})"
    )
    return "\n".join(lines)


def _task_facts(info: TaskInfo) -> dict[str, Any]:
    # The owner is the caller's own token hash: not a fact the agent needs.
    return info.model_dump(mode="json", exclude_none=True, exclude={"owner"})


def _task_result(info: TaskInfo, verb: str) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=_task_text(info, verb))],
        structured_content={"outcome": "completed", "task": _task_facts(info)},
    )


_TASK_HINT = "list yours with task_list"
_ARTIFACT_HINT = "use an artifact_id returned by a bash, task or write result of this session"


def _not_found(kind: str, ident: str, hint: str) -> CallToolResult:
    return _error_result(
        f"{kind} {ident!r} not found in this session (ids from other sessions or other clients are never "
        f"visible); {hint}",
        kind="not_found",
    )


def _hint(exc: ExecutorError) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, SessionNotFound):
        return f"{text}. The session is gone; start over in a new connection (or name a session that exists)."
    return text


# --------------------------------------------------------------------------------------------------------------
# Tool arguments.

_Command = Annotated[str, Field(min_length=1, description="The bash command line, run as `bash -c COMMAND`.")]
_Cwd = Annotated[
    str | None, Field(description="Working directory (relative to the workspace, or absolute). Default: workspace.")
]
_Env = Annotated[
    dict[str, str] | None,
    Field(description="Extra environment variables for this command only (the base environment is scrubbed)."),
]
_ArtifactId = Annotated[
    str, Field(min_length=1, description="The artifact_id from an earlier bash, task or write result.")
]
_Stream = Annotated[
    str | None, Field(description='"stdout" or "stderr". Default: the artifact\'s main stream (stdout).')
]
_TaskId = Annotated[str, Field(min_length=1, description="The task_id returned by task_start (or task_list).")]


# --------------------------------------------------------------------------------------------------------------
# The surface.


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
        executor: _Executor,
        pool: _SessionPool,
        *,
        transport: McpTransport,
        session_name: str | None = None,
        tokens: Sequence[str] = (),
        host: str = "127.0.0.1",
    ) -> None:
        if transport == "http" and not tokens:
            raise no_tokens_error()
        if session_name is not None:
            _check_session_name(session_name, transport)
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
                "token_verifier": _TokenVerifier(tokens),
                "auth": AuthSettings(issuer_url="http://127.0.0.1/", resource_server_url=None),
            }
        self.server: MCPServer[Any] = MCPServer(
            "executor",
            instructions=_INSTRUCTIONS,
            log_level="WARNING",
            **auth_kwargs,
        )
        self._register()

    def http_app(self) -> Any:
        """The streamable-HTTP ASGI app (bearer auth in front of every MCP route)."""
        return self.server.streamable_http_app(host=self._host)

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

    def _default_key(self, ctx: Context[Any, Any], owner: str | None) -> _LeaseKey:
        if self._transport == "stdio":
            return ("stdio",)
        # The SDK keeps the per-connection state (and its teardown stack) on the request's ServerSession; there
        # is no public accessor in mcp 2.3.0 (pinned). A handshake-era HTTP client has an Mcp-Session-Id there.
        connection = getattr(ctx.request_context.session, "_connection", None)
        session_id = getattr(connection, "session_id", None)
        assert owner is not None
        if connection is None or session_id is None:
            return ("owner", owner)
        key: _LeaseKey = ("connection", str(session_id), owner)
        registered: set[_LeaseKey] = connection.state.setdefault("executor.leases", set())
        if key not in registered:
            registered.add(key)
            connection.exit_stack.push_async_callback(self._pool.release, key)
        return key

    def _key_and_opener(
        self, ctx: Context[Any, Any], owner: str | None
    ) -> tuple[_LeaseKey, Callable[[], AbstractAsyncContextManager[Any]]]:
        if self._session_name is not None:
            name = _session_name_for(self._session_name, owner)
            key: _LeaseKey = ("named", name)
            # Attach (or create and keep) the named session; leaving it disconnects and leaves it running.
            return key, partial(self._executor.attach_session, name, owner=owner, create=True)
        return self._default_key(ctx, owner), partial(self._executor.open_session, owner=owner)

    async def _session(self, ctx: Context[Any, Any], owner: str | None) -> _Session:
        key, opener = self._key_and_opener(ctx, owner)
        return await self._pool.acquire(key, opener)

    async def _existing_session(self, ctx: Context[Any, Any], owner: str | None) -> _Session | None:
        """The caller's session if it has one: an unopened default session holds nothing, so none is opened."""
        key, opener = self._key_and_opener(ctx, owner)
        if self._session_name is not None:
            return await self._pool.acquire(key, opener)
        return self._pool.get(key)

    # -- approvals ------------------------------------------------------------------------------------------

    def _approval(self, ctx: Context[Any, Any], owner: str | None) -> tuple[ApprovalHandler | None, _InputRound | None]:
        """The approval handler for this call: None (blocked) unless the client can be asked."""
        if not _elicitation_supported(ctx):
            return None, None
        if ctx.protocol_version is not None and is_version_at_least(ctx.protocol_version, _INPUT_REQUIRED_VERSION):
            round_ = _InputRound.from_context(ctx, owner)
            return round_.handler, round_
        session = ctx.request_context.session
        if not session.can_send_request:
            return None, None
        related = ctx.request_id

        async def ask(request: ApprovalRequest) -> bool | None:
            try:
                answer = await session.elicit_form(
                    message=_approval_message(request), requested_schema=APPROVAL_SCHEMA, related_request_id=related
                )
            except Exception:
                # A client that fails to answer has not approved anything.
                logger.warning("approval elicitation failed; treating it as unanswered", exc_info=True)
                return None
            return _decision(answer)

        return ask, None

    # -- tools ----------------------------------------------------------------------------------------------

    def _register(self) -> None:
        server = self.server
        mutating = ToolAnnotations(destructive_hint=True, idempotent_hint=False, open_world_hint=False)
        reading = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
        server.add_tool(self.bash, name="bash", description=_BASH_DOC, annotations=mutating)
        server.add_tool(self.write_file, name="write_file", description=_WRITE_DOC, annotations=mutating)
        server.add_tool(self.read_output, name="read_output", description=_READ_OUTPUT_DOC, annotations=reading)
        server.add_tool(self.search_output, name="search_output", description=_SEARCH_OUTPUT_DOC, annotations=reading)
        server.add_tool(self.task_start, name="task_start", description=_TASK_START_DOC, annotations=mutating)
        server.add_tool(
            self.task_read,
            name="task_read",
            description=_TASK_READ_DOC,
            annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
        )
        server.add_tool(self.task_stop, name="task_stop", description=_TASK_STOP_DOC, annotations=mutating)
        server.add_tool(
            self.task_list,
            name="task_list",
            description=_TASK_LIST_DOC,
            annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
        )

    async def bash(
        self,
        command: _Command,
        ctx: Context[Any, Any],
        cwd: _Cwd = None,
        env: _Env = None,
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
        try:
            owner = self._owner(ctx)
            session = await self._session(ctx, owner)
            handler, round_ = self._approval(ctx, owner)
            return await _gated(
                round_,
                partial(
                    session.bash,
                    command,
                    cwd=cwd,
                    env=env,
                    stdin=None if stdin is None else stdin.encode("utf-8"),
                    timeout_ms=timeout_ms,
                    focus_mode=focus_mode,
                    intent=intent,
                    approval_handler=handler,
                ),
            )
        except ExecutorError as exc:
            return _error_result(_hint(exc), kind=type(exc).__name__)

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
                return _error_result(
                    "content is not valid base64; send text with encoding='utf-8' or fix the encoding",
                    kind="bad_input",
                )
        try:
            owner = self._owner(ctx)
            session = await self._session(ctx, owner)
            handler, round_ = self._approval(ctx, owner)
            return await _gated(round_, partial(session.write_file, path, data, approval_handler=handler))
        except ExecutorError as exc:
            return _error_result(_hint(exc), kind=type(exc).__name__)

    async def read_output(
        self,
        artifact_id: _ArtifactId,
        ctx: Context[Any, Any],
        stream: _Stream = None,
        start_line: Annotated[int, Field(ge=1, description="First line to show, 1-based.")] = 1,
        line_count: Annotated[int, Field(ge=1, description="How many lines to show.")] = 200,
        start_byte_in_line: Annotated[
            int | None,
            Field(ge=0, description="Continue inside start_line from this byte (given where a long line was cut)."),
        ] = None,
    ) -> CallToolResult:
        try:
            owner = self._owner(ctx)
            session = await self._existing_session(ctx, owner)
            if session is None:
                return _not_found("artifact", artifact_id, _ARTIFACT_HINT)
            result = await session.read_output(
                artifact_id,
                stream=stream,
                start_line=start_line,
                line_count=line_count,
                start_byte_in_line=start_byte_in_line,
            )
        except ArtifactNotFound:
            return _not_found("artifact", artifact_id, _ARTIFACT_HINT)
        except ExecutorError as exc:
            return _error_result(_hint(exc), kind=type(exc).__name__)
        return _tool_result(result)

    async def search_output(
        self,
        artifact_id: _ArtifactId,
        pattern: Annotated[str, Field(min_length=1, description="A regular expression (Python syntax).")],
        ctx: Context[Any, Any],
        stream: _Stream = None,
        limit: Annotated[int, Field(ge=1, description="Most matching lines to return.")] = 20,
        start_line: Annotated[int, Field(ge=1, description="Search from this line, 1-based.")] = 1,
    ) -> CallToolResult:
        try:
            owner = self._owner(ctx)
            session = await self._existing_session(ctx, owner)
            if session is None:
                return _not_found("artifact", artifact_id, _ARTIFACT_HINT)
            result = await session.search_output(
                artifact_id, pattern=pattern, stream=stream, limit=limit, start_line=start_line
            )
        except ArtifactNotFound:
            return _not_found("artifact", artifact_id, _ARTIFACT_HINT)
        except ExecutorError as exc:
            return _error_result(_hint(exc), kind=type(exc).__name__)
        return _tool_result(result)

    async def task_start(
        self, command: _Command, ctx: Context[Any, Any], cwd: _Cwd = None, env: _Env = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            owner = self._owner(ctx)
            session = await self._session(ctx, owner)
            handler, round_ = self._approval(ctx, owner)
            return await _gated(
                round_,
                partial(session.start_task, command, cwd=cwd, env=env, owner=owner, approval_handler=handler),
            )
        except ExecutorError as exc:
            return _error_result(_hint(exc), kind=type(exc).__name__)

    async def task_read(
        self,
        task_id: _TaskId,
        ctx: Context[Any, Any],
        stream: Annotated[Literal["stdout", "stderr"], Field(description="Which stream to read.")] = "stdout",
        offset: Annotated[int, Field(ge=0, description="Byte offset to read from (the last read's next_offset).")] = 0,
        max_bytes: Annotated[int, Field(ge=1, description="Most bytes to return.")] = 65536,
    ) -> CallToolResult:
        try:
            owner = self._owner(ctx)
            session = await self._existing_session(ctx, owner)
            if session is None:
                return _not_found("task", task_id, _TASK_HINT)
            result = await session.read_task(task_id, stream=stream, offset=offset, max_bytes=max_bytes, owner=owner)
        except TaskNotFound:
            return _not_found("task", task_id, _TASK_HINT)
        except ExecutorError as exc:
            return _error_result(_hint(exc), kind=type(exc).__name__)
        return _tool_result(result)

    async def task_stop(self, task_id: _TaskId, ctx: Context[Any, Any]) -> CallToolResult:
        try:
            owner = self._owner(ctx)
            session = await self._existing_session(ctx, owner)
            if session is None:
                return _not_found("task", task_id, _TASK_HINT)
            info = await session.stop_task(task_id, owner=owner)
        except TaskNotFound:
            return _not_found("task", task_id, _TASK_HINT)
        except ExecutorError as exc:
            return _error_result(_hint(exc), kind=type(exc).__name__)
        return _task_result(info, "stopped")

    async def task_list(self, ctx: Context[Any, Any]) -> CallToolResult:
        try:
            owner = self._owner(ctx)
            session = await self._existing_session(ctx, owner)
            tasks = [] if session is None else await session.list_tasks(owner=owner)
        except ExecutorError as exc:
            return _error_result(_hint(exc), kind=type(exc).__name__)
        if tasks:
            text = "\n".join(
                f"{info.task_id}  {'running' if info.running else 'ended'}  artifact={info.artifact_id}  {info.command}"
                for info in tasks
            )
        else:
            text = "no background tasks in this session (start one with task_start)"
        return CallToolResult(
            content=[TextContent(type="text", text=text)],
            structured_content={"outcome": "completed", "tasks": [_task_facts(info) for info in tasks]},
        )


# --------------------------------------------------------------------------------------------------------------
# Running it.


@asynccontextmanager
async def open_surface(
    executor: _Executor,
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
        _check_session_name(session_name, transport)
    async with trio.open_nursery() as nursery:
        pool = _SessionPool(executor, nursery)
        try:
            yield McpSurface(executor, pool, transport=transport, session_name=session_name, tokens=tokens, host=host)
        finally:
            pool.close_all()


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
        open_executor(settings, api_key=api_key) as executor,
        open_surface(executor, transport="stdio", session_name=session_name) as surface,
        guarded_stdio() as (stdin, stdout),
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
        open_executor(settings, api_key=api_key) as executor,
        open_surface(
            executor,
            transport="http",
            session_name=session_name,
            tokens=settings.mcp.tokens,
            host=settings.mcp.host,
        ) as surface,
    ):
        await serve_http_app(surface.http_app(), settings.mcp.host, settings.mcp.port, task_status=task_status)
