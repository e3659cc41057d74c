"""``executor serve``: run the service (the ``/v1`` JSON API and MCP) until SIGTERM or SIGINT.

Exit codes: ``0`` after a clean stop; ``2`` for bad settings (TCP without tokens); ``125`` when the service cannot
start (no engine, another service on the socket).
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import trio
import typer

from executor.cli._common import EXIT_FAILURE, EXIT_USAGE, fail, state
from executor.config import Settings
from executor.environ import environment_digest
from executor.errors import ConfigError, ExecutorError
from executor.gate.judge import api_key_from


def serve(ctx: typer.Context) -> None:
    """Serve the executor's JSON API (and MCP at /mcp when tokens are set) on a unix socket under the home."""
    st = state(ctx)
    settings = st.settings()
    config = st.config or (Path(os.environ["EXECUTOR_CONFIG"]) if os.environ.get("EXECUTOR_CONFIG") else None)
    # What clients compare their own settings file with (it was just read whole, so it can be read again).
    digest = None if config is None else hashlib.sha256(config.read_bytes()).hexdigest()
    try:
        trio.run(
            _serve, settings, api_key_from(settings.gate.judge, os.environ), digest, environment_digest(os.environ)
        )
    except BaseException as exc:
        leaf = _single(exc)
        if isinstance(leaf, ConfigError):
            fail(str(leaf), code=EXIT_USAGE, json_mode=st.json)
        if isinstance(leaf, ExecutorError):
            fail(str(leaf), code=EXIT_FAILURE, json_mode=st.json)
        raise


def _single(exc: BaseException) -> BaseException:
    """The one exception inside nested single-member groups (trio wraps what a nursery raises)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


async def _serve(
    settings: Settings, api_key: str | None, settings_sha256: str | None, environment_sha256: str | None
) -> None:
    from executor.service.server import serve as run_service  # heavy; only this command needs it

    async with trio.open_nursery() as nursery:
        bound = await nursery.start(
            lambda task_status: run_service(
                settings,
                api_key=api_key,
                settings_sha256=settings_sha256,
                environment_sha256=environment_sha256,
                task_status=task_status,
            )
        )
        sys.stderr.write(f"executor service listening on {', '.join(bound)}\n")
        sys.stderr.flush()
