"""The MCP server end to end: the SDK's own client, the real pipeline, the real engine and the ``base`` image.

Over HTTP one server (tokens A and B) runs for the whole module in a thread of its own; on the 2026-07-28
protocol each token has one default session, so the tests below share two containers. Over stdio each test
starts ``executor mcp --transport stdio`` as a subprocess with a private EXECUTOR_HOME (one session each) and
speaks the handshake-era protocol, where approvals are asked in the middle of the call.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from mcp import Client, StdioServerParameters
from mcp.client.session import ClientRequestContext
from mcp_types import CallToolResult, ElicitRequestParams, ElicitResult, TextContent

from executor.config import load_settings
from executor.mcp.server import serve_http
from executor.testing.mcp_http import open_mcp_http_client

pytestmark = [pytest.mark.docker, pytest.mark.timeout(120)]

TOKEN_A = "e2e-token-a-0123456789abcdef"
TOKEN_B = "e2e-token-b-0123456789abcdef"

ASKED_COMMAND = "touch {marker} && crontab -l"
"""A command the default policy asks about (crontab-and-services); it leaves a marker file if it runs."""


def _text(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


def _facts(result: CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None, _text(result)
    return dict(result.structured_content)


@dataclass
class Answers:
    """An elicitation callback whose next answer the test sets; it remembers what the person was shown."""

    answer: ElicitResult = field(default_factory=lambda: ElicitResult(action="decline"))
    shown: list[str] = field(default_factory=list)

    async def __call__(self, context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        self.shown.append(params.message)
        return self.answer

    def approve(self) -> None:
        self.answer = ElicitResult(action="accept", content={"approve": True})

    def decline(self) -> None:
        self.answer = ElicitResult(action="decline")


async def _marker_exists(client: Client, marker: str) -> bool:
    probe = await client.call_tool("bash", {"command": f"test -e {marker} && echo present || echo absent"})
    assert not probe.is_error, _text(probe)
    return "present" in _text(probe)


async def _exercise(client: Client, answers: Answers, tag: str) -> None:
    """Listing, a bash call, recovery of a long output, an accepted and a declined approval."""
    tools = {tool.name for tool in (await client.list_tools()).tools}
    assert {"bash", "write_file", "read_output", "search_output", "task_start", "task_read"} <= tools

    hello = await client.call_tool("bash", {"command": "echo hello from $(whoami)"})
    assert not hello.is_error, _text(hello)
    assert "hello from" in _text(hello)
    assert _facts(hello)["outcome"] == "completed" and _facts(hello)["exit_code"] == 0

    long = await client.call_tool("bash", {"command": "seq 1 20000"})
    artifact_id = _facts(long)["artifact_id"]
    assert "12345\n" not in _text(long)  # the bounded view left the middle out
    page = await client.call_tool(
        "read_output", {"artifact_id": artifact_id, "stream": "stdout", "start_line": 12345, "line_count": 2}
    )
    assert not page.is_error, _text(page)
    assert _text(page).splitlines()[1:] == ["12345", "12346"], _text(page)  # after the page header
    found = await client.call_tool("search_output", {"artifact_id": artifact_id, "pattern": "^17777$"})
    assert not found.is_error and "17777" in _text(found), _text(found)

    answers.approve()
    accepted = await client.call_tool("bash", {"command": ASKED_COMMAND.format(marker=f"accepted-{tag}")})
    assert _facts(accepted)["outcome"] in {"completed", "failed"}, _text(accepted)  # crontab may be missing
    assert f"accepted-{tag}" in answers.shown[-1]
    assert await _marker_exists(client, f"accepted-{tag}")

    answers.decline()
    shown_before = len(answers.shown)
    declined = await client.call_tool("bash", {"command": ASKED_COMMAND.format(marker=f"declined-{tag}")})
    assert declined.is_error and _facts(declined)["outcome"] == "denied", _text(declined)
    assert len(answers.shown) == shown_before + 1
    assert not await _marker_exists(client, f"declined-{tag}")


# --- HTTP ---------------------------------------------------------------------------------------------------


@dataclass
class HttpServer:
    url: str


@pytest.fixture(scope="module")
def http_server(base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    """``serve_http`` on 127.0.0.1:0 (tokens A and B, a private home), in its own thread and trio run."""
    home = tmp_path_factory.mktemp("mcp-http-home")
    settings = load_settings(
        overrides={"home": str(home), "mcp": {"host": "127.0.0.1", "port": 0, "tokens": [TOKEN_A, TOKEN_B]}}
    )
    ready = threading.Event()
    state: dict[str, Any] = {}

    async def main() -> None:
        with trio.CancelScope() as scope:
            state["token"] = trio.lowlevel.current_trio_token()
            state["scope"] = scope
            async with trio.open_nursery() as nursery:
                state["url"] = await nursery.start(serve_http, settings)
                ready.set()

    def run() -> None:
        try:
            trio.run(main)
        except BaseException as exc:  # reported to the test thread below
            state["error"] = exc
        finally:
            ready.set()

    thread = threading.Thread(target=run, name="mcp-http-e2e", daemon=True)
    thread.start()
    assert ready.wait(90), "the MCP HTTP server did not start"
    if "error" in state:
        raise state["error"]
    try:
        yield HttpServer(state["url"])
    finally:
        trio.from_thread.run_sync(state["scope"].cancel, trio_token=state["token"])
        thread.join(60)
        assert not thread.is_alive(), "the MCP HTTP server did not stop"
        if "error" in state:
            raise state["error"]


def _http_client(url: str, token: str, **kwargs: Any) -> AbstractAsyncContextManager[Client]:
    return open_mcp_http_client(url, token, **kwargs)


async def test_http_bash_recovery_and_approvals(http_server: HttpServer) -> None:
    """Over HTTP: listing, a bash call, read_output/search_output recovery, approval accepted and declined."""
    answers = Answers()
    async with _http_client(http_server.url, TOKEN_A, elicitation_callback=answers) as client:
        await _exercise(client, answers, "http")


async def test_http_write_approval_shows_the_diff(http_server: HttpServer) -> None:
    """A write the policy asks about shows its diff in the elicitation; accepted, exactly that content is written."""
    answers = Answers()
    answers.approve()
    async with _http_client(http_server.url, TOKEN_A, elicitation_callback=answers) as client:
        written = await client.call_tool("write_file", {"path": ".envrc", "content": "export MCP_E2E=1\n"})
        assert not written.is_error, _text(written)
        assert "+export MCP_E2E=1" in answers.shown[-1] and ".envrc" in answers.shown[-1]
        shown = await client.call_tool("bash", {"command": "cat .envrc"})
    assert "[stdout]\nexport MCP_E2E=1\n" in _text(shown), _text(shown)


async def test_http_client_without_elicitation_is_blocked(http_server: HttpServer) -> None:
    """A client that cannot be asked gets the blocked result telling the agent to ask the user; nothing runs."""
    async with _http_client(http_server.url, TOKEN_B) as client:
        blocked = await client.call_tool("bash", {"command": ASKED_COMMAND.format(marker="blocked-http")})
        assert blocked.is_error and _facts(blocked)["outcome"] == "blocked", _text(blocked)
        assert "ask the user" in _text(blocked).lower()
        assert not await _marker_exists(client, "blocked-http")


async def test_http_token_cannot_reach_another_tokens_artifacts_or_tasks(http_server: HttpServer) -> None:
    """Token B gets "not found" for token A's artifact and background task; A still reads both."""
    async with _http_client(http_server.url, TOKEN_A) as a:
        ran = await a.call_tool("bash", {"command": "echo only-for-a"})
        started = await a.call_tool("task_start", {"command": "echo task-of-a; sleep 30"})
        artifact_id = _facts(ran)["artifact_id"]
        task_id = _facts(started)["data"]["task_id"]
        async with _http_client(http_server.url, TOKEN_B) as b:
            await b.call_tool("bash", {"command": "true"})  # B has a session of its own, too
            for name, arguments in [
                ("read_output", {"artifact_id": artifact_id}),
                ("search_output", {"artifact_id": artifact_id, "pattern": "only"}),
                ("task_read", {"task_id": task_id}),
                ("task_stop", {"task_id": task_id}),
            ]:
                result = await b.call_tool(name, arguments)
                assert result.is_error and "not found" in _text(result).lower(), (name, _text(result))
            listing = await b.call_tool("task_list", {})
            assert task_id not in _text(listing)
        mine = await a.call_tool("read_output", {"artifact_id": artifact_id})
        assert "only-for-a" in _text(mine)
        for _ in range(100):  # the task writes its line at once; poll it for up to ~10 s
            if "task-of-a" in _text(await a.call_tool("task_read", {"task_id": task_id})):
                break
            await trio.sleep(0.1)
        else:
            pytest.fail("token A never read its own task's output")
        stopped = await a.call_tool("task_stop", {"task_id": task_id})
        assert not stopped.is_error, _text(stopped)


