"""The MCP surface's protocol plumbing, driven by the SDK's own client over a stand-in executor.

Listing and descriptions, result shapes, approvals over both protocol eras, sessions per connection, bearer
auth and owner isolation. What the tools actually do is covered end to end (real engine) in test_e2e.py.
"""

from __future__ import annotations

import gc
import hashlib
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
import trio
import trio.lowlevel
import trio.testing
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp_types import CallToolResult, ElicitRequestParams, ElicitResult, ErrorData, TextContent
from typer.testing import CliRunner

from executor.cli.app import app
from executor.errors import ConfigError
from executor.mcp.server import McpSurface, open_surface, owner_for_token, serve_http_app
from executor.testing import FakeExecutor, FakeSession
from executor.testing.mcp_http import open_mcp_http_client

pytestmark = pytest.mark.timeout(30)

TOKEN_A = "token-a-0123456789abcdef"
TOKEN_B = "token-b-0123456789abcdef"
TOOLS = {"bash", "write_file", "read_output", "search_output", "task_start", "task_read", "task_stop", "task_list"}


Elicitation = Callable[[ClientRequestContext, ElicitRequestParams], Awaitable[ElicitResult | ErrorData]]


def _text(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


@dataclass
class Asked:
    """An elicitation callback that answers one fixed way and remembers what it was shown."""

    answer: ElicitResult
    messages: list[str]

    async def __call__(self, context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        self.messages.append(params.message)
        return self.answer


def _asked(action: str, content: dict[str, Any] | None = None) -> Asked:
    return Asked(ElicitResult(action=action, content=content), [])


@pytest.fixture
async def stdio_surface() -> AsyncIterator[tuple[McpSurface, FakeExecutor]]:
    """A stdio-mode surface (one client: the process) over a fake executor, driven in process."""
    executor = FakeExecutor()
    async with open_surface(executor, transport="stdio") as surface:
        yield surface, executor


async def test_tools_are_listed_with_descriptions_that_teach_recovery(
    stdio_surface: tuple[McpSurface, FakeExecutor],
) -> None:
    """The listing has every tool; bash teaches read_output/search_output over re-running; every field is documented."""
    surface, _ = stdio_surface
    async with Client(surface.server) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    bash = tools["bash"].description or ""
    assert "DO NOT run the command again" in bash
    assert "read_output(artifact_id" in bash and "search_output(artifact_id" in bash
    assert "start_byte_in_line" in (tools["read_output"].description or "")
    assert "offset" in (tools["task_read"].description or "")
    for tool in tools.values():
        for name, prop in tool.input_schema.get("properties", {}).items():
            assert prop.get("description"), f"{tool.name}.{name} has no description"
    assert tools["bash"].input_schema["required"] == ["command"]
    assert tools["read_output"].annotations is not None and tools["read_output"].annotations.read_only_hint


async def test_bash_result_carries_the_text_and_the_structured_facts(
    stdio_surface: tuple[McpSurface, FakeExecutor],
) -> None:
    """The presented text is the content; outcome, exit code and artifact id are structured content."""
    surface, executor = stdio_surface
    async with Client(surface.server) as client:
        result = await client.call_tool("bash", {"command": "echo hi"})
    assert not result.is_error
    assert _text(result) == "$ echo hi\n(exit 0)"
    assert result.structured_content is not None
    assert result.structured_content["outcome"] == "completed"
    assert result.structured_content["exit_code"] == 0
    assert result.structured_content["artifact_id"] == f"{executor.sessions[0].id}.a1"
    assert "text" not in result.structured_content


async def test_invalid_arguments_are_an_error_result_naming_the_field(
    stdio_surface: tuple[McpSurface, FakeExecutor],
) -> None:
    """A timeout of zero is refused before anything runs, and the message names the field."""
    surface, executor = stdio_surface
    async with Client(surface.server) as client:
        result = await client.call_tool("bash", {"command": "echo hi", "timeout_ms": 0})
    assert result.is_error
    assert "timeout_ms" in _text(result)
    assert executor.sessions == []


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_accepted_approval_runs_the_command_once(
    stdio_surface: tuple[McpSurface, FakeExecutor], mode: str
) -> None:
    """An accepted approval (approve: true) runs exactly the command that was shown, on both protocol eras."""
    surface, executor = stdio_surface
    asked = _asked("accept", {"approve": True})
    async with Client(surface.server, mode=mode, elicitation_callback=asked) as client:
        result = await client.call_tool("bash", {"command": "ask:rm -rf build"})
    assert not result.is_error, _text(result)
    assert executor.sessions[0].ran == ["ask:rm -rf build"]
    assert len(asked.messages) == 1 and "$ ask:rm -rf build" in asked.messages[0]
    assert "Why it needs approval: test rule" in asked.messages[0]
    # On 2026-07-28 the first round ends the gate's wait (cancelled) and the retry carries the answer.
    assert executor.sessions[0].asks == (1 if mode == "legacy" else 2)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
@pytest.mark.parametrize(
    ("action", "content"),
    [
        ("decline", None),
        ("cancel", None),
        ("accept", {"approve": False}),
        ("accept", {}),
        ("accept", {"approve": "true"}),
        ("accept", {"approve": "yes"}),
        ("accept", {"approve": 1}),
    ],
)
async def test_anything_but_an_explicit_approval_runs_nothing(
    stdio_surface: tuple[McpSurface, FakeExecutor], mode: str, action: str, content: dict[str, Any] | None
) -> None:
    """Decline, cancel, approve: false, an empty form and an approve that is not the JSON true ("true", "yes", 1:
    pydantic's lax bool took them) all leave the command unrun."""
    surface, executor = stdio_surface
    asked = _asked(action, content)
    async with Client(surface.server, mode=mode, elicitation_callback=asked) as client:
        result = await client.call_tool("bash", {"command": "ask:touch /tmp/marker"})
    assert result.is_error
    assert executor.sessions[0].ran == []
    assert len(asked.messages) == 1


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_client_without_elicitation_gets_the_blocked_result(
    stdio_surface: tuple[McpSurface, FakeExecutor], mode: str
) -> None:
    """No elicitation capability: no handler is passed, so the pipeline's blocked result tells the agent to ask."""
    surface, executor = stdio_surface
    async with Client(surface.server, mode=mode) as client:
        result = await client.call_tool("bash", {"command": "ask:touch /tmp/marker"})
    assert result.is_error
    assert "ask the user" in _text(result).lower()
    assert result.structured_content is not None and result.structured_content["outcome"] == "blocked"
    assert executor.sessions[0].ran == []


async def test_recovery_tools_open_no_session_and_say_not_found(
    stdio_surface: tuple[McpSurface, FakeExecutor],
) -> None:
    """Before any command ran, read_output and task_read answer "not found" without starting a session."""
    surface, executor = stdio_surface
    async with Client(surface.server) as client:
        read = await client.call_tool("read_output", {"artifact_id": "s1.a1"})
        task = await client.call_tool("task_read", {"task_id": "s1.t1"})
        listing = await client.call_tool("task_list", {})
    assert read.is_error and "not found" in _text(read)
    assert task.is_error and "not found" in _text(task)
    assert not listing.is_error and listing.structured_content == {"outcome": "completed", "tasks": []}
    assert executor.sessions == []


async def test_stdio_session_is_reused_and_closed_with_the_server() -> None:
    """Every call of the stdio client shares one session, which closes when the surface closes."""
    executor = FakeExecutor()
    async with open_surface(executor, transport="stdio") as surface:
        async with Client(surface.server) as client:
            await client.call_tool("bash", {"command": "echo 1"})
            await client.call_tool("bash", {"command": "echo 2"})
        assert len(executor.sessions) == 1 and not executor.sessions[0].closed
    assert executor.sessions[0].closed
    assert executor.sessions[0].ran == ["echo 1", "echo 2"]


async def test_named_session_is_created_once_then_attached() -> None:
    """--session NAME creates a kept session the first time and attaches to it afterwards."""
    executor = FakeExecutor()
    for command in ("echo first", "echo second"):
        async with open_surface(executor, transport="stdio", session_name="ci") as surface:
            async with Client(surface.server) as client:
                result = await client.call_tool("bash", {"command": command})
            assert not result.is_error
    assert len(executor.sessions) == 1
    assert executor.kept["ci"].ran == ["echo first", "echo second"]
    assert not executor.kept["ci"].closed  # a named session is left running


async def test_a_lost_named_session_is_attached_again_at_the_next_call() -> None:
    """A named session whose container went away with its workspace kept (idle-stopped, died) is let go by the
    server, and the next call attaches again, recreating it, instead of failing 'sandbox lost' until the server
    restarts."""
    executor = FakeExecutor()
    async with (
        open_surface(executor, transport="stdio", session_name="ci") as surface,
        Client(surface.server) as client,
    ):
        assert not (await client.call_tool("bash", {"command": "echo first"})).is_error
        first = executor.kept["ci"]
        first.lost.set()
        await trio.testing.wait_all_tasks_blocked()
        assert not (await client.call_tool("bash", {"command": "echo second"})).is_error
    assert first.ran == ["echo first"]
    assert executor.kept["ci"] is not first and executor.kept["ci"].ran == ["echo second"]


async def test_task_tools_round_trip(stdio_surface: tuple[McpSurface, FakeExecutor]) -> None:
    """task_start returns ids that task_read, task_stop and task_list accept."""
    surface, _ = stdio_surface
    async with Client(surface.server) as client:
        started = await client.call_tool("task_start", {"command": "sleep 100"})
        assert started.structured_content is not None
        task_id = started.structured_content["data"]["task_id"]
        read = await client.call_tool("task_read", {"task_id": task_id, "offset": 5})
        stopped = await client.call_tool("task_stop", {"task_id": task_id})
        listing = await client.call_tool("task_list", {})
    assert not read.is_error and read.structured_content is not None
    assert read.structured_content["data"] == {"stream": "stdout", "offset": 5, "max_bytes": 65536}
    assert stopped.structured_content is not None and stopped.structured_content["task"]["running"] is False
    assert listing.structured_content is not None
    assert [task["task_id"] for task in listing.structured_content["tasks"]] == [task_id]


async def test_bad_session_name_is_refused_before_anything_starts() -> None:
    """A --session name the backend would refuse is a ConfigError naming the option."""
    with pytest.raises(ConfigError, match=r"^--session: session name 'no spaces' must be"):
        async with open_surface(FakeExecutor(), transport="stdio", session_name="no spaces"):
            pass
    with pytest.raises(ConfigError, match=r"over HTTP each token's session is named NAME\.mcp-<hash>"):
        async with open_surface(FakeExecutor(), transport="http", session_name="n" * 50, tokens=(TOKEN_A,)):
            pass


def test_owner_is_a_hash_prefix_never_the_token() -> None:
    """The owner id is stable per token, differs between tokens, and does not contain the token."""
    owner = owner_for_token(TOKEN_A)
    assert owner == owner_for_token(TOKEN_A) != owner_for_token(TOKEN_B)
    assert TOKEN_A not in owner
    assert owner == "mcp-" + hashlib.sha256(TOKEN_A.encode()).hexdigest()[:16]


async def test_http_without_tokens_refuses_to_start() -> None:
    """Building the HTTP surface with no tokens raises ConfigError naming mcp.tokens."""
    with pytest.raises(ConfigError, match=r"^mcp\.tokens: the HTTP transport refuses to start"):
        async with open_surface(FakeExecutor(), transport="http", tokens=()):
            pass


def test_cli_http_without_tokens_exits_2_with_the_reason(tmp_path: Any) -> None:
    """`executor mcp --transport http` with no tokens exits 2 and says how to set one."""
    result = CliRunner().invoke(
        app, ["mcp", "--transport", "http"], env={"EXECUTOR_HOME": str(tmp_path), "EXECUTOR_MCP__TOKENS": "[]"}
    )
    assert result.exit_code == 2
    assert "EXECUTOR_MCP__TOKENS" in result.output


# --- HTTP -------------------------------------------------------------------------------------------------


@dataclass
class HttpServer:
    url: str
    executor: FakeExecutor


@pytest.fixture
async def http_server() -> AsyncIterator[HttpServer]:
    """The HTTP surface (tokens A and B) over a fake executor, served by hypercorn on 127.0.0.1:0."""
    executor = FakeExecutor()
    async with (
        open_surface(executor, transport="http", tokens=(TOKEN_A, TOKEN_B)) as surface,
        trio.open_nursery() as nursery,
    ):
        url = await nursery.start(serve_http_app, surface.http_app(), "127.0.0.1", 0)
        yield HttpServer(url, executor)
        nursery.cancel_scope.cancel()


def _client(url: str, token: str, **kwargs: Any) -> AbstractAsyncContextManager[Client]:
    return open_mcp_http_client(url, token, **kwargs)


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer not-a-configured-token"}, {"Authorization": TOKEN_A}]
)
async def test_http_refuses_missing_or_wrong_tokens_with_401(http_server: HttpServer, headers: dict[str, str]) -> None:
    """No token, a wrong token or a token without the Bearer scheme gets 401 and a Bearer challenge."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    async with httpx2.AsyncClient() as http:
        response = await http.post(
            http_server.url,
            json=body,
            headers={"Accept": "application/json, text/event-stream", **headers},
        )
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert http_server.executor.sessions == []


async def test_http_tokens_own_their_sessions_artifacts_and_tasks(http_server: HttpServer) -> None:
    """Token B gets "not found" for token A's artifact and task, and A's session is owned by A's hash."""
    async with _client(http_server.url, TOKEN_A) as a:
        ran = await a.call_tool("bash", {"command": "echo secret"})
        started = await a.call_tool("task_start", {"command": "sleep 100"})
    assert ran.structured_content is not None and started.structured_content is not None
    artifact_id = ran.structured_content["artifact_id"]
    task_id = started.structured_content["data"]["task_id"]
    async with _client(http_server.url, TOKEN_B) as b:
        before = await b.call_tool("read_output", {"artifact_id": artifact_id})
        await b.call_tool("bash", {"command": "echo mine"})
        after = await b.call_tool("read_output", {"artifact_id": artifact_id})
        search = await b.call_tool("search_output", {"artifact_id": artifact_id, "pattern": "secret"})
        task = await b.call_tool("task_read", {"task_id": task_id})
        stop = await b.call_tool("task_stop", {"task_id": task_id})
        listing = await b.call_tool("task_list", {})
    for result in (before, after, search, task, stop):
        assert result.is_error and "not found" in _text(result), _text(result)
    assert listing.structured_content == {"outcome": "completed", "tasks": []}
    owners = {session.owner for session in http_server.executor.sessions}
    assert owners == {owner_for_token(TOKEN_A), owner_for_token(TOKEN_B)}
    session_a = next(s for s in http_server.executor.sessions if s.owner == owner_for_token(TOKEN_A))
    assert session_a.ran == ["echo secret"]


async def test_http_named_session_is_per_token() -> None:
    """Over HTTP, --session NAME gives each token its own kept session (NAME.<owner>)."""
    executor = FakeExecutor()
    async with (
        open_surface(executor, transport="http", tokens=(TOKEN_A, TOKEN_B), session_name="ci") as surface,
        trio.open_nursery() as nursery,
    ):
        url = await nursery.start(serve_http_app, surface.http_app(), "127.0.0.1", 0)
        for token in (TOKEN_A, TOKEN_B, TOKEN_A):
            async with _client(url, token) as client:
                result = await client.call_tool("bash", {"command": f"echo {token[6]}"})
            assert not result.is_error, _text(result)
        nursery.cancel_scope.cancel()
    assert sorted(executor.kept) == sorted(f"ci.{owner_for_token(t)}" for t in (TOKEN_A, TOKEN_B))
    assert executor.kept[f"ci.{owner_for_token(TOKEN_A)}"].ran == ["echo a", "echo a"]
    assert executor.kept[f"ci.{owner_for_token(TOKEN_B)}"].ran == ["echo b"]


async def test_http_handshake_clients_get_a_session_per_connection_closed_when_they_leave(
    http_server: HttpServer,
) -> None:
    """Two handshake-era connections with one token get two sessions; each closes when its client disconnects."""
    async with _client(http_server.url, TOKEN_A, mode="legacy") as first:
        await first.call_tool("bash", {"command": "echo 1"})
        async with _client(http_server.url, TOKEN_A, mode="legacy") as second:
            await second.call_tool("bash", {"command": "echo 2"})
        with trio.fail_after(5):
            await http_server.executor.sessions[1].closed_event.wait()
        assert not http_server.executor.sessions[0].closed
        await first.call_tool("bash", {"command": "echo 3"})
    sessions: list[FakeSession] = http_server.executor.sessions
    assert [s.ran for s in sessions] == [["echo 1", "echo 3"], ["echo 2"]]
    with trio.fail_after(5):
        await sessions[0].closed_event.wait()


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_http_approvals_reach_the_client_and_decline_runs_nothing(http_server: HttpServer, mode: str) -> None:
    """Over HTTP on both eras, an accepted approval runs the command and a declined one does not."""
    accept = _asked("accept", {"approve": True})
    decline = _asked("decline")
    async with _client(http_server.url, TOKEN_A, mode=mode, elicitation_callback=accept) as client:
        approved = await client.call_tool("bash", {"command": "ask:echo yes"})
    async with _client(http_server.url, TOKEN_A, mode=mode, elicitation_callback=decline) as client:
        declined = await client.call_tool("bash", {"command": "ask:echo no"})
    assert not approved.is_error and declined.is_error
    ran = [command for session in http_server.executor.sessions for command in session.ran]
    assert ran == ["ask:echo yes"]
    assert "ask:echo yes" in accept.messages[0] and "ask:echo no" in decline.messages[0]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_http_clients_leave_no_response_stream_for_the_collector(http_server: HttpServer, mode: str) -> None:
    """A client's SSE answers and approvals are closed when it leaves: a collection right after finds no generator."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        async with _client(
            http_server.url, TOKEN_A, mode=mode, elicitation_callback=_asked("accept", {"approve": True})
        ) as client:
            await client.call_tool("bash", {"command": "ask:echo yes"})
            await client.call_tool("bash", {"command": "echo plain"})
        gc.collect()
        await trio.lowlevel.checkpoint()
    assert [str(w.message) for w in caught if "garbage collected" in str(w.message)] == []
