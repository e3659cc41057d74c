"""The README's examples run as they stand, against the real engine; its API table names exactly the service's
routes."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from executor.testing.readme import api_table_routes, app_routes, service_curl_block
from tests.service.conftest import ServiceProcess, service_env

README = Path(__file__).resolve().parent.parent / "README.md"


def _python_example() -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Python API", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None, "the README's Python API section has no python block"
    return match.group(1)


@pytest.mark.docker
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


def test_readme_api_table_names_every_route_of_the_app() -> None:
    """Every route in the service's API table exists in the app with that method, and every app route is there."""
    documented = api_table_routes(README.read_text(encoding="utf-8"))
    assert documented == app_routes()


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_readme_curl_quick_start_runs(base_image: str, tmp_path: Path) -> None:
    """The service quick start, run by bash against a real service: every curl succeeds, the folder comes back,
    the exec and the followed task stream their lines, and the session is removed."""
    block = service_curl_block(README.read_text(encoding="utf-8"))
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "hello.txt").write_text("hello\n")
    home = Path(tempfile.mkdtemp(prefix="exr-", dir="/tmp"))  # a unix socket path is at most 107 bytes
    service = ServiceProcess(home, service_env(home))
    service.start()
    try:
        env = service_env(home)
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=240,
            env=env,
            check=False,
        )
    finally:
        service.stop()
        gc = [sys.executable, "-m", "executor.cli", "session", "gc"]
        subprocess.run(gc, env=service_env(home), timeout=120, capture_output=True, check=False)
        shutil.rmtree(home, ignore_errors=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert '"status":"ok"' in done.stdout
    assert (tmp_path / "back" / "proj" / "hello.txt").read_text() == "hello\n"
    assert done.stdout.count('"kind":"chunk"') >= 1 and '"kind":"result"' in done.stdout
    assert '"task_id":"t1"' in done.stdout and "3\\n" in done.stdout
    assert '"NotFound"' not in done.stdout and '"ValidationError"' not in done.stdout
