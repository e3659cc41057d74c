"""Where the agent binary comes from: ``executor.sandbox.agent.build`` compiles it (cached by a hash of its
sources); this backend only places it in containers."""

from __future__ import annotations

from pathlib import Path

import trio

from executor.config import Settings
from executor.errors import AgentError
from executor.sandbox.agent.build import ensure_agent, ensure_statx_shim

__all__ = ["agent_binary", "statx_shim"]


async def agent_binary(settings: Settings) -> Path:
    """The host path of the static agent binary to place in session containers (compiled on first use).

    Raises:
        AgentError: no C compiler, or the compilation failed.
    """
    # Compiling takes seconds the first time; a worker thread keeps the event loop responsive meanwhile.
    path = await trio.to_thread.run_sync(ensure_agent, settings)
    if not await trio.to_thread.run_sync(path.is_file):
        raise AgentError(f"the agent build returned {path}, which is not a file")
    return path


async def statx_shim(settings: Settings) -> Path:
    """The host path of the runsc preload library (``shim_statx.c``), compiled on first use.

    Raises:
        AgentError: no C compiler, or the compilation failed.
    """
    return await trio.to_thread.run_sync(ensure_statx_shim, settings)
