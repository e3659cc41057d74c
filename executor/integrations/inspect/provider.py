"""The inspect_ai ``SandboxEnvironment`` over the executor's session API (see the package docstring)."""

from __future__ import annotations

import errno
import os
import posixpath
import weakref
from pathlib import Path
from typing import Any, ClassVar, Literal, overload

import anyio
import sniffio
from inspect_ai.util import (
    ExecResult,
    OutputLimitExceededError,
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    SandboxEnvironmentLimits,
    SandboxUnavailableError,
    SandboxUserUnsupportedError,
    sandboxenv,
)
from pydantic import BaseModel, ConfigDict

from executor.config import Settings, load_settings
from executor.errors import (
    CommandRejected,
    ContentRejected,
    PathRejected,
    SandboxError,
    SandboxLost,
    UnsafeTarget,
    WriteFailed,
)
from executor.session.threaded import ThreadedExecutor, ThreadedSession

__all__ = ["ExecutorSandboxConfig", "ExecutorSandboxEnvironment"]


class ExecutorSandboxConfig(BaseModel):
    """The ``executor`` sandbox's configuration in an inspect task."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    config_file: str | None = None
    """The executor's TOML settings file (default: ``EXECUTOR_CONFIG``, then the defaults)."""
    profile: str | None = None
    """The profile sessions open with (default: the settings' default profile)."""
    image: str | None = None
    """An image instead of the profile's."""
    gate_mode: Literal["enforce", "observe"] | None = None
    """Set the profile's ``gate_mode``: ``observe`` is harness mode (the gate journals but never blocks). None keeps
    the profile's own (``enforce`` unless the settings say otherwise)."""
    home: str | None = None
    """The executor's state folder (default: the settings' ``home``)."""


def _settings(config: ExecutorSandboxConfig) -> Settings:
    overrides: dict[str, Any] = {}
    if config.home is not None:
        overrides["home"] = config.home
    if config.gate_mode is not None:
        base = load_settings(Path(config.config_file) if config.config_file else None, environ=os.environ)
        name = config.profile or base.default_profile
        overrides["profiles"] = {name: {"gate_mode": config.gate_mode}}
    return load_settings(
        Path(config.config_file) if config.config_file else None, environ=os.environ, overrides=overrides
    )


class _Executors:
    """One executor per configuration in this process, opened on first use and closed at task cleanup.

    The lock guarding them is the running event loop's own (an anyio lock binds to the first backend that uses it:
    a later ``asyncio.run`` or a trio run in the same process would fail on it)."""

    def __init__(self) -> None:
        self._locks: weakref.WeakKeyDictionary[object, anyio.Lock] = weakref.WeakKeyDictionary()
        self._open: dict[ExecutorSandboxConfig, ThreadedExecutor] = {}

    def _lock(self) -> anyio.Lock:
        loop = _current_loop()
        lock = self._locks.get(loop)
        if lock is None:
            lock = self._locks[loop] = anyio.Lock()
        return lock

    async def get(self, config: ExecutorSandboxConfig) -> ThreadedExecutor:
        async with self._lock():
            executor = self._open.get(config)
            if executor is None:
                executor = ThreadedExecutor(_settings(config))
                await executor.open()
                self._open[config] = executor
            return executor

    async def close(self, config: ExecutorSandboxConfig) -> None:
        async with self._lock():
            executor = self._open.pop(config, None)
        if executor is not None:
            await executor.close()


def _current_loop() -> object:
    """The running event loop (asyncio's loop object, trio's run-wide token)."""
    if sniffio.current_async_library() == "trio":
        import trio

        return trio.lowlevel.current_root_task()
    import asyncio

    return asyncio.get_running_loop()


_EXECUTORS = _Executors()


def _config(config: SandboxEnvironmentConfigType | None) -> ExecutorSandboxConfig:
    if config is None:
        return ExecutorSandboxConfig()
    if isinstance(config, ExecutorSandboxConfig):
        return config
    if isinstance(config, str):
        return ExecutorSandboxConfig(config_file=config)
    if isinstance(config, BaseModel):
        return ExecutorSandboxConfig.model_validate(config.model_dump())
    raise TypeError(f"the executor sandbox takes an ExecutorSandboxConfig or a settings file, not {config!r}")


def _os_error(exc: WriteFailed | UnsafeTarget, file: str) -> OSError:
    """The builtin error inspect expects, naming the file as the caller gave it."""
    message = f"{file}: {exc}"
    code = exc.errno or 0
    if code == errno.ENOENT:
        return FileNotFoundError(code, message)
    if code == errno.EISDIR:
        return IsADirectoryError(code, f"{file} is a directory: {exc}")
    if code in (errno.EACCES, errno.EPERM) or isinstance(exc, UnsafeTarget):
        return PermissionError(errno.EACCES, message)
    return OSError(code, message)


