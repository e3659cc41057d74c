"""docker-py behind trio worker threads, a capacity limiter, bounded retries and one error mapping."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import TypeVar
from urllib.parse import urlsplit

import docker
import docker.errors as de
import requests.exceptions as rex
import tenacity
import trio

from executor.config import DockerSettings
from executor.errors import ExecutorError
from executor.sandbox.docker._errors import translate

__all__ = ["DockerEngine"]

T = TypeVar("T")


def _transient(exc: BaseException) -> bool:
    # Only failures that a second identical attempt can cure: the transport, or the engine's own 5xx.
    if isinstance(exc, rex.ConnectionError | rex.Timeout | ConnectionError):
        return True
    return isinstance(exc, de.APIError) and not isinstance(exc, de.NotFound) and exc.is_server_error()


class DockerEngine:
    """One docker-py client whose blocking calls run in trio worker threads.

    Build it with :meth:`connect`; close it with :meth:`aclose`. Every call goes through :meth:`call`,
    which bounds concurrency (``docker.max_threads``), retries only calls the caller declares idempotent
    (``docker.retry_attempts`` and ``docker.retry_wait_s``), and maps foreign errors into executor errors.
    """

    def __init__(self, client: docker.DockerClient, settings: DockerSettings) -> None:
        self.client = client
        """The docker-py client; use it only inside functions passed to :meth:`call`."""
        self.settings = settings
        """The engine section of the settings."""
        self._limiter = trio.CapacityLimiter(settings.max_threads)

    @classmethod
    async def connect(cls, settings: DockerSettings) -> DockerEngine:
        """Connect to the engine and negotiate the API version.

        Raises:
            EngineUnavailable: no engine answers at ``settings.base_url``; the message says how to start one.
        """
        limiter = trio.CapacityLimiter(1)

        def make() -> docker.DockerClient:
            if settings.base_url.startswith("unix://"):
                _probe_unix(settings.base_url.removeprefix("unix://"), settings.api_timeout_s)
            else:
                _probe_tcp(settings.base_url, settings.api_timeout_s)
            return docker.DockerClient(base_url=settings.base_url, timeout=int(settings.api_timeout_s), version="auto")

        client = await _run(make, settings=settings, limiter=limiter, what="connect", idempotent=True)
        return cls(client, settings)

    @property
    def is_local(self) -> bool:
        """Whether the engine is reached over a local unix socket (so host paths are the engine's paths)."""
        return self.settings.base_url.startswith("unix://")

    @property
    def api_version(self) -> str:
        """The negotiated Engine API version, like ``"1.41"``."""
        return str(self.client.api.api_version)

    async def call(
        self,
        fn: Callable[[], T],
        *,
        what: str,
        idempotent: bool,
        abandon_on_cancel: bool = False,
    ) -> T:
        """Run one blocking docker-py call in a worker thread.

        Args:
            fn: the call, closed over its arguments.
            what: the operation, for error messages.
            idempotent: retry transient failures; never set it for create, start, exec or build.
            abandon_on_cancel: let a cancellation abandon the thread (for calls that may block long, like pull).

        Raises:
            EngineUnavailable: the engine stopped answering.
            EngineError, ImageError, SessionNotFound: the engine refused or failed the call.
        """
        return await _run(
            fn,
            settings=self.settings,
            limiter=self._limiter,
            what=what,
            idempotent=idempotent,
            abandon_on_cancel=abandon_on_cancel,
        )

    async def aclose(self) -> None:
        """Close the client's connection pool."""
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self.client.close, limiter=self._limiter)


def _probe_unix(path: str, timeout: float) -> None:
    # docker-py leaks its socket when the first connect fails (an unraisable ResourceWarning later); a probe of
    # our own, closed on every path, turns "nobody listens" into one clean ConnectionError first.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(timeout)
        try:
            probe.connect(path)
        except OSError as exc:
            raise ConnectionError(f"cannot connect to {path}: {exc.strerror or exc}") from exc


def _probe_tcp(url: str, timeout: float) -> None:
    # The same for tcp://: one clean ConnectionError, and no socket left for the garbage collector to complain about.
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "localhost", parts.port or 2375), timeout=timeout):
            pass
    except OSError as exc:
        raise ConnectionError(f"cannot connect to {parts.netloc}: {exc.strerror or exc}") from exc


async def _run(
    fn: Callable[[], T],
    *,
    settings: DockerSettings,
    limiter: trio.CapacityLimiter,
    what: str,
    idempotent: bool,
    abandon_on_cancel: bool = False,
) -> T:
    async def once() -> T:
        return await trio.to_thread.run_sync(fn, limiter=limiter, abandon_on_cancel=abandon_on_cancel)

    try:
        if not idempotent:
            return await once()
        retrying = tenacity.AsyncRetrying(
            stop=tenacity.stop_after_attempt(settings.retry_attempts),
            wait=tenacity.wait_fixed(settings.retry_wait_s),
            retry=tenacity.retry_if_exception(_transient),
            sleep=trio.sleep,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                return await once()
        raise AssertionError("unreachable: tenacity either returns or reraises")  # pragma: no cover
    except ExecutorError:
        raise
    except Exception as exc:
        raise translate(exc, what=what, base_url=settings.base_url) from exc
