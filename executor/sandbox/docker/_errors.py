"""The one place where docker-py's and requests' errors become the executor's.

Every class defined in :mod:`docker.errors` has an entry in :data:`DOCKER_ERRORS` (a test fails when one is
missing); transport failures from ``requests`` (the engine's HTTP client) mean no engine answers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import docker.errors as de
import requests.exceptions as rex

from executor.errors import (
    EngineError,
    EngineUnavailable,
    ExecutorError,
    ImageError,
    SandboxError,
    SessionNotFound,
)

__all__ = ["DOCKER_ERRORS", "engine_unavailable", "translate"]

_Factory = Callable[[str], ExecutorError]

# Most specific first: translate() walks the exception's MRO, so a subclass entry wins over its base.
DOCKER_ERRORS: Final[dict[type[BaseException], _Factory]] = {
    de.ImageNotFound: ImageError,
    de.NotFound: SessionNotFound,
    de.APIError: EngineError,
    de.BuildError: ImageError,
    de.ImageLoadError: ImageError,
    de.InvalidRepository: ImageError,
    de.ContainerError: EngineError,
    de.StreamParseError: EngineError,
    de.NullResource: EngineError,
    de.InvalidArgument: EngineError,
    de.DeprecatedMethod: EngineError,
    de.InvalidVersion: EngineUnavailable,
    de.TLSParameterError: EngineUnavailable,
    de.InvalidConfigFile: EngineUnavailable,
    de.ContextException: EngineUnavailable,
    de.ContextAlreadyExists: EngineUnavailable,
    de.ContextNotFound: EngineUnavailable,
    de.MissingContextParameter: EngineUnavailable,
    de.DockerException: EngineError,
}
"""docker-py's error classes and the executor error each one becomes."""

_HOW_TO_START = (
    "start one (`sudo systemctl start docker`, or `sudo dockerd &`), or point DOCKER_HOST, the current Docker "
    "context or docker.base_url (EXECUTOR_DOCKER__BASE_URL) at a running engine"
)


def engine_unavailable(base_url: str, detail: str) -> EngineUnavailable:
    """The one 'no engine' error: what failed and how to get an engine."""
    return EngineUnavailable(f"no Docker engine answers at {base_url} ({detail}); {_HOW_TO_START}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:500]


def translate(exc: BaseException, *, what: str, base_url: str) -> ExecutorError:
    """Map a docker-py or requests error to the executor's tree; the caller raises it ``from exc``.

    Args:
        exc: the foreign error.
        what: the operation, for the message (``"inspect container executor-s-…"``).
        base_url: the engine address, for the 'no engine' message.
    """
    if isinstance(exc, ExecutorError):
        return exc
    if isinstance(exc, rex.ConnectionError | rex.Timeout | ConnectionError):
        return engine_unavailable(base_url, f"{what}: {_first_line(exc)}")
    if isinstance(exc, de.DockerException) and "Error while fetching server API version" in str(exc):
        return engine_unavailable(base_url, _first_line(exc))
    for klass in type(exc).__mro__:
        factory = DOCKER_ERRORS.get(klass)
        if factory is not None:
            if isinstance(exc, de.APIError):
                detail = exc.explanation or _first_line(exc)
                return factory(f"{what}: engine said {exc.status_code}: {detail}")
            return factory(f"{what}: {_first_line(exc)}")
    return SandboxError(f"{what}: unexpected {type(exc).__name__}: {_first_line(exc)}")
