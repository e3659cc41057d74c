"""The ``executor`` command line, in-process: the typer app with every command (operator commands always run here;
the session commands run here when no service answers, see :mod:`executor.cli.main`)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from executor.cli import (
    agent_cmd,
    bg_cmd,
    config_cmd,
    demo_cmd,
    image_cmd,
    mcp_cmd,
    output_cmd,
    policy_cmd,
    serve_cmd,
    session_cmd,
)
from executor.cli._common import WORDS_CONTEXT, CliState, GuardedGroup
from executor.cli.cp_cmd import cp_command
from executor.cli.exec_cmd import exec_command
from executor.cli.replay_cmd import replay_command
from executor.cli.write_cmd import write_command

app = typer.Typer(
    cls=GuardedGroup,
    help="A sandboxed, container-backed executor for AI agents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(config_cmd.app, name="config")
app.add_typer(policy_cmd.app, name="policy")
app.add_typer(agent_cmd.app, name="agent")
app.command("replay")(replay_command)
app.add_typer(image_cmd.app, name="image")
app.add_typer(session_cmd.app, name="session")
app.command("mcp")(mcp_cmd.mcp)
app.command("serve")(serve_cmd.serve)
app.command("exec", context_settings=WORDS_CONTEXT)(exec_command)
app.command("write")(write_command)
app.command("cp")(cp_command)
app.add_typer(output_cmd.app, name="output")
app.add_typer(bg_cmd.app, name="bg")
app.add_typer(demo_cmd.app, name="demo")


@app.callback()
def _root(
    ctx: typer.Context,
    config: Path | None = typer.Option(None, "--config", help="TOML settings file (else $EXECUTOR_CONFIG)."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object (stable shapes)."),
    debug: bool = typer.Option(
        False, "--debug", help="Also print the traceback when the executor fails (exit 125), for bug reports."
    ),
) -> None:
    ctx.obj = CliState(config=config, json=json_output, debug=debug)


def hoist_json(argv: list[str]) -> list[str]:
    """Let every command take ``--json`` after its name, too: move it before the subcommand, where the root option
    lives. Words after ``--`` (a command to run) are never touched."""
    end = argv.index("--") if "--" in argv else len(argv)
    if "--json" not in argv[:end]:
        return argv
    return ["--json", *(word for word in argv[:end] if word != "--json"), *argv[end:]]


def main(argv: list[str] | None = None) -> None:
    """Run the command line in-process."""
    app(args=hoist_json(sys.argv[1:] if argv is None else argv))
