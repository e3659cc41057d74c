"""``executor policy test``: what the gate would decide for an action, without running anything.

Shapes (``--json``): ``{"outcome": "completed" | "failed", "exit_code": 0 | 1, "decision": "allow|ask|deny",
"static_only": bool, "trust": N, "policy": {"name", "file", "sha256"}, "matches": [{"rule", "kind", "decision",
"justification"}], "judgments": [{"provider", "answers", "error"}], "reasons": [...]}``. With ``--expect`` a
different decision is outcome ``failed`` and exits 1, so a policy's intended decisions can be kept as a script of
checks.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
from pathlib import Path
from typing import Literal

import trio
import typer

from executor.cli._common import EXIT_USAGE, emit_done, fail, state
from executor.config import Settings
from executor.errors import ConfigError, ExecutorError
from executor.gate.gate import Gate, GateOutcome
from executor.gate.judge import api_key_from, open_judge
from executor.gate.policy import load_profile_policy, policy_path
from executor.models import BashAction, FileState, WriteAction

app = typer.Typer(help="Develop a policy like code: see what the gate decides, without running anything.")

_PROBE_SESSION = "s-000000000000"
"""The session id the probe action is charged to (no session exists and none is opened)."""


def _parse_env(pairs: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ConfigError(f"--env {pair!r} must be NAME=VALUE")
        env[name] = value
    return env


def _decide(
    settings: Settings, profile_name: str | None, action: BashAction | WriteAction, trust: int | None
) -> tuple[GateOutcome, Path]:
    profile = settings.profile(profile_name)
    policy = load_profile_policy(settings.gate, profile)
    file = policy_path(settings.gate, profile.policy)

    async def run() -> GateOutcome:
        api_key = api_key_from(settings.gate.judge, os.environ)
        async with open_judge(settings.gate.judge, api_key=api_key) as judge:
            gate = Gate(settings.gate_for(profile), policy=policy, judge=judge, cache=None)
            return await gate.evaluate(action, session_id=_PROBE_SESSION, trust=trust)

    return trio.run(run), file


@app.command("test")
def test(
    ctx: typer.Context,
    command: list[str] = typer.Argument(None, help="The command (after --), as it would be given to exec."),
    write: str | None = typer.Option(None, "--write", help="Test a write to this path instead of a command."),
    content: Path | None = typer.Option(None, "--content", help="With --write: a host file whose bytes are written."),
    profile: str | None = typer.Option(None, "--profile", help="The profile whose policy applies (default profile)."),
    cwd: str | None = typer.Option(None, "--cwd", help="The command's working directory (the workspace by default)."),
    env: list[str] = typer.Option([], "--env", help="NAME=VALUE added to the command's environment; repeatable."),
    trust: int | None = typer.Option(None, "--trust", min=0, max=3, help="Trust level 0..3 (gate.trust by default)."),
    expect: Literal["allow", "ask", "deny"] | None = typer.Option(
        None, "--expect", help="Exit 1 unless the decision is this one."
    ),
) -> None:
    """Print the decision, the matching rules (with the policy file) and the judge's answer for one action."""
    st = state(ctx)
    settings = st.settings()
    try:
        prof = settings.profile(profile)
        if write is not None:
            if command:
                raise ConfigError("give either a command or --write PATH, not both")
            path = posixpath.normpath(posixpath.join(prof.workspace, write))
            data = content.read_bytes() if content is not None else b""
            action: BashAction | WriteAction = WriteAction(
                session_id=_PROBE_SESSION,
                path=path,
                content_sha256=hashlib.sha256(data).hexdigest(),
                size=len(data),
                reviewed=FileState(kind="missing"),
            )
        else:
            if not command:
                raise ConfigError("give the command after --, like: executor policy test -- rm -rf build")
            action = BashAction(
                session_id=_PROBE_SESSION,
                command=" ".join(command),
                cwd=cwd or prof.workspace,
                env=_parse_env(env),
                timeout_ms=settings.bash.timeout_ms,
            )
        outcome, file = _decide(settings, profile, action, trust)
    except (ConfigError, ValueError, OSError) as exc:
        fail(str(exc), code=EXIT_USAGE, json_mode=st.json)
    except ExecutorError as exc:
        fail(str(exc), code=125, json_mode=st.json)
    verdict = outcome.static_verdict
    alone = ", static policy alone" if outcome.static_only else ""
    lines = [f"decision: {outcome.decision} (trust {outcome.trust}{alone})"]
    lines.append(f"policy: {verdict.policy} ({file})")
    if verdict.matches:
        lines += [f"  rule {m.rule!r} ({m.kind}, {m.decision}): {m.justification}" for m in verdict.matches]
    else:
        lines.append("  no rule matched")
    for record in outcome.judgments:
        if record.error is not None:
            lines.append(f"judge {record.provider}: failed ({record.error}), so the gate fails closed")
        else:
            answers = ", ".join(f"{key}={value}" for key, value in sorted(record.answers.items()))
            lines.append(f"judge {record.provider}: {answers}")
    lines += [f"  {reason}" for reason in outcome.reasons if not reason.startswith("policy rule")]
    missed = expect is not None and outcome.decision != expect
    emit_done(
        {
            "decision": outcome.decision,
            "static_only": outcome.static_only,
            "trust": outcome.trust,
            "policy": {"name": verdict.policy, "file": str(file), "sha256": verdict.policy_sha256},
            "matches": [m.model_dump(mode="json") for m in verdict.matches],
            "judgments": [
                {"provider": r.provider, "answers": r.model_dump(mode="json")["answers"], "error": r.error}
                for r in outcome.judgments
            ],
            "reasons": outcome.reasons,
        },
        "\n".join(lines),
        json_mode=st.json,
        code=1 if missed else 0,
        outcome="failed" if missed else "completed",
    )
    if missed:
        if not st.json:
            typer.echo(f"expected {expect}, got {outcome.decision}", err=True)
        raise typer.Exit(1)
