"""``executor mcp --transport stdio|http [--session NAME]``: serve the executor's tools to MCP clients.

Exit codes: ``0`` when stdin closes (stdio) or on SIGTERM/SIGINT (both close every client session first);
``2`` for bad settings (for example HTTP without bearer tokens); ``125`` when the executor cannot start.
"""

from __future__ import annotations

import os
import signal
import sys
from enum import StrEnum
from functools import partial

import trio
import typer

from executor.cli._common import EXIT_USAGE, fail, state
from executor.config import Settings
from executor.gate.judge import api_key_from


class Transport(StrEnum):
    """How MCP clients connect."""

    stdio = "stdio"
    http = "http"


def mcp(
    ctx: typer.Context,
    transport: Transport = typer.Option(
        Transport.stdio, "--transport", help="stdio (one client, this process) or http (streamable HTTP)."
    ),
    session: str | None = typer.Option(
        None, "--session", help="Use this named session (attach or create) instead of one per client connection."
    ),
) -> None:
    """Serve the executor's tools (bash, write_file, read_output, search_output, tasks) over MCP."""
    # Imported here: the MCP SDK takes most of a second to import, and every other command would pay for it.
    from executor.mcp.server import no_tokens_error

    st = state(ctx)
    settings = st.settings()
    if transport is Transport.http and not settings.mcp.tokens:
        fail(str(no_tokens_error()), code=EXIT_USAGE, json_mode=st.json)
    trio.run(_serve, settings, transport, session, api_key_from(settings.gate.judge, os.environ))


async def _serve(settings: Settings, transport: Transport, session: str | None, api_key: str | None) -> None:
    from executor.mcp.server import serve_http, serve_stdio

    async with trio.open_nursery() as nursery:
        nursery.start_soon(_stop_on_signal, nursery.cancel_scope)
        if transport is Transport.stdio:
            await serve_stdio(settings, session_name=session, api_key=api_key)
            nursery.cancel_scope.cancel()
        else:
            url = await nursery.start(partial(serve_http, settings, session_name=session, api_key=api_key))
            sys.stderr.write(f"executor MCP server listening on {url}\n")
            sys.stderr.flush()


async def _stop_on_signal(scope: trio.CancelScope) -> None:
    # SIGTERM (docker stop) and SIGINT end the server cleanly: cancelling unwinds every client session.
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            scope.cancel()
            return