async def test_task_read_pages_followed_by_next_offset_show_every_line_once(http_server: HttpServer) -> None:
    """task_read pages of output several times the display budget, followed by next_offset from 0, show every line
    once with no cut notice; each header names the bytes up to next_offset and says the next call."""
    async with _http_client(http_server.url, TOKEN_A) as client:
        started = await client.call_tool("task_start", {"command": "seq 1 12000"})
        task_id = _facts(started)["data"]["task_id"]
        lines: list[str] = []
        offset = 0
        with trio.fail_after(90):
            while True:
                read = await client.call_tool("task_read", {"task_id": task_id, "offset": offset})
                data = _facts(read)["data"]
                header, _, body = _text(read).partition("\n")
                assert "characters cut here" not in _text(read), _text(read)[-300:]
                assert f"bytes {offset}-{data['next_offset']} of {data['end']};" in header, header
                lines += body.splitlines()
                if not data["running"] and data["next_offset"] == data["end"]:
                    break
                if data["next_offset"] == offset:
                    await trio.sleep(0.05)  # the task has not written more yet: poll
                else:
                    assert data["next_offset"] == data["end"] or f"offset={data['next_offset']})" in header, header
                offset = data["next_offset"]
        assert lines == [str(n) for n in range(1, 12001)]


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer e2e-wrong-token-0123456789"}])
async def test_http_missing_or_wrong_token_is_401(http_server: HttpServer, headers: dict[str, str]) -> None:
    """Without a configured bearer token the server answers 401 and runs nothing."""
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "bash", "arguments": {}}}
    async with httpx2.AsyncClient() as http:
        response = await http.post(
            http_server.url, json=request, headers={"Accept": "application/json, text/event-stream", **headers}
        )
    assert response.status_code == 401


