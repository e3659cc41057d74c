"""``executor replay JOURNAL [--trust N] [--mode policy|reevaluate] [--policy FILE] [--json]``.

Reads a journal leniently (refused lines are reported by number), re-decides its decisions offline and prints
a report: one JSON object under ``--json`` (global, before the subcommand, or local, after it), else tables.
Nothing recorded is executed and no approval is made. With this home's journal key every line's MAC and chain are
verified and failures are reported by line; a journal this home cannot verify (no key, another home's key, unsigned)
is replayed in an explicit *unverified* mode: the first line of the report and ``verification`` in JSON say so. Only
regular files up to ``journal.max_file_bytes`` are read. Exit codes: 0 when the journal had valid records (even if
some lines were refused); 1 (outcome ``failed``, the report still printed) when lines failed authentication with
this home's key: forged or changed after the fact; 2 for bad usage, an unreadable policy or journal file, or a
journal with no valid record at all.

``--json``: ``{"outcome": "completed", "exit_code": 0, "journal_errors": bool (some lines were refused; the report
lists them), "journal", "verification", "verification_note", ...the report}``; a journal with no valid record is
``{"outcome": "error", "error": MESSAGE, "exit_code": 2, ...}`` with the same report (its ``errors`` say why).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import trio
import typer

from executor.cli._common import EXIT_USAGE, emit_done, fail, state
from executor.config import Settings
from executor.errors import ConfigError, JournalError
from executor.gate.judge import api_key_from, open_judge
from executor.gate.policy import Policy, load_policy, policy_path
from executor.journal import JournalRead, load_journal_key, read_journal_file
from executor.replay import ReplayMode, ReplayReport, replay

__all__ = ["replay_command"]

_MODES: tuple[ReplayMode, ...] = ("policy", "reevaluate")


def replay_command(
    ctx: typer.Context,
    journal: Path = typer.Argument(..., help="A session journal (journal.ndjson)."),
    trust: int | None = typer.Option(None, "--trust", help="Trust level 0..3 to re-decide at (default: gate.trust)."),
    mode: str = typer.Option(
        "policy", "--mode", help="policy: re-score recorded answers, no judge calls; reevaluate: ask the judge again."
    ),
    policy: Path | None = typer.Option(
        None, "--policy", help="A policy TOML to apply to the recorded actions (default: the recorded verdicts)."
    ),
) -> None:
    """Re-score a journal's recorded judgments offline; nothing is executed or approved."""
    st = state(ctx)
    json_mode = st.json
    settings = st.settings()
    if trust is None:
        trust = settings.gate.trust
    if trust not in (0, 1, 2, 3):
        fail(f"--trust {trust} is not one of 0, 1, 2, 3", code=EXIT_USAGE, json_mode=json_mode)
    checked_mode = next((known for known in _MODES if known == mode), None)
    if checked_mode is None:
        fail(f"--mode {mode!r} is not one of: policy, reevaluate", code=EXIT_USAGE, json_mode=json_mode)
    loaded: Policy | None = None
    if policy is not None:
        profile = settings.profile()
        try:
            loaded = load_policy(
                policy, workspace=profile.workspace, home=profile.home, resolve=_beside_then_search(policy, settings)
            )
        except ConfigError as exc:
            fail(str(exc), code=EXIT_USAGE, json_mode=json_mode)
    try:
        # Replay only reads: it never creates the home's key. Without one the journal is read unverified.
        key = load_journal_key(settings.home, create=False)
        read = read_journal_file(journal, settings=settings.journal, mode="lenient", key=key)
    except JournalError as exc:
        fail(str(exc), code=EXIT_USAGE, json_mode=json_mode)
    report = trio.run(_run, read, settings, trust, loaded, checked_mode)
    unreadable = not read.records
    forged = bool(read.failed_authentication)
    code = EXIT_USAGE if unreadable else 1 if forged else 0
    message = f"no valid record could be read from {_clean(str(journal))}"
    data = {
        **({"error": message} if unreadable else {}),
        "journal_errors": bool(read.issues or read.issues_omitted),
        "journal": str(journal),
        "verification": read.verification,
        "verification_note": read.note,
        "failed_authentication": read.failed_authentication,
        **report.model_dump(mode="json"),
    }
    text = render(report, journal=str(journal))
    emit_done(
        data,
        f"journal {'FAILED VERIFICATION' if read.failed_authentication else read.verification.upper()}: "
        f"{read.note}\n{text}",
        json_mode=json_mode,
        code=code,
        outcome="error" if unreadable else "failed" if forged else "completed",
    )
    if unreadable and not json_mode:
        typer.echo(f"error: {message}", err=True)
    if code:
        raise typer.Exit(code)


