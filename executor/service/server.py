"""Running the service: the executor, the service state, hypercorn on a unix socket (and TCP with tokens), signals.

``serve`` owns everything for its lifetime: on SIGTERM or SIGINT it stops taking work, lets running commands finish
for ``service.shutdown_grace_s``, cancels what is left (the agent kills each run's process group), closes its
sessions (unnamed ones are removed; named ones stay for the next start, which finds them by their labels), and
removes its socket.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, Final

import hypercorn.config
import hypercorn.trio
import trio

from executor.config import Settings
from executor.errors import ConfigError, ExecutorError
from executor.service.app import build_app
from executor.service.core import Service, open_service
from executor.service.files import clear_spools
from executor.service.lock import service_lock
from executor.session import open_executor

__all__ = ["no_tcp_tokens_error", "serve", "socket_path"]

logger = logging.getLogger("executor.service")

_GRACEFUL_CLOSE_S: Final = 5.0


def socket_path(settings: Settings) -> Path:
    """Where the service listens: ``service.socket``, else ``service.sock`` under the home."""
    return settings.service.socket or settings.home / "service.sock"


def no_tcp_tokens_error() -> ConfigError:
    """The refusal to listen on TCP without bearer tokens."""
    return ConfigError(
        "service.tcp: the TCP listener refuses to start without a bearer token; set at least one (16+ characters) "
        'with [service] tokens = ["..."] in the config file or EXECUTOR_SERVICE__TOKENS=\'["..."]\''
    )


def _clear_stale(path: Path) -> None:
    """Remove a socket file left by a killed service; refuse if a live one still answers on it."""
    if not path.exists():
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(2.0)
        probe.connect(str(path))
    except (ConnectionRefusedError, FileNotFoundError, TimeoutError):
        path.unlink(missing_ok=True)
        return
    finally:
        probe.close()
    raise ExecutorError(f"a service already listens on {path}; stop it first (one service per EXECUTOR_HOME)")


@asynccontextmanager
async def _mcp_app(executor: Any, settings: Settings) -> AsyncIterator[Any]:
    """The MCP streamable-HTTP app beside the API, when tokens exist (the MCP endpoint needs them)."""
    if not settings.service.tokens:
        yield None
        return
    # Imported here: the MCP SDK is slow to import, and a service without tokens does not need it.
    from executor.mcp.server import message_limit, open_surface

    async with open_surface(
        executor, transport="http", tokens=settings.service.tokens, host=settings.service.host
    ) as surface:
        yield surface.http_app(max_depth=settings.service.max_json_depth, max_bytes=message_limit(settings))


async def serve(
    settings: Settings,
    *,
    api_key: str | None = None,
    settings_sha256: str | None = None,
    environment_sha256: str | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until SIGTERM or SIGINT; reports the bound addresses once listening (``settings_sha256``: the digest of
    the file the settings were read from, ``environment_sha256`` that of the ``EXECUTOR_*`` settings of the
    environment (:func:`executor.environ.environment_digest`), both told by ``/v1/health`` to clients).

    Raises:
        ConfigError: TCP without tokens (checked before anything starts).
        ExecutorError: another service answers on the socket; the executor could not start.
    """
    svc = settings.service
    if svc.tcp and not svc.tokens:
        raise no_tcp_tokens_error()
    path = socket_path(settings)
    settings.home.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with service_lock(settings.home):
        _clear_stale(path)
        clear_spools(settings.home / "tmp")  # one service per home: what is there, a killed one left
        try:
            await _serve(
                settings,
                path,
                api_key=api_key,
                settings_sha256=settings_sha256,
                environment_sha256=environment_sha256,
                task_status=task_status,
            )
        finally:
            path.unlink(missing_ok=True)


