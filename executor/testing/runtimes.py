"""OCI runtimes for tests: the backend suites run under runc and under gVisor (runsc).

A test whose runtime the engine lacks is skipped, except under CI (``CI=true``, which ``.ci/run`` sets after it
installs and registers runsc): there it fails, so a missing runsc is never silently untested.
"""

from __future__ import annotations

import os
from typing import Final

import pytest

__all__ = ["MISSING_RUNTIME", "RUNTIMES", "require_runtime"]

RUNTIMES: Final[tuple[str, ...]] = ("runc", "runsc")
"""Every runtime a profile may ask for."""


MISSING_RUNTIME: Final = "the Docker engine has no runtime"
"""How every skip for a missing runtime begins (the suite's summary counts them by it)."""

INSTALL_RUNSC: Final = "just runsc"
"""The one command that installs gVisor's runsc (Debian's package) and registers it with the engine."""


def require_runtime(runtime: str, available: frozenset[str]) -> None:
    """Skip (fail under CI) a test whose ``runtime`` is not among the engine's ``available`` runtimes."""
    if runtime in available:
        return
    message = f"{MISSING_RUNTIME} {runtime!r}: install and register it with `{INSTALL_RUNSC}` (as root)"
    if os.environ.get("CI") == "true":
        pytest.fail(message + "; under CI it must be there", pytrace=False)
    pytest.skip(message)
