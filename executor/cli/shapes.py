"""The JSON shapes and text tables of the session commands, built from plain dicts (stdlib only).

Both paths of the CLI use this one module: the thin client (:mod:`executor.cli.thin`, which gets dicts from the
service's JSON) and the in-process typer commands (which dump their models to dicts first). So ``executor exec
--json`` prints the same object whether a service ran the command or this process did.

Rules every shape follows:

* ``outcome``: a tool's own vocabulary (``completed``, ``failed``, ``timeout``, ``cancelled``, ``blocked``,
  ``denied``, ``error``, ``unresponsive``); a command that is not a tool call and succeeded is ``completed``;
* ``exit_code``: this process's exit status, always present;
* ``session``: :data:`SESSION_KEYS`, null where unknown, wherever a session appears;
* an error before any result: ``{"outcome": "error", "error": MESSAGE, "exit_code": N}`` (:func:`error_json`).

This module must import nothing outside the standard library (an import-linter contract checks it).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from executor.ids import is_session_id

__all__ = [
    "EXIT_BLOCKED",
    "EXIT_DENIED",
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_NO_MATCH",
    "EXIT_PIPE",
    "EXIT_TIMEOUT",
    "EXIT_USAGE",
    "MAX_TASK_PAGE_BYTES",
    "SESSION_KEYS",
    "TASK_KEYS",
    "bg_ls_json",
    "bg_read_json",
    "bg_start_json",
    "bg_stop_json",
    "error_json",
    "exec_json",
    "exit_code_for",
    "missing_session_message",
    "output_json",
    "raw_text",
    "session_json",
    "session_table",
    "sessions_json",
    "stopped_json",
    "task_json",
    "task_table",
    "write_json",
]

EXIT_NO_MATCH: Final = 1
"""``output search`` found nothing (as grep)."""
EXIT_USAGE: Final = 2
EXIT_BLOCKED: Final = 75
EXIT_DENIED: Final = 77
EXIT_TIMEOUT: Final = 124
EXIT_FAILURE: Final = 125
EXIT_INTERRUPTED: Final = 130
"""Ctrl-C (128 + SIGINT), as shells report it."""
EXIT_PIPE: Final = 141
"""The reader of our stdout went away (``| head``): 128 + SIGPIPE, as a pipeline's writer ends."""
MAX_TASK_PAGE_BYTES: Final = 1024 * 1024
"""The most one ``bg read`` page asks for (the service's bound on a task read; ``--offset`` continues)."""

SESSION_KEYS: Final = ("id", "name", "image", "profile", "state", "created_at", "owner", "idle_limit_s", "idle_s")
"""The one shape of a session in every JSON object: null where the path that printed it does not know."""

TASK_KEYS: Final = ("task_id", "command", "running", "owner", "artifact_id", "result")
"""The one shape of a background task."""

_ALIASES: Final = {"idle_s": ("idle_s", "idle_for_s")}


def exit_code_for(outcome: str, command_exit_code: int | None) -> int:
    """This process's exit status for a tool result: the command's own status, or 75/77/124/125/130."""
    if outcome == "blocked":
        return EXIT_BLOCKED
    if outcome == "denied":
        return EXIT_DENIED
    if outcome == "timeout":
        return EXIT_TIMEOUT
    if outcome == "cancelled":
        return EXIT_INTERRUPTED
    if outcome in ("error", "unresponsive"):
        return EXIT_FAILURE
    if outcome == "failed":
        return command_exit_code if command_exit_code is not None else 1
    return 0


def missing_session_message(name: str, *, can_create: bool = True) -> str:
    """What a ``--session NAME`` that does not exist says (without ``--create``; ``can_create``: the command takes
    it, as ``cp`` does not); a session id is never a name to start, so it is told only where the home's sessions are
    listed."""
    if is_session_id(name):
        return f"no session {name}; `executor session ls` lists this home's sessions"
    start = f"run `executor session start --name {name}` first"
    return (
        f"no session {name!r}: {'add --create to start it, or ' if can_create else ''}{start} "
        "(`executor session ls` lists this home's sessions)"
    )


def _iso(value: Any) -> Any:
    # A datetime (in-process) as ISO 8601; the thin CLI's values are text already, and it does not load datetime.
    return value.isoformat() if hasattr(value, "isoformat") else value


