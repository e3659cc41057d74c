"""docker-py's errors are translated once, and an unreachable engine says how to start one."""

from __future__ import annotations

import inspect
from pathlib import Path

import docker.errors as de
import pytest
import requests
import trio

from executor.config import load_settings
from executor.errors import EngineError, EngineUnavailable, ImageError, SessionNotFound
from executor.sandbox.base import open_backend
from executor.sandbox.docker._errors import DOCKER_ERRORS, translate


def test_every_docker_error_class_has_a_mapping() -> None:
    """Each exception class defined in docker.errors has its own entry in the mapping."""
    classes = [
        obj
        for _, obj in inspect.getmembers(de, inspect.isclass)
        if issubclass(obj, BaseException) and obj.__module__ == de.__name__
    ]
    assert classes
    missing = [c.__name__ for c in classes if c not in DOCKER_ERRORS]
    assert missing == []


def test_not_found_becomes_session_not_found() -> None:
    """A 404 from the engine becomes SessionNotFound carrying the engine's explanation."""
    response = requests.Response()
    response.status_code = 404
    exc = de.NotFound("404 Client Error", response=response, explanation="No such container: x")
    mapped = translate(exc, what="inspect x", base_url="unix:///s")
    assert isinstance(mapped, SessionNotFound)
    assert str(mapped) == "inspect x: engine said 404: No such container: x"


def test_specific_classes_win_over_their_bases() -> None:
    """ImageNotFound maps to ImageError although it derives from NotFound; a 500 is an EngineError."""
    response = requests.Response()
    response.status_code = 500
    assert isinstance(translate(de.ImageNotFound("gone"), what="w", base_url="u"), ImageError)
    assert isinstance(translate(de.APIError("boom", response=response), what="w", base_url="u"), EngineError)


def test_transport_failure_means_no_engine() -> None:
    """A refused connection becomes EngineUnavailable with the way to start an engine."""
    mapped = translate(requests.ConnectionError("refused"), what="ping", base_url="unix:///nowhere")
    assert isinstance(mapped, EngineUnavailable)
    assert "start one" in str(mapped)


async def test_unreachable_engine_is_one_clear_error(tmp_path: Path) -> None:
    """Opening a backend on a socket nobody serves raises EngineUnavailable naming the address and the fix."""
    settings = load_settings(
        overrides={
            "home": str(tmp_path),
            "docker": {"base_url": f"unix://{tmp_path}/docker.sock", "retry_wait_s": 0.01},
        }
    )
    with trio.fail_after(10), pytest.raises(EngineUnavailable) as caught:
        async with open_backend(settings):
            pass  # pragma: no cover
    assert str(caught.value).startswith(f"no Docker engine answers at unix://{tmp_path}/docker.sock")
    assert "systemctl start docker" in str(caught.value)