async def _serve(
    settings: Settings,
    path: Path,
    *,
    api_key: str | None,
    settings_sha256: str | None,
    environment_sha256: str | None,
    task_status: trio.TaskStatus[list[str]],
) -> None:
    svc = settings.service
    config = hypercorn.config.Config()
    config.bind = [f"unix:{path}"]
    if svc.tcp:
        config.bind.append(f"[{svc.host}]:{svc.port}" if ":" in svc.host else f"{svc.host}:{svc.port}")
    config.umask = 0o177  # the socket is created 0600
    config.accesslog = None
    config.errorlog = logger
    config.graceful_timeout = _GRACEFUL_CLOSE_S
    config.h11_max_incomplete_size = 64 * 1024
    async with open_executor(settings, api_key=api_key, pool="service") as executor, AsyncExitStack() as stack:
        service = await stack.enter_async_context(open_service(executor, settings))
        mcp = await stack.enter_async_context(_mcp_app(executor, settings))
        # starlette's ASGI type, which hypercorn spells differently
        app: Any = build_app(service, mcp=mcp, settings_sha256=settings_sha256, environment_sha256=environment_sha256)
        shutdown = trio.Event()
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                serving = partial(hypercorn.trio.serve, app, config, shutdown_trigger=shutdown.wait, mode="asgi")
                try:
                    bound: list[str] = await nursery.start(serving)
                except (OSError, BaseExceptionGroup) as exc:
                    # hypercorn's own nursery wraps the bind's error: the address is named here, once.
                    failed = exc
                    while isinstance(failed, BaseExceptionGroup) and len(failed.exceptions) == 1:
                        failed = failed.exceptions[0]
                    if not isinstance(failed, OSError):
                        raise
                    reason = failed.strerror or str(failed)
                    raise ExecutorError(
                        f"cannot listen on {', '.join(config.bind)}: {reason}; free the address or choose another "
                        "(service.port, service.host, service.socket)"
                    ) from exc
                await trio.Path(path).chmod(0o600)
                task_status.started(bound)
                async for _ in signals:
                    break
                await _shutdown(service, shutdown)
                # hypercorn writes to a client under a shielded send: one that stops reading would hold its
                # connection (and the service) forever. The close is bounded: past it the connections are cut.
                nursery.start_soon(_cut_after, nursery.cancel_scope, path, svc.port if svc.tcp else None)


async def _cut_after(scope: trio.CancelScope, path: Path, port: int | None) -> None:
    """After the listener's close budget, shut down every client connection still open, then cancel ``scope``."""
    await trio.sleep(_GRACEFUL_CLOSE_S)
    cut = _cut_connections(os.fspath(path), port)
    if cut:
        logger.warning("cut %d client connection(s) that did not close within %.1fs", cut, _GRACEFUL_CLOSE_S)
    scope.cancel()


def _cut_connections(path: str, port: int | None) -> int:
    """Shut down (both ways) this process's accepted connections on the service's socket ``path`` or TCP ``port``.

    A blocked send on one then fails at once (the peer is gone as far as the kernel is concerned), so no shielded
    write can outlast it. Found by their local address among the process's descriptors; listeners are left alone.
    """
    cut = 0
    for entry in Path("/proc/self/fd").iterdir():
        try:
            fd = os.dup(int(entry.name))
        except (OSError, ValueError):
            continue  # closed meanwhile
        try:
            dup = socket.socket(fileno=fd)
        except OSError:
            os.close(fd)  # not a socket
            continue
        with dup:
            try:
                local = dup.getsockname()
                dup.getpeername()  # a listener has no peer
            except OSError:
                continue
            ours = (dup.family == socket.AF_UNIX and local == path) or (
                port is not None and dup.family in (socket.AF_INET, socket.AF_INET6) and local[1] == port
            )
            if ours and dup.type == socket.SOCK_STREAM:
                with contextlib.suppress(OSError):
                    dup.shutdown(socket.SHUT_RDWR)
                    cut += 1
    return cut


async def _shutdown(service: Service, shutdown: trio.Event) -> None:
    logger.warning(
        "stopping: no new work; %d running command(s) get %.1fs", service.running, service.svc.shutdown_grace_s
    )
    await service.drain(service.svc.shutdown_grace_s)
    shutdown.set()