# --- stdio --------------------------------------------------------------------------------------------------


def _stdio(home: Path) -> StdioServerParameters:
    env = {key: value for key, value in os.environ.items() if not key.startswith("EXECUTOR_")}
    env["EXECUTOR_HOME"] = str(home)
    return StdioServerParameters(
        command=sys.executable, args=["-m", "executor.cli", "mcp", "--transport", "stdio"], env=env
    )


async def test_stdio_bash_recovery_and_approvals(base_image: str, home: Path) -> None:
    """Over stdio (handshake era, asked mid-call): listing, bash, recovery, approval accepted and declined."""
    answers = Answers()
    async with Client(_stdio(home), mode="legacy", elicitation_callback=answers) as client:
        await _exercise(client, answers, "stdio")


async def test_stdio_client_without_elicitation_is_blocked(base_image: str, home: Path) -> None:
    """Over stdio, a client without elicitation gets the blocked result and nothing runs."""
    async with Client(_stdio(home)) as client:
        blocked = await client.call_tool("bash", {"command": ASKED_COMMAND.format(marker="blocked-stdio")})
        assert blocked.is_error and _facts(blocked)["outcome"] == "blocked", _text(blocked)
        assert not await _marker_exists(client, "blocked-stdio")


async def test_stdio_server_exits_0_on_stdin_eof(home: Path) -> None:
    """With stdin closed at once, the stdio server exits 0 and writes nothing on stdout (no session was opened)."""
    env = _stdio(home).env
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, "-m", "executor.cli", "mcp", "--transport", "stdio"],
            stdin=b"",
            capture_stdout=True,
            capture_stderr=True,
            env=env,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert done.stdout == b""


async def test_cli_http_serves_until_sigterm_then_exits_0(home: Path) -> None:
    """`executor mcp --transport http` announces its URL, serves a token's client, and exits 0 on SIGTERM."""
    env = dict(_stdio(home).env or {})
    env |= {"EXECUTOR_MCP__PORT": "0", "EXECUTOR_MCP__TOKENS": f'["{TOKEN_A}"]'}
    command = [sys.executable, "-m", "executor.cli", "mcp", "--transport", "http"]
    async with trio.open_nursery() as nursery:
        process: trio.Process = await nursery.start(
            partial(trio.run_process, command, env=env, stderr=subprocess.PIPE, check=False)
        )
        assert process.stderr is not None
        announced = b""
        with trio.fail_after(60):
            while b"listening on " not in announced or not announced.endswith(b"\n"):
                chunk = await process.stderr.receive_some()
                assert chunk, f"the server exited early: {announced.decode(errors='replace')}"
                announced += chunk
        url = announced.decode().split("listening on ", 1)[1].split()[0]
        async with _http_client(url, TOKEN_A) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
        assert "bash" in tools
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            await process.wait()
    assert process.returncode == 0