def session_json(info: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A session in the one shape (:data:`SESSION_KEYS`) from whatever dict a path has (the backend's
    ``SessionInfo``, the service's ``SessionView``); a bare id gives the id and nulls."""
    if info is None:
        return None
    out: dict[str, Any] = {}
    for key in SESSION_KEYS:
        value = None
        for alias in _ALIASES.get(key, (key,)):
            if info.get(alias) is not None:
                value = info[alias]
                break
        out[key] = _iso(value)
    if out["idle_s"] is None and info.get("busy"):
        out["idle_s"] = 0.0  # a command or call runs in it now: not idle, however long ago it began
    elif out["idle_s"] is None:
        # A backend that records when the session was last used (rather than for how long it has been idle).
        last = next((info[k] for k in ("last_used_at", "last_used") if info.get(k) is not None), None)
        since = _age(last, time.time())
        out["idle_s"] = None if since is None else max(0.0, since)
    return out


def bare_session(session_id: str | None) -> dict[str, Any] | None:
    """The shape of a session known only by its id."""
    return None if session_id is None else session_json({"id": session_id})


def error_json(message: str, code: int, outcome: str = "error") -> dict[str, Any]:
    """The object of a command that failed before any result."""
    return {"outcome": outcome, "error": message, "exit_code": code}


def raw_text(data: bytes) -> str:
    """A raw stream as JSON text: UTF-8, an invalid byte as U+FFFD (the bytes themselves stream on stdout)."""
    return data.decode("utf-8", "replace")


def exec_json(
    result: Mapping[str, Any],
    *,
    code: int,
    session: Mapping[str, Any] | None,
    stdout: bytes,
    stdout_whole: bool,
    stderr: bytes,
    stderr_whole: bool,
) -> dict[str, Any]:
    """``executor exec --json`` (see :mod:`executor.cli.exec_cmd`)."""
    return {
        "outcome": result.get("outcome"),
        "exit_code": code,
        "command_exit_code": result.get("exit_code"),
        "artifact_id": result.get("artifact_id"),
        "action_id": result.get("action_id"),
        "text": result.get("text", ""),
        "run": result.get("run"),
        "stdout": raw_text(stdout),
        "stdout_whole": stdout_whole,
        "stderr": raw_text(stderr),
        "stderr_whole": stderr_whole,
        "session": session_json(session),
    }


def write_json(result: Mapping[str, Any], *, code: int, path: str, session: Mapping[str, Any] | None) -> dict[str, Any]:
    """``executor write --json``."""
    return {
        "outcome": result.get("outcome"),
        "exit_code": code,
        "path": path,
        "artifact_id": result.get("artifact_id"),
        "action_id": result.get("action_id"),
        "text": result.get("text", ""),
        "write": result.get("data"),
        "session": session_json(session),
    }


def write_exit_code(outcome: str) -> int:
    """A write the container refused is the write failing (exit 1, like cp), not the executor failing."""
    return 1 if outcome == "error" else exit_code_for(outcome, None)


def sessions_json(infos: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``executor session ls --json``."""
    return {"outcome": "completed", "exit_code": 0, "sessions": [session_json(info) for info in infos]}


def started_json(info: Mapping[str, Any]) -> dict[str, Any]:
    """``executor session start --json``."""
    return {"outcome": "completed", "exit_code": 0, "session": session_json(info)}


def stopped_json(info: Mapping[str, Any]) -> dict[str, Any]:
    """``executor session stop --json``: the session as it was when stopped (``state`` says ``stopped``), and its id
    under ``stopped``."""
    session = session_json({**info, "state": "stopped"})
    assert session is not None
    return {"outcome": "completed", "exit_code": 0, "stopped": session["id"], "session": session}


def output_json(
    result: Mapping[str, Any],
    *,
    code: int,
    artifact_id: str,
    session: Mapping[str, Any] | None,
    pages: Sequence[Any] | None = None,
) -> dict[str, Any]:
    """``executor output read|search --json``: ``page`` the receipts (search: ``pages``, one per stream searched,
    ``page`` the first of them)."""
    data: dict[str, Any] = {
        "outcome": result.get("outcome", "completed"),
        "exit_code": code,
        "artifact_id": artifact_id,
        "session": session_json(session),
        "text": result.get("text", ""),
        "page": result.get("data"),
    }
    if pages is not None:
        data["pages"] = list(pages)
        data["matches"] = sum(len((page or {}).get("matches") or ()) for page in pages)
    return data


def task_json(task: Mapping[str, Any]) -> dict[str, Any]:
    """A task in the one shape (:data:`TASK_KEYS`): ``result`` is how it ended (the service calls it ``run``)."""
    out = {key: task.get(key) for key in TASK_KEYS}
    if out["result"] is None:
        out["result"] = task.get("run")
    return out


def bg_start_json(result: Mapping[str, Any], *, code: int, session: Mapping[str, Any] | None) -> dict[str, Any]:
    """``executor bg start --json``: ``artifact_id`` holds the task's output (``executor output read ID``)."""
    task_id = result.get("task_id") or (result.get("data") or {}).get("task_id")
    return {
        "outcome": result.get("outcome"),
        "exit_code": code,
        "task_id": task_id,
        "artifact_id": result.get("artifact_id"),
        "action_id": result.get("action_id"),
        "text": result.get("text", ""),
        "session": session_json(session),
    }


_READ_KEYS: Final = ("task_id", "stream", "offset", "next_offset", "end", "dropped", "running")


def bg_read_json(result: Mapping[str, Any], *, session: Mapping[str, Any] | None) -> dict[str, Any]:
    """``executor bg read --json``."""
    chunk = result.get("data") or {}
    return {
        "outcome": result.get("outcome", "completed"),
        "exit_code": 0,
        **{key: chunk.get(key) for key in _READ_KEYS},
        "run": result.get("run"),
        "text": result.get("text", ""),
        "session": session_json(session),
    }


def bg_stop_json(task: Mapping[str, Any], *, text: str, session: Mapping[str, Any] | None) -> dict[str, Any]:
    """``executor bg stop --json``."""
    return {
        "outcome": "completed",
        "exit_code": 0,
        "task": task_json(task),
        "text": text,
        "session": session_json(session),
    }


def bg_ls_json(tasks: Iterable[Mapping[str, Any]], *, session: Mapping[str, Any] | None) -> dict[str, Any]:
    """``executor bg ls --json``."""
    return {
        "outcome": "completed",
        "exit_code": 0,
        "tasks": [task_json(task) for task in tasks],
        "session": session_json(session),
    }


def ended_text(run: Mapping[str, Any] | None) -> str:
    """How a task ended, in words."""
    if run is None:
        return "ended"
    seconds = (run.get("duration_ms") or 0) / 1000
    if run.get("cause") == "exited":
        return f"exited {run.get('exit_code')} after {seconds:.2f}s"
    if run.get("signal") is not None:
        return f"killed by signal {run.get('signal')} after {seconds:.2f}s ({run.get('cause')})"
    return f"ended ({run.get('cause')}) after {seconds:.2f}s"


def _ended_state(run: Mapping[str, Any] | None) -> str:
    """An ended task's state in a table cell: ``exited 3``, ``signal 9``, or its cause."""
    if run is None:
        return "ended"
    if run.get("cause") == "exited":
        return f"exited {run.get('exit_code')}"
    if run.get("signal") is not None:
        return f"signal {run.get('signal')}"
    return str(run.get("cause") or "ended")


def _escape(text: str) -> str:
    # Commands and names are shown on a terminal: control characters are made visible, never obeyed.
    return "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in text)


def task_table(tasks: Iterable[Mapping[str, Any]]) -> str:
    """``executor bg ls`` as text."""
    rows = [f"{'TASK':12} {'STATE':12} {'ARTIFACT':20} COMMAND"]
    for task in tasks:
        state = "running" if task.get("running") else _ended_state(task.get("result") or task.get("run"))
        command = _escape(str(task.get("command", ""))[:200])
        rows.append(f"{task.get('task_id', ''):12} {state:12} {task.get('artifact_id') or '-':20} {command}")
    return "\n".join(rows)


def _span(seconds: float | None) -> str:
    if seconds is None or seconds < 0:
        return "-"
    if seconds < 120:
        return f"{int(seconds)}s"
    if seconds < 7200:
        return f"{int(seconds // 60)}m"
    if seconds < 172_800:
        return f"{int(seconds // 3600)}h"
    return f"{int(seconds // 86_400)}d"


def _age(moment: Any, now: float) -> float | None:
    """Seconds from ``moment`` (a datetime, an ISO 8601 text, or epoch seconds) to ``now``."""
    from datetime import datetime  # here: only `session ls` needs it on the thin path

    if isinstance(moment, datetime):
        return now - moment.timestamp()
    if isinstance(moment, int | float) and not isinstance(moment, bool):
        return now - float(moment)
    if isinstance(moment, str):
        try:
            return now - datetime.fromisoformat(moment.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def session_table(infos: Iterable[Mapping[str, Any]], *, now: float | None = None) -> str:
    """``executor session ls`` as text: id, name, state, profile, age, idle time, owner, image."""
    when = time.time() if now is None else now
    rows = [f"{'ID':15} {'NAME':20} {'STATE':8} {'PROFILE':10} {'AGE':>5} {'IDLE':>5} {'OWNER':12} IMAGE"]
    for raw in infos:
        info = session_json(raw) or {}
        image = "(workspace kept; no container)" if raw.get("workspace_only") else str(info.get("image") or "-")
        owner = str(info.get("owner") or "-")
        owner = owner if len(owner) <= 12 else owner[:11] + "~"
        rows.append(
            f"{info['id']:15} {_escape(str(info.get('name') or '-')):20} {info.get('state') or '-':8} "
            f"{info.get('profile') or '-':10} {_span(_age(info.get('created_at'), when)):>5} "
            f"{_span(info.get('idle_s')):>5} {_escape(owner):12} {_escape(image)}"
        )
    return "\n".join(rows)


def reason_line(outcome: str, text: str) -> str:
    """The one stderr line saying why the executor ended a call: the view's first line, and for a gated call the
    reasons listed under it (``- policy rule ...``), so a denial says which rule without ``--view``."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return f"executor: {outcome}: {outcome}"
    parts = [" ".join(lines[0].split())]
    if outcome in ("denied", "blocked"):
        for line in lines[1:]:
            if not line.startswith("- "):
                break
            parts.append(" ".join(line[2:].split()))
    return f"executor: {outcome}: " + "; ".join(parts)
