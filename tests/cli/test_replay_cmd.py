"""`executor replay`: JSON for machines, tables for people, exit codes, and the judge reached only in reevaluate."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from executor.cli.app import app, hoist_json
from executor.config import JournalSettings, load_settings
from executor.errors import ConfigError
from executor.gate.decision import GATE_TABLE
from executor.journal import (
    ApprovalRequested,
    ApprovalResolved,
    ExecutionStarted,
    JournalWriter,
    SessionClosed,
    SessionOpened,
    load_journal_key,
)
from executor.models import Answer
from executor.testing.journal import SESSION, decision, judgment, prepared, verdict

CALM: dict[str, Answer] = {q.id: (False if q.answer == "bool" else 0) for q in GATE_TABLE.questions}


def _write_journal(path: Path) -> Path:
    with JournalWriter(path, session_id=SESSION, settings=JournalSettings(fsync="never")) as journal:
        journal.emit(SessionOpened(trust=1))
        journal.emit(prepared("a1", "rm -rf build"))
        journal.emit(prepared("a2", "ls"))
        journal.emit(judgment("j1", "a1", {**CALM, "destructive": 2}, table=GATE_TABLE))
        journal.emit(judgment("j2", "a2", CALM, table=GATE_TABLE))
        journal.emit(decision("a2", "allow", judgment_ids=("j2",)))
        journal.emit(decision("a1", "deny", judgment_ids=("j1",)))
        journal.emit(prepared("a3", "sudo ls"))
        journal.emit(verdict("a3", "deny", static_only=True))
        journal.emit(decision("a3", "deny"))
        journal.emit(decision("a4", "allow", judgment_ids=("j404",)))
        journal.emit(SessionClosed())
    return path


def _invoke(args: list[str], home: Path, env: dict[str, str] | None = None) -> Any:
    runner = CliRunner()
    # The console script moves a command's --json to the root option; do the same here.
    argv = hoist_json(args)
    return runner.invoke(app, argv, env={"EXECUTOR_HOME": str(home), **(env or {})}, catch_exceptions=False)


def test_json_report_shape(tmp_path: Path, home: Path) -> None:
    """--json (global) prints one object with outcome, counts, changes, static-only, unsupported and errors."""
    journal = _write_journal(tmp_path / "journal.ndjson")
    result = _invoke(["--json", "replay", str(journal), "--trust", "2"], home)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["outcome"] == "completed" and data["exit_code"] == 0 and data["journal_errors"] is False
    assert (data["mode"], data["trust"], data["policy"], data["provider_calls"]) == ("policy", 2, None, 0)
    assert (data["lines"], data["records"], data["errors"]) == (12, 12, [])
    assert (data["replayed"]["unchanged"], data["replayed"]["changed"]) == (1, 1)
    assert data["replayed"]["changes"] == [
        {
            "action_id": "a1",
            "line": 7,
            "old": "deny",
            "new": "ask",
            "why": "trust 1->2; judgment j1 deny->ask",
            "approval": None,
            "note": "would now need an approval; replay asks nobody and grants none",
        }
    ]
    assert data["static_only"] == [{"action_id": "a3", "line": 10, "decision": "deny", "rules": []}]
    assert [(u["kind"], u["ref"], u["line"]) for u in data["unsupported"]] == [("decision", "a4", 11)]
    assert data["drift"] == []


def test_local_json_flag_after_the_subcommand(tmp_path: Path, home: Path) -> None:
    """--json given after `replay` works like the global one."""
    journal = _write_journal(tmp_path / "journal.ndjson")
    result = _invoke(["replay", str(journal), "--json"], home)
    assert result.exit_code == 0
    assert json.loads(result.stdout)["replayed"]["unchanged"] == 2


def test_table_output_for_people(tmp_path: Path, home: Path) -> None:
    """Without --json the report is a set of readable tables."""
    journal = _write_journal(tmp_path / "journal.ndjson")
    result = _invoke(["replay", str(journal), "--trust", "2"], home)
    assert result.exit_code == 0
    out = result.stdout
    assert "mode policy, trust 2, policy (recorded verdicts)" in out
    assert "replayed: 1 unchanged, 1 changed; static-only: 1; unsupported: 1; provider calls: 0" in out
    assert "changed decisions" in out and "static-only (floor verdicts, never replayable)" in out
    changed_row = next(line for line in out.splitlines() if line.strip().startswith("7 "))
    assert changed_row.split()[:4] == ["7", "a1", "deny", "ask"]
    assert "judgment j404 is not in the journal" in out


def test_corrupt_lines_are_listed_and_escaped(tmp_path: Path, home: Path) -> None:
    """Refused lines appear by number; terminal escapes from the journal are shown escaped, never raw."""
    journal = _write_journal(tmp_path / "journal.ndjson")
    with JournalWriter(journal, session_id=SESSION, settings=JournalSettings(fsync="never")) as more:
        more.emit(decision("evil\x1b]52;c;cHdu\x07", "allow", judgment_ids=("j9",)))
    with journal.open("ab") as raw:
        raw.write(b'{"v": 1, "seq": NaN}\n{"cut')
    result = _invoke(["replay", str(journal)], home)
    assert result.exit_code == 0
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert "evil\\x1b]52;c;cHdu\\x07" in result.stdout
    assert "refused journal lines" in result.stdout
    data = json.loads(_invoke(["replay", str(journal), "--json"], home).stdout)
    assert data["outcome"] == "completed" and data["journal_errors"] is True and data["exit_code"] == 0
    assert [(e["line"], e["code"]) for e in data["errors"]] == [(14, "non_finite"), (15, "truncated")]


def test_nothing_valid_exits_nonzero(tmp_path: Path, home: Path) -> None:
    """A journal with no valid record reports its errors and exits 2."""
    journal = tmp_path / "bad.ndjson"
    journal.write_bytes(b"\xef\xbb\xbf{}\nnot json\n" + b"[" * 50_000 + b"\n")
    result = _invoke(["--json", "replay", str(journal)], home)
    assert result.exit_code == 2
    data = json.loads(result.stdout)
    assert data["outcome"] == "error" and data["exit_code"] == 2 and "no valid record" in data["error"]
    assert [(e["line"], e["code"]) for e in data["errors"]] == [(1, "bom"), (2, "invalid_json"), (3, "too_deep")]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mode", "live"], "--mode 'live' is not one of: policy, reevaluate"),
        (["--trust", "5"], "--trust 5 is not one of 0, 1, 2, 3"),
        (["--policy", "/nonexistent/p.toml"], "p.toml"),
    ],
)
def test_bad_usage_exits_2(tmp_path: Path, home: Path, args: list[str], message: str) -> None:
    """A bad mode, trust level or policy file exits 2 with an error naming it."""
    journal = _write_journal(tmp_path / "journal.ndjson")
    result = _invoke(["--json", "replay", str(journal), *args], home)
    assert result.exit_code == 2
    data = json.loads(result.stdout)
    assert data["outcome"] == "error" and message in data["error"]


def test_missing_journal_exits_2(tmp_path: Path, home: Path) -> None:
    """A journal path that does not exist exits 2 naming it."""
    result = _invoke(["--json", "replay", str(tmp_path / "nope.ndjson")], home)
    assert result.exit_code == 2
    assert "nope.ndjson" in json.loads(result.stdout)["error"]


def test_policy_file_changes_decisions(tmp_path: Path, home: Path) -> None:
    """--policy applies the shipped default policy to the recorded actions."""
    journal = _write_journal(tmp_path / "journal.ndjson")
    policy = Path(__file__).resolve().parents[2] / "policy" / "default.toml"
    data = json.loads(_invoke(["--json", "replay", str(journal), "--policy", str(policy)], home).stdout)
    assert data["policy"] == "default"
    assert data["replayed"]["unchanged"] + data["replayed"]["changed"] == 2


def test_a_replayed_policy_may_extend_a_shipped_one_and_static_only_decisions_are_re_decided(
    tmp_path: Path, home: Path
) -> None:
    """A policy file outside every policy folder that says extends = "default" loads (it was exit 2: "default.toml
    does not exist"), and the static-only deny of `sudo ls` is re-decided under it: the new policy only asks, so the
    judges (never asked then) would decide, and it is unsupported, not listed under the old policy's rule."""
    journal = _write_journal(tmp_path / "journal.ndjson")
    mine = tmp_path / "elsewhere" / "mine.toml"
    mine.parent.mkdir()
    mine.write_text(
        'extends = "default"\n[[command]]\nname = "no-rm"\ndecision = "deny"\njustification = "j"\n'
        'prefix = ["rm"]\nexamples.match = ["rm -rf build"]\n'
    )
    result = _invoke(["--json", "replay", str(journal), "--policy", str(mine)], home)
    assert result.exit_code == 0, result.stdout
    data = json.loads(result.stdout)
    assert data["policy"] == "mine" and data["static_only"] == []
    assert data["replayed"]["unchanged"] == 2, data  # a1 (deny), a2 (allow)
    (a3,) = [item for item in data["unsupported"] if item["ref"] == "a3"]
    assert "privilege-change" in a3["reason"] and "never asked" in a3["reason"]


class _ChatServer:
    """A chat-completions endpoint on 127.0.0.1 that answers gate questions from the material's command."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                outer.requests.append(body)
                user = json.loads(body["messages"][-1]["content"])
                answers = {q["id"]: (False if q["answer"] == "bool" else 0) for q in user["questions"]}
                if user["material"].get("subject") == "a2":
                    answers["exfiltration"] = 3
                reply = {"choices": [{"message": {"role": "assistant", "content": json.dumps(answers)}}]}
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"


@pytest.fixture
def chat_server() -> Iterator[_ChatServer]:
    server = _ChatServer()
    server.thread.start()
    try:
        yield server
    finally:
        server.server.shutdown()
        server.server.server_close()
        server.thread.join(timeout=5)


def test_reevaluate_asks_the_configured_openai_judge(tmp_path: Path, home: Path, chat_server: _ChatServer) -> None:
    """Reevaluate makes one live call per replayed judgment to the configured endpoint and reports the drift."""
    journal = _write_journal(tmp_path / "journal.ndjson")
    env = {"EXECUTOR_GATE__JUDGE__PROVIDER": "openai", "EXECUTOR_GATE__JUDGE__BASE_URL": chat_server.base_url}
    policy_mode = _invoke(["--json", "replay", str(journal)], home, env)
    assert json.loads(policy_mode.stdout)["provider_calls"] == 0
    assert chat_server.requests == []
    result = _invoke(["--json", "replay", str(journal), "--mode", "reevaluate"], home, env)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["provider_calls"] == 2 == len(chat_server.requests)
    assert [(d["judgment_id"], d["question_id"], d["recorded"], d["fresh"]) for d in data["drift"]] == [
        ("j2", "exfiltration", 0, 3),
        ("j1", "destructive", 2, 0),
    ]
    assert sorted((c["action_id"], c["old"], c["new"]) for c in data["replayed"]["changes"]) == [
        ("a1", "deny", "allow"),
        ("a2", "allow", "deny"),
    ]


def test_replay_runs_from_the_console_entry_point(tmp_path: Path, home: Path) -> None:
    """`python -m executor.cli replay` works end to end as a subprocess."""
    journal = _write_journal(tmp_path / "journal.ndjson")
    done = subprocess.run(
        [sys.executable, "-m", "executor.cli", "--json", "replay", str(journal)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "EXECUTOR_HOME": str(home)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["records"] == 12


def _signed_denied_journal(home: Path, path: Path) -> Path:
    """A journal this home signed: an action statically denied, never approved, never run."""
    key = load_journal_key(home, create=True)
    with JournalWriter(path, session_id=SESSION, settings=JournalSettings(fsync="never"), key=key) as journal:
        journal.emit(SessionOpened(trust=1))
        journal.emit(prepared("a1", "sudo rm -rf /"))
        journal.emit(verdict("a1", "deny", static_only=True))
        journal.emit(decision("a1", "deny"))
        journal.emit(SessionClosed())
    return path


def test_forged_approval_and_execution_of_a_denied_action_are_reported(tmp_path: Path, home: Path) -> None:
    """Lines forged after the fact (an approval and an execution of a denied action) are refused by line number."""
    journal = _signed_denied_journal(home, tmp_path / "journal.ndjson")
    lines = journal.read_bytes().splitlines(keepends=True)
    forged = [
        ApprovalRequested(seq=4, session_id=SESSION, approval_id="ap1", action_id="a1", identity_hash="x" * 64),
        ApprovalResolved(seq=5, session_id=SESSION, approval_id="ap1", outcome="approved"),
        ExecutionStarted(seq=6, session_id=SESSION, action_id="a1"),
    ]
    journal.write_bytes(b"".join([*lines[:4], *(f.model_dump_json().encode() + b"\n" for f in forged), *lines[4:]]))
    result = _invoke(["--json", "replay", str(journal)], home)
    assert result.exit_code == 1, result.output  # a CI step checking the status sees the forgery
    data = json.loads(result.stdout)
    assert data["verification"] == "verified" and data["outcome"] == "failed" and data["journal_errors"]
    assert data["exit_code"] == 1
    assert [(e["line"], e["code"]) for e in data["errors"]] == [(5, "unsigned"), (6, "unsigned"), (7, "unsigned")]
    text = _invoke(["replay", str(journal)], home).stdout
    # A journal with forged lines is not announced as verified: the headline says it failed.
    assert text.startswith("journal FAILED VERIFICATION: checked with this home's key: 3 line(s) failed authentication")
    assert data["failed_authentication"] == 3


def test_a_journal_from_another_home_is_replayed_explicitly_unverified(tmp_path: Path, home: Path) -> None:
    """Without this home's key the replay still runs, and says first that nothing was verified."""
    journal = _signed_denied_journal(tmp_path / "other-home", tmp_path / "journal.ndjson")
    result = _invoke(["replay", str(journal)], home)
    assert result.exit_code == 0
    assert result.stdout.startswith("journal UNVERIFIED: this home has no journal key")
    load_journal_key(home, create=True)
    data = json.loads(_invoke(["--json", "replay", str(journal)], home).stdout)
    assert data["verification"] == "unverified" and "another home" in data["verification_note"]


@pytest.mark.parametrize("source", ["/dev/zero", "fifo", "dir"])
def test_replay_refuses_what_is_not_a_regular_file_at_once(tmp_path: Path, home: Path, source: str) -> None:
    """A device, a pipe with no writer or a folder is refused with one line and exit 2, never read forever."""
    path = Path(source)
    if source == "fifo":
        path = tmp_path / "fifo"
        os.mkfifo(path)
    elif source == "dir":
        path = tmp_path
    completed = subprocess.run(
        [sys.executable, "-m", "executor.cli", "replay", str(path)],
        env={**os.environ, "EXECUTOR_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 2
    error = completed.stderr.strip()
    assert len(error.splitlines()) == 1 and "Traceback" not in completed.stderr
    assert ("not a regular file" in error) or ("Is a directory" in error)


def test_replay_of_a_pipe_from_stdin_ends_with_exit_2(home: Path) -> None:
    """`yes | executor replay /dev/stdin` ends at once with a one-line error."""
    with subprocess.Popen(["yes"], stdout=subprocess.PIPE) as producer:
        try:
            completed = subprocess.run(
                [sys.executable, "-m", "executor.cli", "replay", "/dev/stdin"],
                stdin=producer.stdout,
                env={**os.environ, "EXECUTOR_HOME": str(home)},
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        finally:
            producer.kill()
    assert completed.returncode == 2
    assert "not a regular file" in completed.stderr and len(completed.stderr.strip().splitlines()) == 1


def test_replay_refuses_a_journal_over_max_file_bytes(tmp_path: Path, home: Path) -> None:
    """A journal larger than journal.max_file_bytes is refused naming the setting; raising it reads the file."""
    journal = tmp_path / "big.ndjson"
    _write_journal(journal)
    with journal.open("ab") as raw:
        raw.write(b"\n" * (2 * 1024 * 1024))
    result = _invoke(["--json", "replay", str(journal)], home, env={"EXECUTOR_JOURNAL__MAX_FILE_BYTES": "1m"})
    assert result.exit_code == 2
    assert "over journal.max_file_bytes (1048576); raise the limit" in json.loads(result.stdout)["error"]
    result = _invoke(["--json", "replay", str(journal)], home, env={"EXECUTOR_JOURNAL__MAX_FILE_BYTES": "4m"})
    report = json.loads(result.stdout)
    assert result.exit_code == 0 and report["records"] == 12 and report["journal_errors"] is True
    # Two million empty lines are two million refusals: the report lists journal.max_issues of them.
    assert (len(report["errors"]), report["errors_omitted"]) == (1000, 2 * 1024 * 1024 - 1000)


def test_max_file_bytes_default_and_bounds() -> None:
    """journal.max_file_bytes defaults to 1 GiB and refuses values below 1 MiB at load."""
    assert JournalSettings().max_file_bytes == 1024**3
    with pytest.raises(ConfigError, match=r"journal.max_file_bytes: .*greater than or equal"):
        load_settings(overrides={"journal": {"max_file_bytes": 1000}})


def test_a_line_nested_200000_deep_is_refused_by_number_and_the_rest_replays(tmp_path: Path, home: Path) -> None:
    """A journal line nested 200,000 levels deep among valid ones is listed as refused (too_deep) by its line number;
    the valid records still replay."""
    journal = _write_journal(tmp_path / "journal.ndjson")
    lines = journal.read_bytes().splitlines(keepends=True)
    journal.write_bytes(b"".join(lines[:3]) + b'{"v": 1, "x": ' + b"[" * 200_000 + b"\n" + b"".join(lines[3:]))
    result = _invoke(["--json", "replay", str(journal)], home)
    data = json.loads(result.stdout)
    assert data["journal_errors"] is True, data
    assert [(e["line"], e["code"]) for e in data["errors"]] == [(4, "too_deep")]
    assert "nests deeper than journal.max_depth (32)" in data["errors"][0]["message"]


@pytest.mark.parametrize(
    "text",
    ["a = " + "[" * 100_000, "a" + ".a" * 100_000 + " = 1", "[rules" + ".a" * 100_000 + "]"],
    ids=["arrays", "dotted-keys", "header"],
)
def test_a_policy_file_nested_100000_deep_exits_2_naming_it(tmp_path: Path, home: Path, text: str) -> None:
    """replay --policy with a policy file nested 100,000 deep (arrays, dotted keys, a table header) exits 2 with
    one error naming the file, quickly (tomllib never sees it)."""
    journal = _write_journal(tmp_path / "journal.ndjson")
    policy = tmp_path / "deep.toml"
    policy.write_text(text + "\n")
    result = _invoke(["--json", "replay", str(journal), "--policy", str(policy)], home)
    assert result.exit_code == 2
    data = json.loads(result.stdout)
    assert data["outcome"] == "error" and str(policy) in data["error"] and "nested too deeply" in data["error"]
