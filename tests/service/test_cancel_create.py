"""A session create cancelled by Ctrl-C removes what it made: in process, and through the service (issue 31 item 6a)."""

from __future__ import annotations

import contextlib
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from executor.sandbox.docker.backend import home_identity
from executor.testing.cli import cli_env, serving

pytestmark = [pytest.mark.docker, pytest.mark.timeout(240)]

_NO_POOL = {"EXECUTOR_PROFILES__DEFAULT__POOL__SERVICE_SIZE": "0"}
"""Every session is created on demand (a warm one would be claimed, not created); the CLI's environment matches the
service's, as it must for the thin path to take the line."""
_APPEAR_S = 90.0
_GONE_S = 30.0


def _docker(*args: str) -> list[str]:
    listed = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=30, check=True)
    return listed.stdout.split()


def _containers(home: Path) -> list[str]:
    """Containers (any state) of ``home``, found by the executor's home label, warm-pool ones left out."""
    rows = subprocess.run(
        ["docker", "ps", "-a", "--filter", f"label=executor.home={home_identity(home)}", "--format",
         '{{.ID}}/{{.Label "executor.pool"}}'],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout.split()  # fmt: skip
    return [row.split("/")[0] for row in rows if row.endswith("/")]


def _volumes(home: Path) -> list[str]:
    return _docker("volume", "ls", "-q", "--filter", f"label=executor.home={home_identity(home)}")


@pytest.fixture
def short_home() -> Iterator[Path]:
    """A private home with a short path (a unix socket path is at most 107 bytes); its leftovers are removed."""
    home = Path(f"/tmp/dk-cc-{secrets.token_hex(4)}")
    home.mkdir()
    try:
        yield home
    finally:
        for container in _containers(home):
            subprocess.run(["docker", "rm", "-f", container], capture_output=True, timeout=60, check=False)
        for volume in _volumes(home):
            subprocess.run(["docker", "volume", "rm", "-f", volume], capture_output=True, timeout=60, check=False)
        subprocess.run(["rm", "-rf", str(home)], timeout=60, check=False)


def _interrupt_while_creating(home: Path, args: tuple[str, ...], delay_s: float) -> subprocess.CompletedProcess[str]:
    """Run the CLI, send SIGINT ``delay_s`` after the session's container appears, and wait for it to exit."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "executor.cli", *args],
        env=cli_env(home, _NO_POOL),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + _APPEAR_S
        while not _containers(home):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the session's container never appeared"
            time.sleep(0.02)
        time.sleep(delay_s)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _wait_gone(home: Path) -> list[str]:
    deadline = time.monotonic() + _GONE_S
    while (left := _containers(home)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.mark.parametrize("delay_s", [0.0, 0.3])
@pytest.mark.parametrize(
    "args", [("exec", "--", "sleep 1"), ("session", "start")], ids=["exec", "session-start"]
)  # fmt: skip
@pytest.mark.parametrize("serve", [False, True], ids=["in-process", "service"])
def test_sigint_during_create_leaves_no_container(
    base_image: str, short_home: Path, serve: bool, args: tuple[str, ...], delay_s: float
) -> None:
    """Ctrl-C while a session is being created ends the CLI with 130 and leaves no container of the home (nor, for
    an unnamed session, its volume once the service is gone)."""
    with serving(short_home, profiles__default__pool__service_size="0") if serve else contextlib.nullcontext():
        ran = _interrupt_while_creating(short_home, args, delay_s)
        assert "Traceback" not in ran.stderr, ran.stderr
        if ran.returncode == 0 or ran.stdout.startswith("s-"):
            # The create (and the command) finished before the signal arrived: nothing was cancelled.
            pytest.skip("the create finished before SIGINT arrived")
        assert ran.returncode == 130, (ran.returncode, ran.stderr)
        assert _wait_gone(short_home) == []
    assert _volumes(short_home) == []
