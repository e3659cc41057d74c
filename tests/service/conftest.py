"""A real ``executor serve`` subprocess on the real engine, with its own EXECUTOR_HOME, for the service tests."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from executor.client import Client

TOKEN_A = "svc-token-a-0123456789abcdef"
TOKEN_B = "svc-token-b-0123456789abcdef"
_START_BOUND_S = 120.0


class ServiceProcess:
    """One ``executor serve`` process: its home, socket, TCP url (when asked) and stderr."""

    def __init__(self, home: Path, env: dict[str, str]) -> None:
        self.home = home
        self.socket = home / "service.sock"
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.url: str | None = None
        self.stderr: list[str] = []

    def start(self) -> None:
        """Start it (again, after a stop) and wait until it listens (bounded)."""
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()
        self.stderr = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "executor.cli", "serve"],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        listening = threading.Event()
        assert self.proc.stderr is not None
        pipe = self.proc.stderr

        def pump() -> None:
            for raw in pipe:
                line = raw.decode(errors="replace")
                self.stderr.append(line)
                if "listening on" in line:
                    for part in line.split("listening on", 1)[1].split(","):
                        part = part.strip()
                        if part.startswith("http://") and "unix:" not in part:
                            self.url = part.rstrip("/")
                    listening.set()

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + _START_BOUND_S
        while not listening.is_set():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"executor serve did not start: {''.join(self.stderr)}")
            listening.wait(0.1)

    def client(self, **kwargs: Any) -> Client:
        """A client on the unix socket."""
        return Client(socket=self.socket, **kwargs)

    def tcp_client(self, token: str | None) -> Client:
        """A client over TCP with ``token``."""
        assert self.url is not None, "the service was not started with TCP"
        return Client(self.url, token=token)

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the service."""
        assert self.proc is not None
        self.proc.send_signal(signum)

    def wait(self, timeout: float) -> int:
        """Its exit code (bounded)."""
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it lingers; the stderr pipe is closed."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


def service_env(home: Path, **settings: str) -> dict[str, str]:
    """The environment of a service rooted in ``home`` with ``EXECUTOR_<KEY>`` settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EXECUTOR_")}
    env["EXECUTOR_HOME"] = str(home)
    for key, value in settings.items():
        env[f"EXECUTOR_{key.upper()}"] = value
    return env


def _remove_sessions(home: Path) -> None:
    """Remove every container and volume a test home's service left (its sessions carry our labels)."""
    subprocess.run(
        [sys.executable, "-m", "executor.cli", "session", "gc"],
        env=service_env(home),
        capture_output=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def service_factory(base_image: str) -> Iterator[Any]:
    """Make services with their own homes (short paths: a unix socket path is at most 107 bytes)."""
    made: list[ServiceProcess] = []
    homes: list[Path] = []

    def make(*, home: Path | None = None, **settings: str) -> ServiceProcess:
        if home is None:
            home = Path(tempfile.mkdtemp(prefix="exs-", dir="/tmp"))
            homes.append(home)
        service = ServiceProcess(home, service_env(home, **settings))
        made.append(service)
        return service

    yield make
    for service in made:
        service.stop()
    for home in {service.home for service in made}:
        _remove_sessions(home)
    for home in homes:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def shared_service(base_image: str) -> Iterator[ServiceProcess]:
    """One service (socket and TCP with two tokens) shared by a module's tests."""
    home = Path(tempfile.mkdtemp(prefix="exs-", dir="/tmp"))
    service = ServiceProcess(
        home,
        service_env(
            home,
            service__tcp="true",
            service__port="0",
            service__tokens=f'["{TOKEN_A}", "{TOKEN_B}"]',
            service__approval_timeout_s="60",
        ),
    )
    service.start()
    try:
        yield service
    finally:
        service.stop()
        _remove_sessions(home)
        shutil.rmtree(home, ignore_errors=True)


def new_name() -> str:
    """A session name unique to one test."""
    return f"svct-{secrets.token_hex(4)}"
