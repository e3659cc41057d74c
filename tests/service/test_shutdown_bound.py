"""SIGTERM ends ``executor serve`` within its grace whatever clients do (issue 31 item 6b)."""

from __future__ import annotations

import json
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from executor.sandbox.docker.backend import home_identity
from executor.testing.cli import cli_env

pytestmark = [pytest.mark.docker, pytest.mark.timeout(240)]

_GRACE_S = 1.0
_MARGIN_S = 12.0
"""Past the grace: the cancelled run's unwinding, the listener's close and the executor's own clean-up (removing the
unnamed session's container)."""


@pytest.fixture
def short_home() -> Iterator[Path]:
    """A private home with a short path (a unix socket path is at most 107 bytes); its leftovers are removed."""
    home = Path(f"/tmp/dk-sd-{secrets.token_hex(4)}")
    home.mkdir()
    try:
        yield home
    finally:
        label = f"label=executor.home={home_identity(home)}"
        for kind in (["ps", "-aq"], ["volume", "ls", "-q"]):
            listed = subprocess.run(["docker", *kind, "--filter", label], capture_output=True, text=True, timeout=30)
            for item in listed.stdout.split():
                rm = ["rm", "-f"] if kind[0] == "ps" else ["volume", "rm", "-f"]
                subprocess.run(["docker", *rm, item], capture_output=True, timeout=60, check=False)
        subprocess.run(["rm", "-rf", str(home)], timeout=60, check=False)


def _request(sock: socket.socket, method: str, path: str, body: dict[str, object]) -> None:
    data = json.dumps(body).encode()
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    )
    sock.sendall(head.encode() + data)


def _read_response(sock: socket.socket) -> dict[str, object]:
    raw = b""
    while b"\r\n\r\n" not in raw:
        raw += sock.recv(65536)
    head, _, rest = raw.partition(b"\r\n\r\n")
    length = int(
        next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    )
    while len(rest) < length:
        rest += sock.recv(65536)
    parsed = json.loads(rest[:length])
    assert isinstance(parsed, dict), parsed
    return parsed


def test_a_client_that_stops_reading_does_not_hold_shutdown_past_its_grace(base_image: str, short_home: Path) -> None:
    """An exec stream of a large output whose client never reads: SIGTERM still ends the service within
    ``service.shutdown_grace_s`` plus a small margin."""
    env = cli_env(
        short_home,
        {"EXECUTOR_SERVICE__SHUTDOWN_GRACE_S": str(_GRACE_S), "EXECUTOR_PROFILES__DEFAULT__POOL__SERVICE_SIZE": "0"},
    )
    log = short_home / "serve.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "executor.cli", "serve"], env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        deadline = time.monotonic() + 120
        while "listening on" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.05)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.connect(str(short_home / "service.sock"))
        _request(client, "POST", "/v1/sessions", {})
        created = _read_response(client)
        session = created["id"]
        _request(client, "POST", f"/v1/sessions/{session}/exec", {"command": "exec cat /dev/zero"})
        # Once the command runs, its output fills the socket's buffers at once: nothing here ever reads it.
        deadline = time.monotonic() + 60
        while "running" not in _status(short_home, env) and time.monotonic() < deadline:
            time.sleep(0.1)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        deadline = sent + _GRACE_S + _MARGIN_S
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        took = time.monotonic() - sent
        assert proc.poll() is not None, (
            f"executor serve still ran {took:.1f}s after SIGTERM (grace {_GRACE_S}s): {log.read_text(errors='replace')}"
        )
    finally:
        client.close()
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def _status(home: Path, env: dict[str, str]) -> str:
    """Whether the service reports a running command (its health's ``running`` count above zero)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(5)
        probe.connect(str(home / "service.sock"))
        probe.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        health = _read_response(probe)
    except OSError:
        return ""
    finally:
        probe.close()
    return "running" if int(str(health.get("running", 0))) > 0 else ""
