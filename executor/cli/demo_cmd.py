"""``executor demo``: the main job on the embedded defaults, narrated (what ``just run`` runs).

A short scripted agent task, end to end, on the rules judge, the default policy and the ``base`` image: the session's
hardening seen from inside, a staged write with its diff and decision, a command with long output recovered with
``read_output`` and ``search_output``, a command the policy asks about (blocked: nobody can approve), a timeout whose
whole process group is killed, a background task read by byte offsets, and the journal with the replay command that
re-scores it.

``--json`` prints no narration, only ``{"outcome": "completed", "exit_code": 0, "session": "s-...", "journal": PATH,
"steps": [{"title": ..., "outcomes": ["completed", "blocked", ...]}]}``.
"""

from __future__ import annotations

import os
import sys
import textwrap
from typing import Any

import trio
import typer

from executor.cli._common import emit_done, state
from executor.gate.judge import api_key_from
from executor.session import ToolResult, open_executor


class _Narrator:
    """Narrates the demo on stdout, or (under ``--json``) keeps each step's title and outcomes for the one object."""

    def __init__(self, *, json_mode: bool) -> None:
        self.json_mode = json_mode
        self.steps: list[dict[str, Any]] = []

    def write(self, text: str) -> None:
        if not self.json_mode:
            sys.stdout.write(text)
            sys.stdout.flush()

    def say(self, title: str) -> None:
        self.steps.append({"title": title, "outcomes": []})
        self.write(f"\n\033[1m== {title}\033[0m\n" if sys.stdout.isatty() else f"\n== {title}\n")

    def show(self, result: ToolResult) -> None:
        self.steps[-1]["outcomes"].append(result.outcome)
        self.write(f"   outcome: {result.outcome}\n")
        self.write(textwrap.indent(result.text.rstrip("\n"), "   | ") + "\n")


_HARDENING = r"""
echo "user: $(id)"
grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status
echo "network interfaces: $(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -s ' ' | tr '\n' ' ')"
if [ -w /etc ]; then echo "root filesystem: writable"; else echo "root filesystem: read-only"; fi
echo "pids limit: $(cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max)"
echo "memory limit: $(cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max)"
echo "PID 1: $(cat /proc/1/cmdline | tr '\0' ' ' | cut -c1-60)"
"""

_ALIVE = r"""
n=0
for p in /proc/[0-9]*; do
  case "$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null)" in "sleep 300"*) n=$((n+1)) ;; esac
done
echo "processes of the killed command still alive: $n"
"""


async def _demo(settings: object, out: _Narrator) -> dict[str, str]:
    from executor.config import Settings

    assert isinstance(settings, Settings)
    api_key = api_key_from(settings.gate.judge, os.environ)
    async with open_executor(settings, approval_handler=None, api_key=api_key, surface="cli") as ex:
        out.say("1. start a session (hardened container, our agent as PID 1)")
        async with ex.open_session() as session:
            session_id = session.id
            out.write(f"   session {session.id}, image {session.info.image}, profile {session.info.profile}\n")
            out.show(await session.bash(_HARDENING))

            out.say("2. write a file: staged, symlink-safe, gated on the exact path and content")
            script = (
                "#!/usr/bin/env python3\n"
                "for i in range(1, 2001):\n"
                "    print(f'line {i}: ok' if i % 500 else f'line {i}: ERROR disk quota')\n"
            )
            out.show(await session.write_file("report.py", script))

            out.say("3. a command with long output: a bounded view, everything kept whole")
            long = await session.bash("python3 report.py")
            out.show(long)
            assert long.artifact_id is not None
            out.say("   ...recover a page with read_output (no re-run)")
            out.show(await session.read_output(long.artifact_id, start_line=995, line_count=10))
            out.say("   ...and find the errors with search_output")
            out.show(await session.search_output(long.artifact_id, pattern=r"ERROR", limit=10))

            out.say("4. a command the policy asks about, with nobody to approve it (non-interactive)")
            out.show(await session.bash("git reset --hard HEAD~1"))

            out.say("5. a timeout: the whole process group is killed, including a TERM-ignoring child")
            out.show(
                await session.bash(
                    "trap '' TERM; (trap '' TERM; sleep 300) & sleep 300 & echo started; wait", timeout_ms=1000
                )
            )
            out.show(await session.bash(_ALIVE))

            out.say("6. a background task, read by byte offsets while it runs")
            started = await session.start_task("for i in 1 2 3 4 5; do echo tick $i; sleep 0.2; done")
            out.show(started)
            task_id = str(started.task_id)
            offset = 0
            for _ in range(4):
                await trio.sleep(0.4)
                chunk = await session.read_task(task_id, offset=offset)
                out.show(chunk)
                offset = int((chunk.data or {}).get("next_offset", offset))  # type: ignore[call-overload]  # JSON int

            journal = session.journal_path
        out.say("7. the journal of every decision, and how to re-score it offline")
        out.write(f"   journal: {journal}\n")
        out.write(f"   replay:  executor replay {journal} --trust 2\n")
        out.write("   the session container and its workspace were removed; nothing it started survives.\n")
    return {"session": session_id, "journal": str(journal)}


app = typer.Typer(help="Run the narrated main job.")


@app.callback(invoke_without_command=True)
def demo(ctx: typer.Context) -> None:
    """The main job on the embedded defaults, narrated step by step."""
    st = state(ctx)
    settings = st.settings()
    out = _Narrator(json_mode=st.json)
    facts = trio.run(_demo, settings, out)
    emit_done({**facts, "steps": out.steps}, "", json_mode=st.json)