async def _run(
    read: JournalRead, settings: Settings, trust: int, policy: Policy | None, mode: ReplayMode
) -> ReplayReport:
    if mode == "policy":
        return await replay(read, trust=trust, policy=policy, mode="policy")
    judge_settings = settings.gate.judge
    # The CLI is an entry point: it alone reads the environment, and only the variable the settings name.
    async with open_judge(judge_settings, api_key=api_key_from(judge_settings, os.environ)) as judge:
        return await replay(read, trust=trust, policy=policy, mode="reevaluate", judge=judge)


def _clean(text: object, limit: int = 200) -> str:
    """Journal text is untrusted: show control and invisible characters as escapes, and cut long values."""
    raw = str(text)
    shown = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in raw[:limit])
    return shown + ("…" if len(raw) > limit else "")


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    cells = [[_clean(cell) for cell in row] for row in rows]
    widths = [max(len(h), *(len(row[i]) for row in cells)) for i, h in enumerate(headers)]
    lines = ["  " + "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row in cells:
        lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return lines


def render(report: ReplayReport, *, journal: str) -> str:
    """The report as text tables for people."""
    replayed = report.replayed
    lines = [
        f"replay of {_clean(journal)}: mode {report.mode}, trust {report.trust}, "
        f"policy {_clean(report.policy) if report.policy else '(recorded verdicts)'}",
        f"read {report.lines} line(s): {report.records} valid record(s), "
        f"{len(report.errors) + report.errors_omitted} refused",
        f"replayed: {replayed.unchanged} unchanged, {replayed.changed} changed; "
        f"static-only: {len(report.static_only)}; unsupported: {len(report.unsupported)}; "
        f"provider calls: {report.provider_calls}; nothing was executed",
    ]
    if replayed.changes:
        lines += ["", "changed decisions"]
        rows: list[list[object]] = []
        for change in replayed.changes:
            rows.append([change.line, change.action_id, change.old, change.new, change.why])
            if change.approval or change.note:
                rows.append(["", "", "", "", f"approval {change.approval or '-'}: {change.note or ''}"])
        lines += _table(["line", "action", "old", "new", "why"], rows)
    changed_focus = [item for item in replayed.focus if item.changed]
    if replayed.focus:
        lines += ["", f"focus decisions ({len(replayed.focus)} replayed, {len(changed_focus)} changed)"]
        lines += _table(
            ["line", "artifact/stream", "old", "new", "why"],
            [[f.line, f"{f.artifact_id}/{f.stream}", f.old_status, f.new_status, f.why] for f in replayed.focus],
        )
    if report.static_only:
        lines += ["", "static-only (floor verdicts, never replayable)"]
        lines += _table(
            ["line", "action", "decision", "rules"],
            [[s.line, s.action_id, s.decision, ", ".join(s.rules) or "-"] for s in report.static_only],
        )
    if report.unsupported:
        lines += ["", "unsupported"]
        lines += _table(
            ["line", "kind", "ref", "reason"], [[u.line, u.kind, u.ref, u.reason] for u in report.unsupported]
        )
    if report.drift:
        lines += ["", "answer drift (recorded -> fresh)"]
        lines += _table(
            ["judgment", "question", "recorded", "fresh"],
            [[d.judgment_id, d.question_id, d.recorded, d.fresh] for d in report.drift],
        )
    if report.errors:
        lines += ["", "refused journal lines"]
        lines += _table(["line", "code", "message"], [[e.line, e.code, e.message] for e in report.errors])
        if report.errors_omitted:
            lines.append(f"... and {report.errors_omitted} more refused line(s), not listed (journal.max_issues)")
    return "\n".join(lines)


def _beside_then_search(policy: Path, settings: Settings) -> Callable[[str], Path]:
    """Where a replayed policy's ``extends`` is found: beside the file, else on the profiles' search path (the
    operator's ``gate.policy_dir``, then the shipped ``policy/``), so ``extends = "default"`` works anywhere."""

    def resolve(name: str) -> Path:
        beside = policy.with_name(f"{name}.toml")
        return beside if beside.is_file() else policy_path(settings.gate, name)

    return resolve
