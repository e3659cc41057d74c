"""A real ``executor serve`` on the real engine for the client tests, with a small live-stream memory so that a
slow reader's bytes go through the service's spool file."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.service.conftest import ServiceProcess, service_env

STREAM_MEMORY = 64 * 1024
"""``service.stream_buffer_bytes`` of the client tests' service: far below what the tests stream."""


@pytest.fixture(scope="module")
def spooling_service(base_image: str) -> Iterator[ServiceProcess]:
    """One service for a module, holding at most STREAM_MEMORY bytes of a live stream in memory."""
    home = Path(tempfile.mkdtemp(prefix="exc-", dir="/tmp"))
    service = ServiceProcess(home, service_env(home, service__stream_buffer_bytes=str(STREAM_MEMORY)))
    service.start()
    try:
        yield service
    finally:
        service.stop()
        subprocess.run(
            [sys.executable, "-m", "executor.cli", "session", "gc"],
            env=service_env(home),
            capture_output=True,
            timeout=120,
            check=False,
        )
        shutil.rmtree(home, ignore_errors=True)
