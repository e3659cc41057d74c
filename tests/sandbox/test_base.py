"""The backend contract's pure parts: the backend registry, the session model, the public names."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

import executor.sandbox.base as base
from executor.config import Settings, load_settings
from executor.errors import ConfigError
from executor.sandbox.base import Backend, SessionInfo, backend_names, open_backend, register_backend


def test_session_info_is_frozen_and_strict() -> None:
    """SessionInfo rejects unknown fields and cannot be mutated."""
    fields: dict[str, object] = {
        "id": "s-0123456789ab",
        "name": None,
        "container_id": "c",
        "image": "i",
        "profile": "default",
        "state": "running",
        "created_at": datetime.now(UTC),
        "owner": None,
        "transport": "socket",
        "labels": {},
    }
    info = SessionInfo.model_validate(fields)
    with pytest.raises(ValidationError):
        SessionInfo.model_validate({**fields, "extra": 1})
    with pytest.raises(ValidationError):
        info.id = "s-000000000000"  # type: ignore[misc]  # frozen on purpose


def test_all_names_exist() -> None:
    """Every name in __all__ is defined and public."""
    for name in base.__all__:
        assert hasattr(base, name) and not name.startswith("_")


def test_docker_is_the_default_backend_and_the_contract_does_not_import_it() -> None:
    """The default backend is docker, registered by name: importing the contract loads no docker SDK."""
    assert load_settings().backend == "docker"
    assert "docker" in backend_names()
    code = "import sys, executor.sandbox.base; assert 'docker' not in sys.modules, 'docker loaded'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


async def test_an_unknown_backend_fails_with_the_known_names(tmp_path: Path) -> None:
    """Settings naming no registered backend fail when it is opened, and the message lists the known ones."""
    settings = load_settings(overrides={"home": str(tmp_path), "backend": "nope"})
    with pytest.raises(ConfigError, match=r"^no backend named 'nope'; known backends: .*\bdocker\b"):
        async with open_backend(settings):
            pass


@pytest.mark.parametrize("bad", ["", "Docker", "a b", "x" * 33, "../docker"])
def test_a_malformed_backend_name_is_refused_at_load(bad: str) -> None:
    """The backend setting is a short lowercase name; anything else fails when the settings load."""
    with pytest.raises(ConfigError, match="backend"):
        load_settings(overrides={"backend": bad})


class _Opened(Exception):
    """Raised by the test factory to show it was the one called, with the settings it got."""


async def _test_factory(settings: Settings) -> Backend:
    raise _Opened(settings.backend)


async def test_a_registered_backend_is_opened_by_name(tmp_path: Path) -> None:
    """register_backend adds a name that open_backend then uses; a name is never registered twice."""
    register_backend("test-registry", _test_factory)
    assert "test-registry" in backend_names()
    with pytest.raises(ValueError, match="already registered"):
        register_backend("test-registry", _test_factory)
    settings = load_settings(overrides={"home": str(tmp_path), "backend": "test-registry"})
    with pytest.raises(_Opened, match=r"^test-registry$"):
        async with open_backend(settings):
            pass


async def test_a_lazy_entry_is_imported_when_opened(tmp_path: Path) -> None:
    """A backend registered as 'module:attribute' is imported only when opened."""
    register_backend("test-lazy", f"{__name__}:_test_factory")
    settings = load_settings(overrides={"home": str(tmp_path), "backend": "test-lazy"})
    with pytest.raises(_Opened, match=r"^test-lazy$"):
        async with open_backend(settings):
            pass
