"""`executor write` end to end (in-process and over a running service): content from stdin or a file, the diff in the
result, and the gate's codes."""

from __future__ import annotations

from pathlib import Path

import pytest

from executor.testing.cli import cli, named_session

pytestmark = [pytest.mark.docker, pytest.mark.timeout(180)]

WRITE_KEYS = {"outcome", "exit_code", "path", "artifact_id", "action_id", "text", "write", "session"}


def test_write_then_replace_shows_the_diff_and_lands_in_the_session(either_home: Path, tmp_path: Path) -> None:
    """A write from stdin creates the file, one from --from replaces it with a diff, and the session sees the bytes;
    in-process and over a running service alike."""
    home = either_home
    with named_session(home) as name:
        created = cli(home, "write", "--session", name, "--create", "--json", "a.txt", stdin=b"one\ntwo\n")
        assert created.code == 0, created.stderr
        data = created.json()
        assert set(data) == WRITE_KEYS
        assert (data["outcome"], data["write"]["created"], data["write"]["state"]["size"]) == ("completed", True, 8)
        assert "+one\n+two" in data["text"]

        source = tmp_path / "new.txt"
        source.write_bytes(b"one\nTWO\n")
        replaced = cli(home, "write", "--session", name, "a.txt", "--from", str(source))
        assert replaced.code == 0
        assert replaced.stdout.startswith("[replaced /workspace/a.txt: 8 bytes")
        assert "-two\n+TWO" in replaced.stdout

        shown = cli(home, "exec", "--session", name, "--", "cat a.txt")
        assert "one\nTWO" in shown.stdout

        outside = cli(home, "write", "--session", name, "--json", "/tmp/x.txt", stdin=b"x")
        assert outside.code == 75 and outside.json()["outcome"] == "blocked" and outside.json()["write"] is None

        denied = cli(home, "write", "--session", name, "--json", ".bashrc", stdin=b"x")
        assert denied.code == 77 and denied.json()["outcome"] == "denied"

        rejected = cli(home, "write", "--session", name, "--json", "dir/", stdin=b"x")
        assert rejected.code == 2
        assert rejected.json()["outcome"] == "error" and "names a directory" in rejected.json()["error"]

        no_folder = cli(home, "write", "--session", name, "--json", "absent/b.txt", stdin=b"x")
        assert no_folder.code == 1
        # a refused write says which error, as the Python API and MCP do
        refusal = {"error": "not_found", "errno": 2}
        assert (no_folder.json()["outcome"], no_folder.json()["write"]) == ("error", refusal)
        assert no_folder.json()["text"].startswith("[write refused: directory /workspace/absent does not exist")

        missing = cli(home, "write", "--session", name, "a.txt", "--from", str(tmp_path / "absent"))
        assert missing.code == 2 and "--from" in missing.stderr


def test_a_write_ask_is_answered_at_the_terminal(either_home: Path, tmp_path: Path) -> None:
    """With stdin and stderr on a terminal (the content from --from), an ask shows the diff there and 'y' writes."""
    import os
    import pty
    import select
    import subprocess
    import sys
    import time

    from executor.testing.cli import cli_env

    home = either_home
    source = tmp_path / "x.txt"
    source.write_bytes(b"asked\n")
    with named_session(home) as name:
        assert cli(home, "session", "start", "--name", name).code == 0
        master, slave = pty.openpty()
        proc = subprocess.Popen(
            [sys.executable, "-m", "executor.cli", "write", "--session", name, "/tmp/x.txt", "--from", str(source)],
            stdin=slave,
            stdout=subprocess.PIPE,
            stderr=slave,
            env=cli_env(home),
        )
        os.close(slave)
        shown = b""
        try:
            deadline = time.monotonic() + 120
            while b"[y/N]" not in shown:
                assert time.monotonic() < deadline and proc.poll() is None, shown
                if select.select([master], [], [], 0.5)[0]:
                    shown += os.read(master, 4096)
            os.write(master, b"y\n")
            out, _ = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
            os.close(master)
        assert b"+asked" in shown
        assert proc.returncode == 0 and out.startswith(b"[created /tmp/x.txt: 6 bytes"), out
        assert cli(home, "exec", "--session", name, "--", "cat /tmp/x.txt").stdout == "asked\n"
