"""`executor agent build` end to end, as a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def _executor(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "executor.cli", *args], capture_output=True, text=True, timeout=300, env=env, check=False
    )


def test_agent_build_prints_the_binary(tmp_path: Path) -> None:
    """`agent build --json` builds into <home>/agent and reports the path; a bad compiler exits 125."""
    env = {"PATH": "/usr/bin:/bin", "EXECUTOR_HOME": str(tmp_path)}
    done = _executor("--json", "agent", "build", env=env)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["outcome"] == "completed" and data["exit_code"] == 0 and data["sanitize"] is False
    assert Path(data["path"]).parent == tmp_path / "agent" and Path(data["path"]).is_file()
    bad = _executor("agent", "build", env={**env, "EXECUTOR_AGENT__CC": "/nonexistent/cc"})
    assert bad.returncode == 125 and "agent.cc" in bad.stderr
