"""``executor config check|show``."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from executor.cli._common import EXIT_USAGE, emit, fail, state
from executor.config import load_settings
from executor.errors import ConfigError

app = typer.Typer(help="Check and show settings.", no_args_is_help=True)


@app.command("check")
def check(ctx: typer.Context, file: Path = typer.Argument(..., help="A TOML settings file.")) -> None:
    """Validate a settings file; print every bad field and exit 2, or say it is valid."""
    json_mode = state(ctx).json
    try:
        load_settings(file)
    except ConfigError as exc:
        fail(str(exc), code=EXIT_USAGE, json_mode=json_mode, outcome="invalid")
    emit({"outcome": "valid", "file": str(file)}, f"{file}: valid", json_mode=json_mode)


@app.command("show")
def show(ctx: typer.Context) -> None:
    """Print the effective settings (defaults < file < EXECUTOR_* environment)."""
    st = state(ctx)
    data = json.loads(st.settings().model_dump_json())
    emit({"outcome": "ok", "settings": data}, json.dumps(data, indent=2, sort_keys=True), json_mode=st.json)
