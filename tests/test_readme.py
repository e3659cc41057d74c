"""The README's Python example runs as it stands, against the real engine."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"

pytestmark = pytest.mark.docker


def _python_example() -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Python API", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None, "the README's Python API section has no python block"
    return match.group(1)


def test_readme_python_example_runs(base_image: str, tmp_path: Path) -> None:
    """The example prints a completed bash result, a recovered page, a search hit and a completed write."""
    script = tmp_path / "example.py"
    script.write_text(_python_example(), encoding="utf-8")
    env = {
        **os.environ,
        "EXECUTOR_HOME": str(tmp_path / "home"),
        "EXECUTOR_AGENT__BUILD_DIR": str(tmp_path / "agent"),
    }
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=240, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "completed 0"
    assert "1000" in done.stdout and "done" in done.stdout
    assert "990: 990" in done.stdout
    assert lines[-1] == "completed"
