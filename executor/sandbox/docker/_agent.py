"""Where the agent binary comes from.

The agent colleague's ``executor.sandbox.agent.build.ensure_agent(settings)`` returns the host path of the static
binary (sync or async). Until that module exists, a Python stand-in (``agent_stub.py``: same command line, echo
instead of the protocol) is written under ``<home>/agent/`` so the container side can be built and tested.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
from importlib import resources
from pathlib import Path

import trio

from executor.config import Settings
from executor.errors import AgentError

__all__ = ["agent_binary"]


async def agent_binary(settings: Settings) -> Path:
    """The host path of the agent binary to place in session containers.

    Raises:
        AgentError: the agent could not be built or found.
    """
    try:
        module = importlib.import_module("executor.sandbox.agent.build")
    except ModuleNotFoundError:
        return await trio.to_thread.run_sync(_stub, settings.home)
    result = module.ensure_agent(settings)
    if inspect.isawaitable(result):
        result = await result
    path = Path(result)
    if not await trio.to_thread.run_sync(path.is_file):
        raise AgentError(f"the agent build returned {path}, which is not a file")
    return path


def _stub(home: Path) -> Path:
    source = resources.files("executor.sandbox.docker").joinpath("agent_stub.py").read_bytes()
    folder = home / "agent"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"agent-stub-{hashlib.sha256(source).hexdigest()[:12]}"
    if not path.is_file():
        partial = path.with_suffix(".partial")
        partial.write_bytes(source)
        partial.chmod(0o755)
        partial.replace(path)
    return path