@sandboxenv(name="executor")
class ExecutorSandboxEnvironment(SandboxEnvironment):
    """One sample's session container."""

    _passwd_cache: ClassVar[dict[str, bytes]] = {}

    def __init__(self, session: ThreadedSession, config: ExecutorSandboxConfig) -> None:
        super().__init__()
        self.session = session
        """The executor session behind this sandbox."""
        self._config = config

    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> BaseModel:
        """See ``SandboxEnvironment.config_deserialize``."""
        return ExecutorSandboxConfig(**config)

    @classmethod
    async def sample_init(
        cls, task_name: str, config: SandboxEnvironmentConfigType | None, metadata: dict[str, str]
    ) -> dict[str, SandboxEnvironment]:
        """Open the sample's session.

        Hook for the warm pool: when the executor has one, this is the one place that takes a pre-started session
        from it instead of opening a new container.
        """
        chosen = _config(config)
        executor = await _EXECUTORS.get(chosen)
        session = await executor.open_session(profile=chosen.profile, image=chosen.image)
        return {"default": cls(session, chosen)}

    @classmethod
    async def sample_cleanup(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        environments: dict[str, SandboxEnvironment],
        interrupted: bool,
    ) -> None:
        """Close the sample's sessions (their containers are removed)."""
        for environment in environments.values():
            if isinstance(environment, ExecutorSandboxEnvironment):
                with anyio.CancelScope(shield=True):
                    await environment.session.close()

    @classmethod
    async def task_cleanup(cls, task_name: str, config: SandboxEnvironmentConfigType | None, cleanup: bool) -> None:
        """Close the task's executor (and any session still open)."""
        with anyio.CancelScope(shield=True):
            await _EXECUTORS.close(_config(config))

    async def exec(
        self,
        cmd: list[str],
        input: str | bytes | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: int | None = None,  # noqa: ASYNC109 (inspect's contract; the agent enforces it as a deadline)
        timeout_retry: bool = True,
        concurrency: bool = True,
    ) -> ExecResult[str]:
        """Run ``cmd`` through the session's raw exec (see ``SandboxEnvironment.exec``)."""
        if user is not None:
            missing = await self._check_user(user)
            if missing is not None:
                return missing
        limit = SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE
        settings = self.session.settings.bash
        # A timeout above the executor's cap runs to the cap (docker takes any); none is the default deadline.
        timeout_ms = None if timeout is None else min(int(timeout * 1000), settings.max_timeout_ms)
        try:
            result = await self.session.exec(
                cmd,
                stdin=input.encode("utf-8") if isinstance(input, str) else input,
                cwd=cwd,
                env=env,
                timeout_ms=timeout_ms,
                max_output_bytes=limit,
            )
        except CommandRejected as exc:
            if cwd is None or not str(exc).startswith("cwd "):
                raise
            # A cwd that does not exist: a failed run, as docker exec reports it (126), not an exception.
            return ExecResult(success=False, returncode=126, stdout="", stderr=f"{exc}\n")
        except SandboxLost as exc:
            raise SandboxUnavailableError(f"the sample's sandbox is gone: {exc}") from exc
        if result.outcome in ("denied", "blocked"):
            raise PermissionError(f"the executor's gate refused {cmd!r}: {result.text}")
        stdout = result.stdout.decode("utf-8", "replace")
        stderr = result.stderr.decode("utf-8", "replace")
        if result.outcome == "timeout":
            seconds = (timeout_ms if timeout_ms is not None else settings.timeout_ms) / 1000
            error = TimeoutError(f"{cmd!r} timed out after {seconds:g} seconds; its process group was killed")
            if stdout or stderr:
                error.truncated_output = stdout + stderr  # type: ignore[attr-defined]  # inspect reads it
            raise error
        if result.run is not None and result.run.cause == "sandbox_lost":
            raise SandboxUnavailableError(f"the sample's sandbox is gone: {result.text}")
        if result.outcome == "error" or result.exit_code is None:
            raise RuntimeError(f"{cmd!r} did not run to an end: {result.text}")
        if result.exit_code == 126 and "permission denied" in stderr.lower():
            raise PermissionError(errno.EACCES, stderr.strip() or f"{cmd[0]}: permission denied")
        if result.stdout_whole is False or result.stderr_whole is False:
            raise OutputLimitExceededError(
                SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE_STR, stderr if result.stdout_whole else stdout
            )
        return ExecResult(success=result.exit_code == 0, returncode=result.exit_code, stdout=stdout, stderr=stderr)

    async def _check_user(self, user: str) -> ExecResult[str] | None:
        """None when ``user`` is the session user; a failed result when the image has no such user.

        Raises:
            SandboxUserUnsupportedError: any other user (root included): commands run only as the session user.
        """
        profile_user = self.session.session.profile.user
        uid = profile_user.split(":")[0]
        if user in (uid, profile_user):
            return None
        passwd = await self.session.read_file("/etc/passwd")
        for line in passwd.data.decode("utf-8", "replace").splitlines():
            fields = line.split(":")
            if len(fields) >= 3 and fields[0] == user:
                if fields[2] == uid:
                    return None
                break
        else:
            if not user.isdigit():
                message = f"unable to find user {user}: no matching entries in passwd file\n"
                return ExecResult(success=False, returncode=126, stdout=message, stderr=message)
        raise SandboxUserUnsupportedError(
            f"the executor runs commands only as its session user (uid {uid}), never as {user!r}: the agent drops "
            "every command to that one unprivileged user and never uses root"
        )

    async def write_file(self, file: str, contents: str | bytes) -> None:
        """Write ``file`` (parents created) through the session's gated, staged write."""
        try:
            result = await self.session.write_file(file, contents, create_parents=True)
        except PathRejected as exc:  # '.', '..', 'd/': a folder, as docker reports it
            raise IsADirectoryError(errno.EISDIR, f"{file}: {exc}") from exc
        except ContentRejected as exc:  # past write.max_bytes
            raise PermissionError(errno.EFBIG, f"{file}: {exc}") from exc
        except SandboxLost as exc:
            raise SandboxUnavailableError(f"the sample's sandbox is gone: {exc}") from exc
        if result.outcome == "completed":
            return
        if result.outcome in ("denied", "blocked"):
            raise PermissionError(errno.EACCES, f"{file}: the executor's gate refused the write: {result.text}")
        data = result.data or {}
        code = data.get("errno")
        if data.get("error") == "UnsafeTarget" or code in (errno.EPERM, errno.ELOOP):
            # A symlink on the path: writes never follow one.
            raise PermissionError(errno.EACCES, f"{file}: {result.text}")
        if code == errno.EACCES:
            raise PermissionError(errno.EACCES, f"{file}: {result.text}")
        if code == errno.EISDIR:
            raise IsADirectoryError(errno.EISDIR, f"{file} is a directory: {result.text}")
        if code == errno.ENOENT:
            raise FileNotFoundError(errno.ENOENT, f"{file}: {result.text}")
        raise OSError(code if isinstance(code, int) and code else errno.EIO, f"{file}: {result.text}")

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> str | bytes:
        """Read ``file`` through the session's gated ``read_file`` (see ``SandboxEnvironment.read_file``)."""
        limit = min(SandboxEnvironmentLimits.MAX_READ_FILE_SIZE, self.session.settings.write.read_max_bytes)
        if posixpath.basename(file.rstrip("/")) in (".", "..") or file.endswith("/"):
            raise IsADirectoryError(errno.EISDIR, "Is a directory.", file)  # as docker's sandbox says it
        try:
            data = (await self.session.read_file(file, max_bytes=limit)).data
        except UnsafeTarget as exc:
            if exc.errno == errno.EISDIR:
                raise _os_error(exc, file) from exc
            data = await self._read_through_links(file, limit)  # a link (/etc/os-release): followed, as docker does
        except WriteFailed as exc:
            if exc.errno == errno.EFBIG:
                raise OutputLimitExceededError(_size(limit), None) from exc
            raise _os_error(exc, file) from exc
        except PathRejected as exc:
            raise IsADirectoryError(errno.EISDIR, f"{file}: {exc}") from exc
        except SandboxLost as exc:
            raise SandboxUnavailableError(f"the sample's sandbox is gone: {exc}") from exc
        except PermissionError as exc:  # the gate refused the read
            raise PermissionError(errno.EACCES, f"{file}: {exc}") from exc
        if not text:
            return data
        # newline="" semantics: no newline translation
        return data.decode("utf-8")

    async def _read_through_links(self, file: str, limit: int) -> bytes:
        """Read ``file`` with ``cat`` (gated as that command), following symlinks; the session's own read never
        does."""
        try:
            result = await self.session.exec(["cat", "--", file], max_output_bytes=limit)
        except SandboxError as exc:
            raise SandboxUnavailableError(f"the sample's sandbox is gone: {exc}") from exc
        if result.outcome in ("denied", "blocked"):
            raise PermissionError(errno.EACCES, f"{file}: the executor's gate refused the read: {result.text}")
        if result.stdout_whole is False:
            raise OutputLimitExceededError(_size(limit), None)
        if result.exit_code != 0:
            said = result.stderr.decode("utf-8", "replace").strip()
            lowered = said.lower()
            if "no such file" in lowered:
                raise FileNotFoundError(errno.ENOENT, f"{file}: {said}")
            if "is a directory" in lowered:
                raise IsADirectoryError(errno.EISDIR, f"{file}: {said}")
            raise PermissionError(errno.EACCES, f"{file}: {said or 'cannot be read'}")
        return result.stdout


def _size(limit: int) -> str:
    """The read limit in force, named as inspect names its own (``100 MiB``), or the executor's smaller one."""
    if limit == SandboxEnvironmentLimits.MAX_READ_FILE_SIZE:
        return SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR
    size = f"{limit / (1 << 20):g} MiB" if limit >= 1 << 20 else f"{limit} bytes"
    return f"{size} (write.read_max_bytes)"
