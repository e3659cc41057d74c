"""``executor agent build [--sanitize]``.

JSON shape (``--json``): ``{"outcome": "completed", "exit_code": 0, "path": "...", "sanitize": false}``; a failed
build prints ``{"outcome": "error", "error": "...", "exit_code": 125}`` and exits 125.
"""

from __future__ import annotations

import typer

from executor.cli._common import emit_done, state
from executor.sandbox.agent.build import agent_build_dir, ensure_agent

app = typer.Typer(help="The in-container agent (a static C binary built from this package).", no_args_is_help=True)


@app.command("build")
def build(
    ctx: typer.Context,
    sanitize: bool = typer.Option(
        False, "--sanitize", help="Build with AddressSanitizer and UndefinedBehaviorSanitizer (for host tests)."
    ),
) -> None:
    """Compile the agent unless a binary for the current sources exists; print its path."""
    st = state(ctx)
    settings = st.settings()
    path = ensure_agent(settings.agent, agent_build_dir(settings), sanitize=sanitize)
    emit_done({"path": str(path), "sanitize": sanitize}, str(path), json_mode=st.json)
