"""Clients for the executor service (``executor serve``): :class:`Client` (blocking) and :class:`AsyncClient`
(asyncio or trio: httpx2 runs on either through anyio).

Both speak the ``/v1`` API over the service's unix socket (the default: ``service.sock`` under ``EXECUTOR_HOME``)
or over TCP with a bearer token. A call's result is :class:`~executor.models.ToolResult`, the very class the
in-process API returns (``text`` for a model, the facts, and a command's raw ``stdout``/``stderr`` as bytes with
``stdout_whole``/``stderr_whole``); the rest are the service's wire models (:mod:`executor.service.wire`). Errors
are the executor's own exceptions (``SessionNotFound``, ``CommandRejected``...), never httpx2's and never an exception
group; a service that does not answer is :class:`~executor.errors.ServiceUnavailable`.

Exec streams come as the service's binary frames (:data:`~executor.service.wire.EXEC_FRAMES`): a ``chunk`` event
carries the command's bytes exactly (no base64, no JSON per chunk). The event iterators read no further than their
caller has taken events, so a slow loop holds the stream back instead of losing any of it (the service spools what
it has not sent; only past ``service.stream_spool_bytes`` does a ``dropped`` event, and the result's
``stdout_dropped``/``stderr_dropped``, count bytes the stream did not carry).

This package imports neither trio nor docker (a test checks it)::

    from executor.client import Client

    with Client() as client:
        session = client.create_session(name="ci")
        with client.stream_exec(session.id, "make test") as events:
            for event in events:
                if event.kind == "chunk":
                    sys.stdout.buffer.write(event.data)
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Mapping
from contextlib import aclosing, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, Final, Literal, TypeVar
from urllib.parse import quote

import anyio
import anyio.to_thread
import httpx2
from pydantic import BaseModel, TypeAdapter, ValidationError

import executor.errors as _errors
from executor.client._decode import ExecEvents, FrameError, LineDecoder
from executor.errors import ExecutorError, PathRejected, ServiceUnavailable
from executor.httpio import ClosingTransport
from executor.models import ToolResult
from executor.ownership import socket_refusal
from executor.service.wire import (
    EXEC_FRAMES,
    ApprovalAnswer,
    ApprovalView,
    ErrorEvent,
    ErrorResponse,
    ExecEvent,
    ExecRequest,
    Health,
    PageEvent,
    ResultEvent,
    SessionCreate,
    SessionView,
    TaskEvent,
    TaskStart,
    TaskView,
    WriteRequest,
    validation_message,
)
from executor.tools.archive import ArchiveStats, TarPacker, download_too_large, extract_tar

__all__ = [
    "AsyncClient",
    "Client",
    "ExecEvent",
    "SessionView",
    "TaskView",
    "ToolResult",
    "default_socket",
]

M = TypeVar("M", bound=BaseModel)
_EXEC_EVENT: Final = TypeAdapter[Any](ExecEvent)
_TASK_EVENT: Final = TypeAdapter[Any](TaskEvent)
_SESSIONS: Final = TypeAdapter(list[SessionView])
_TASKS: Final = TypeAdapter(list[TaskView])
_APPROVALS: Final = TypeAdapter(list[ApprovalView])
_BASE: Final = "http://executor"
_DEFAULT_TIMEOUT_S: Final = 30.0
_Approvals = Literal["wait", "none"]


def default_socket(environ: Mapping[str, str] | None = None) -> Path:
    """The service's default socket: ``service.sock`` under ``EXECUTOR_HOME`` (else the platform state folder)."""
    env = os.environ if environ is None else environ
    home = env.get("EXECUTOR_HOME")
    if home:
        return Path(home) / "service.sock"
    import platformdirs  # only when no home is given

    return Path(platformdirs.user_state_dir("executor")) / "service.sock"


def _unanswered(where: str, timeout_s: float, exc: httpx2.TransportError) -> ServiceUnavailable:
    """A request that got no answer: a service that took too long is not one that is not there."""
    if isinstance(exc, httpx2.ReadTimeout):
        return ServiceUnavailable(
            f"the executor service at {where} did not answer within {timeout_s:g} s (the client's timeout_s); "
            "pass a larger timeout_s"
        )
    return ServiceUnavailable(f"no executor service answers at {where}: start one with `executor serve`")


def _raise_for(response: httpx2.Response, body: bytes) -> None:
    if response.status_code < 400:
        return
    try:
        info = ErrorResponse.model_validate_json(body).error
    except ValidationError:
        pass
    else:
        raise _exception(info.type, info.message)
    try:
        result = ToolResult.model_validate_json(body)
    except ValidationError:
        raise ExecutorError(f"the service answered {response.status_code}: {body[:200]!r}") from None
    raise _refused_transfer(result)


def _refused_transfer(result: ToolResult) -> ExecutorError:
    """A download refused by the gate or failed in the session: the service answers (409) with the tar's result."""
    if result.outcome == "denied":
        return _errors.ActionDenied(result.text)
    if result.outcome == "blocked":
        return _errors.ApprovalRequired(result.text)
    said = result.stderr.decode("utf-8", "replace").strip() or f"tar exited {result.exit_code}"
    return ExecutorError(f"the copy failed in the session: {said} (artifact {result.artifact_id}: read_output)")


def _exception(type_: str, message: str) -> ExecutorError:
    cls = getattr(_errors, type_, None)
    if isinstance(cls, type) and issubclass(cls, ExecutorError):
        return cls(message)
    return ExecutorError(message)


def _parse(model: type[M], body: bytes) -> M:
    return model.model_validate_json(body)


def _packer(source: str | os.PathLike[str], contents: bool) -> TarPacker:
    path = Path(source)
    if not path.exists() and not path.is_symlink():
        raise PathRejected(f"no such file or folder on this host: {path}")
    return TarPacker(path, contents=contents)


def _closed_stream() -> ExecutorError:
    return ExecutorError("the stream is closed: iterate it inside its `with` block (leaving the block closes it)")


def _cut(where: str, exc: Exception, path: str, received: int, response: httpx2.Response) -> ExecutorError:
    bound = response.headers.get("x-executor-max-bytes", "")
    if bound.isdigit() and received >= int(bound):
        return download_too_large(path, bound)
    return ExecutorError(
        f"the download from {where} was cut short after {received} bytes ({type(exc).__name__}): the tar failed in "
        "the session, or the service shut down or went away (its log says which)"
    )


def _check_tar_response(response: httpx2.Response) -> None:
    if response.headers.get("content-type", "").split(";")[0] != "application/x-tar":
        raise ExecutorError(f"the service answered {response.status_code} without an archive")


def _final(events: list[Any]) -> ToolResult:
    for event in reversed(events):
        if isinstance(event, ResultEvent):
            return event.result
        if isinstance(event, ErrorEvent):
            raise _exception(event.error.type, event.error.message)
    raise ServiceUnavailable("the exec stream ended without a result (the service went away); read the artifact")


def _body(model: type[M], refused: Callable[[str, str], ExecutorError], **fields: Any) -> str:
    """A request body, checked here: a bad argument is the executor's own error (``refused(field, message)``)
    before anything is sent, never pydantic's."""
    try:
        return model(**fields).model_dump_json(exclude_none=True)
    except ValidationError as exc:
        first = exc.errors()[0].get("loc", ("",))
        raise refused(str(first[0]) if first else "", validation_message(exc)) from None


def _command_refused(_field: str, message: str) -> ExecutorError:
    return _errors.CommandRejected(message)


def _write_refused(field: str, message: str) -> ExecutorError:
    return _errors.PathRejected(message) if field == "path" else _errors.ContentRejected(message)


def _session_refused(field: str, message: str) -> ExecutorError:
    return _errors.SessionRejected(message) if field == "name" else _errors.ConfigError(message)


def _answer_refused(_field: str, message: str) -> ExecutorError:
    return _errors.ApprovalNotFound(message)


class _Requests:
    """What both clients send: paths and bodies (no IO)."""

    @staticmethod
    def exec_body(
        command: str,
        *,
        cwd: str | None,
        env: Mapping[str, str] | None,
        stdin: bytes | None,
        timeout_ms: int | None,
        focus_mode: Literal["off", "shadow", "on"] | None,
        intent: str | None,
        approvals: _Approvals,
    ) -> str:
        return _body(
            ExecRequest,
            _command_refused,
            command=command,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdin=stdin,
            timeout_ms=timeout_ms,
            focus_mode=focus_mode,
            intent=intent,
            approvals=approvals,
        )

    @staticmethod
    def session(session: str, tail: str = "") -> str:
        return f"/v1/sessions/{_segment(session, _no_session)}{tail}"

    @staticmethod
    def artifact(session: str, artifact_id: str, tail: str = "") -> str:
        return _Requests.session(session, f"/artifacts/{_segment(artifact_id, _no_artifact)}{tail}")

    @staticmethod
    def task(session: str, task_id: str) -> str:
        return _Requests.session(session, f"/tasks/{_segment(task_id, _no_task)}")


def _no_session(value: str) -> ExecutorError:
    return _errors.SessionNotFound(f"no session {value!r}; list_sessions() shows yours")


def _no_artifact(value: str) -> ExecutorError:
    return _errors.ArtifactNotFound(f"no artifact {value!r}")


def _no_task(value: str) -> ExecutorError:
    return _errors.TaskNotFound(f"no task {value!r}; list_tasks() shows yours")


def _no_approval(value: str) -> ExecutorError:
    return _errors.ApprovalNotFound(f"no pending approval {value!r}; approvals() lists yours")


def _segment(value: str, missing: Callable[[str], ExecutorError]) -> str:
    """One path segment, percent-encoded (``?``, ``#`` and ``%`` stay in it); one that could never name anything
    (empty, a slash, a dot segment) is ``missing(value)`` without a request."""
    if not value or "/" in value or value in (".", ".."):
        raise missing(value)
    return quote(value, safe="")


def _transport_kwargs(url: str | None, socket: str | os.PathLike[str] | None) -> tuple[str, str | None]:
    """The base url and the unix socket (or None) for a service at ``url`` or ``socket``.

    Raises:
        ConfigError: both given, or a ``url`` of none of the accepted forms.
    """
    if url is not None and socket is not None:
        raise _errors.ConfigError("give the service's url or its socket, not both")
    if url is None:
        return _BASE, str(socket if socket is not None else default_socket())
    if url.startswith("unix://"):
        path = url[len("unix://") :]
        if path.startswith("/"):
            return _BASE, path
    else:
        try:
            parsed = httpx2.URL(url)
        except httpx2.InvalidURL:
            parsed = None
        if parsed is not None and parsed.scheme in ("http", "https") and parsed.host:
            return url.rstrip("/"), None
    raise _errors.ConfigError(
        f"{url[:200]!r} is not a service url: give unix:///PATH (the socket), http://HOST:PORT or https://HOST[:PORT]"
    )


def _check_socket(uds: str | None, where: str) -> None:
    # Said before httpx2 tries: its unix-socket connect leaves the socket object unclosed when the path is missing.
    if uds is not None and not Path(uds).exists():
        raise ServiceUnavailable(f"no executor service answers at {where}: start one with `executor serve`")
    # A request carries the command's text: never to a socket another user may have put there.
    refused = socket_refusal(uds) if uds is not None else None
    if refused is not None:
        raise _errors.ConfigError(refused)


_Decoder = ExecEvents | LineDecoder
_ACCEPT_FRAMES: Final = {"accept": EXEC_FRAMES}


def _check_media(response: httpx2.Response, decoder: _Decoder) -> None:
    if isinstance(decoder, ExecEvents) and response.headers.get("content-type", "").split(";")[0] != EXEC_FRAMES:
        raise ExecutorError(
            f"the service answered the exec with {response.headers.get('content-type')!r}, not the framed stream "
            f"({EXEC_FRAMES}): it is older than this client; upgrade it"
        )


def _headers(token: str | None) -> dict[str, str]:
    # Results carry recovery hints written as this client's calls (the session first).
    hints = {"x-executor-hints": "client"}
    return {"authorization": f"Bearer {token}", **hints} if token else hints


class Client:
    """A blocking client of the executor service.

    Args:
        url: ``http://host:port`` (or ``https://...``) of a TCP listener (then give ``token``), or
            ``unix:///path`` of a socket; default: the unix socket.
        socket: the unix socket's path (default :func:`default_socket`).
        token: a bearer token (required over TCP; it owns what it creates).
        timeout_s: bound on connecting and on each non-streaming call (exec streams are unbounded in time;
            the command's own deadline bounds them).

    Raises:
        ConfigError: ``url`` is none of the accepted forms, or both ``url`` and ``socket`` are given.

    Calls raise the executor's own exceptions (those the in-process API raises), plus
    :class:`~executor.errors.ServiceUnavailable` when no service answers and
    :class:`~executor.errors.Unauthorized` when the service refuses the token (401).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        socket: str | os.PathLike[str] | None = None,
        token: str | None = None,
        timeout_s: float = _DEFAULT_TIMEOUT_S,
    ) -> None:
        base, uds = _transport_kwargs(url, socket)
        self._uds = uds
        self._where = uds or base
        self._timeout = timeout_s
        self._http = httpx2.Client(
            base_url=base,
            transport=httpx2.HTTPTransport(uds=uds) if uds else None,
            headers=_headers(token),
            timeout=httpx2.Timeout(timeout_s),
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def _call(self, method: str, path: str, *, waits: bool = False, **kwargs: Any) -> bytes:
        """One request; ``waits``: it may wait for an approval, so its answer is not bounded by ``timeout_s``."""
        _check_socket(self._uds, self._where)
        if waits:
            kwargs["timeout"] = httpx2.Timeout(self._timeout, read=None)
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx2.TransportError as exc:
            raise _unanswered(self._where, self._timeout, exc) from exc
        _raise_for(response, response.content)
        return response.content

    @contextmanager
    def _stream(self, method: str, path: str, decoder: _Decoder, **kwargs: Any) -> Iterator[Iterator[Any]]:
        _check_socket(self._uds, self._where)
        timeout = httpx2.Timeout(self._timeout, read=None)
        try:
            with self._http.stream(method, path, timeout=timeout, **kwargs) as response:
                if response.status_code >= 400:
                    _raise_for(response, response.read())
                _check_media(response, decoder)

                def events() -> Iterator[Any]:
                    # Nothing is read ahead of the consumer: a slow one holds the HTTP read back (the service
                    # spools for it), so no event is dropped here.
                    try:
                        for data in response.iter_bytes():
                            yield from decoder.feed(data)
                        decoder.end()
                    except httpx2.TransportError as exc:
                        raise ServiceUnavailable(f"the service at {self._where} went away mid-stream") from exc
                    except FrameError as exc:
                        raise ServiceUnavailable(f"the exec stream from {self._where} broke off: {exc}") from exc
                    except httpx2.StreamError as exc:
                        raise _closed_stream() from exc

                yield events()
        except httpx2.TransportError as exc:
            raise ServiceUnavailable(
                f"no executor service answers at {self._where}: start one with `executor serve`"
            ) from exc

    # -- service ---------------------------------------------------------------------------------------------

    def health(self) -> Health:
        """The service's state."""
        return _parse(Health, self._call("GET", "/v1/health"))

    def metrics(self) -> str:
        """The Prometheus text exposition."""
        return self._call("GET", "/v1/metrics").decode()

    def openapi(self) -> dict[str, Any]:
        """The service's OpenAPI document."""
        document: dict[str, Any] = json.loads(self._call("GET", "/v1/openapi.json"))
        return document

    # -- sessions --------------------------------------------------------------------------------------------

    def create_session(
        self,
        *,
        profile: str | None = None,
        image: str | None = None,
        name: str | None = None,
        idle_s: float | Literal["none"] | None = None,
    ) -> SessionView:
        """Start a session (named ones outlive the service).

        Raises:
            ConfigError: unknown profile. ImageError: unknown image. SandboxError: it could not start.
        """
        body = _body(SessionCreate, _session_refused, profile=profile, image=image, name=name, idle_s=idle_s)
        return _parse(SessionView, self._call("POST", "/v1/sessions", content=body))

    def list_sessions(self) -> list[SessionView]:
        """Your sessions."""
        return _SESSIONS.validate_json(self._call("GET", "/v1/sessions"))

    def session(self, session: str) -> SessionView:
        """One session by id or name.

        Raises:
            SessionNotFound: no such session, or another token's.
        """
        return _parse(SessionView, self._call("GET", _Requests.session(session)))

    def stop_session(self, session: str) -> None:
        """Kill everything the session started and remove it.

        Raises:
            SessionNotFound: no such session, or another token's.
        """
        self._call("DELETE", _Requests.session(session))

    # -- commands --------------------------------------------------------------------------------------------

    @contextmanager
    def stream_exec(
        self,
        session: str,
        command: str,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        timeout_ms: int | None = None,
        focus_mode: Literal["off", "shadow", "on"] | None = None,
        intent: str | None = None,
        approvals: _Approvals = "wait",
    ) -> Iterator[Iterator[Any]]:
        """Run ``command`` and iterate its events as they come: chunks, then a ``result`` (or ``error``) event.

        Leaving early closes the stream; the command goes on in its session and its artifact keeps every byte.

        Raises:
            SessionNotFound, CommandRejected: before anything ran.
        """
        body = _Requests.exec_body(
            command,
            cwd=cwd,
            env=env,
            stdin=stdin,
            timeout_ms=timeout_ms,
            focus_mode=focus_mode,
            intent=intent,
            approvals=approvals,
        )
        path = _Requests.session(session, "/exec")
        with self._stream("POST", path, ExecEvents(_EXEC_EVENT), content=body, headers=_ACCEPT_FRAMES) as events:
            yield events

    def exec(
        self,
        session: str,
        command: str,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        timeout_ms: int | None = None,
        focus_mode: Literal["off", "shadow", "on"] | None = None,
        intent: str | None = None,
        approvals: _Approvals = "wait",
    ) -> ToolResult:
        """Run ``command`` to its end and return its result (raw streams included, bounded).

        With ``approvals="wait"`` (the default) an action the gate asks about waits, up to
        ``service.approval_timeout_s``, for someone to answer it out of band (:meth:`approvals` and :meth:`answer` from
        another client, or ``POST /v1/approvals/{id}``) and this call returns only then; nothing else says it
        waits. Pass ``approvals="none"`` to get the ``blocked`` result at once, or use :meth:`stream_exec`, whose
        ``approval`` event names the ask as it happens.

        Raises:
            SessionNotFound, CommandRejected: before anything ran.
        """
        with self.stream_exec(
            session,
            command,
            cwd=cwd,
            env=env,
            stdin=stdin,
            timeout_ms=timeout_ms,
            focus_mode=focus_mode,
            intent=intent,
            approvals=approvals,
        ) as events:
            return _final([event for event in events if event.kind in ("result", "error")])

    def write(
        self,
        session: str,
        path: str,
        content: bytes | str,
        *,
        parents: bool = False,
        mode: str | None = None,
        approvals: _Approvals = "wait",
    ) -> ToolResult:
        """Create or replace a file (staged, gated); ``parents`` creates missing folders, ``mode`` (octal) is set.
        A write the gate asks about waits for an answer as :meth:`exec` does (``approvals="none"``: blocked at once).

        Raises:
            PathRejected, ContentRejected: refused before any container call.
        """
        data = content.encode() if isinstance(content, str) else content
        body = _body(
            WriteRequest, _write_refused, path=path, content=data, parents=parents, mode=mode, approvals=approvals
        )
        path_ = _Requests.session(session, "/write")
        return _parse(ToolResult, self._call("POST", path_, content=body, waits=approvals == "wait"))

    def upload(
        self,
        session: str,
        source: str | os.PathLike[str],
        dest: str,
        *,
        contents: bool = True,
        approvals: _Approvals = "wait",
    ) -> ToolResult:
        """Copy a local file or folder into folder ``dest`` of the session (a gated tar unpack), streamed: memory
        stays flat whatever the size (the service bounds it: ``service.max_request_bytes``). An upload the gate asks
        about waits for an answer as :meth:`exec` does (``approvals="none"``: blocked at once).

        Args:
            contents: a folder's contents land in ``dest``; False: the folder itself, under its own name.

        Raises:
            PathRejected: ``source`` does not exist.
            ContentRejected: ``source`` holds something other than files, folders and symlinks.
        """
        packer = _packer(source, contents)
        path = _Requests.session(session, "/files")
        params = {"path": dest, "approvals": approvals}
        return _parse(
            ToolResult, self._call("PUT", path, params=params, content=iter(packer), waits=approvals == "wait")
        )

    @contextmanager
    def download_stream(self, session: str, path: str) -> Iterator[Iterator[bytes]]:
        """A tar of ``path`` (a file or folder, under its own name) as it is produced, in chunks.

        Raises:
            ExecutorError: refused, denied, a missing path or too large (``service.download_max_bytes``) before the
                stream starts; cut short after it started (iterating raises).
        """
        _check_socket(self._uds, self._where)
        timeout = httpx2.Timeout(self._timeout, read=None)
        params = {"path": path}
        try:
            with self._http.stream("GET", _Requests.session(session, "/files"), params=params, timeout=timeout) as got:
                if got.status_code >= 400:
                    _raise_for(got, got.read())
                _check_tar_response(got)

                def chunks() -> Iterator[bytes]:
                    received = 0
                    try:
                        for chunk in got.iter_raw():
                            received += len(chunk)
                            yield chunk
                    except httpx2.TransportError as exc:
                        raise _cut(self._where, exc, path, received, got) from exc
                    except httpx2.StreamError as exc:
                        raise _closed_stream() from exc

                yield chunks()
        except httpx2.TransportError as exc:
            raise ServiceUnavailable(
                f"no executor service answers at {self._where}: start one with `executor serve`"
            ) from exc

    def download_tar(self, session: str, path: str) -> bytes:
        """A tar of ``path`` (a file or folder) in the session (a gated tar pack), whole in memory: prefer
        :meth:`download` or :meth:`download_stream` for large folders."""
        with self.download_stream(session, path) as chunks:
            return b"".join(chunks)

    def download(self, session: str, path: str, dest: str | os.PathLike[str]) -> ArchiveStats:
        """Copy ``path`` from the session into local folder ``dest``, streamed through a temporary file (memory
        stays flat); every member is checked before anything is written (links out of ``dest``, absolute paths
        and devices are refused), and ownership is never taken from the archive.

        Raises:
            UnsafeTarget: the archive would write outside ``dest``; nothing was written.
        """
        with tempfile.TemporaryFile() as spool:
            with self.download_stream(session, path) as chunks:
                for chunk in chunks:
                    spool.write(chunk)
            spool.seek(0)
            return extract_tar(spool, Path(dest))

    def read_output(
        self,
        session: str,
        artifact_id: str,
        *,
        stream: str | None = None,
        start_line: int = 1,
        line_count: int | None = None,
        start_byte_in_line: int | None = None,
    ) -> ToolResult:
        """One page of a stored stream.

        Raises:
            ArtifactNotFound, StreamNotFound, OutputRangeError: see the in-process API.
        """
        params = _drop_none(
            stream=stream, start_line=start_line, line_count=line_count, start_byte_in_line=start_byte_in_line
        )
        path = _Requests.artifact(session, artifact_id)
        return _parse(ToolResult, self._call("GET", path, params=params))

    def search_output(
        self,
        session: str,
        artifact_id: str,
        *,
        pattern: str,
        stream: str | None = None,
        limit: int = 20,
        start_line: int = 1,
    ) -> ToolResult:
        """Search a stored stream line by line.

        Raises:
            ArtifactNotFound, PatternError, PatternTimeout: see the in-process API.
        """
        params = _drop_none(pattern=pattern, stream=stream, limit=limit, start_line=start_line)
        path = _Requests.artifact(session, artifact_id, "/search")
        return _parse(ToolResult, self._call("GET", path, params=params))

    # -- tasks -----------------------------------------------------------------------------------------------

    def start_task(
        self,
        session: str,
        command: str,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        approvals: _Approvals = "wait",
    ) -> ToolResult:
        """Start a background task; ``data["task_id"]`` names it."""
        body = _body(
            TaskStart, _command_refused, command=command, cwd=cwd, env=dict(env) if env else None, approvals=approvals
        )
        path = _Requests.session(session, "/tasks")
        return _parse(ToolResult, self._call("POST", path, content=body, waits=approvals == "wait"))

    def read_task(
        self, session: str, task_id: str, *, stream: Literal["stdout", "stderr"] = "stdout", offset: int = 0
    ) -> ToolResult:
        """One page of a task's stream from byte ``offset``: the view (``text``) and its exact bytes (``stdout`` or
        ``stderr``, the stream read); ``data["next_offset"]`` continues."""
        path = _Requests.task(session, task_id)
        return _parse(ToolResult, self._call("GET", path, params={"stream": stream, "offset": offset}))

    @contextmanager
    def follow_task(
        self, session: str, task_id: str, *, stream: Literal["stdout", "stderr"] = "stdout", offset: int = 0
    ) -> Iterator[Iterator[ToolResult]]:
        """Pages of a task's stream as they come (each with its exact bytes in ``stdout`` or ``stderr``), until the
        task ends."""
        path = _Requests.task(session, task_id)
        params = {"stream": stream, "offset": offset, "follow": "true"}
        with self._stream("GET", path, LineDecoder(_TASK_EVENT), params=params) as events:
            yield _pages(events)

    def stop_task(self, session: str, task_id: str) -> TaskView:
        """Kill a task's process group; how it ended."""
        return _parse(TaskView, self._call("DELETE", _Requests.task(session, task_id)))

    def list_tasks(self, session: str) -> list[TaskView]:
        """Your tasks in the session."""
        return _TASKS.validate_json(self._call("GET", _Requests.session(session, "/tasks")))

    # -- approvals -------------------------------------------------------------------------------------------

    def approvals(self) -> list[ApprovalView]:
        """Asks waiting for your answer."""
        return _APPROVALS.validate_json(self._call("GET", "/v1/approvals"))

    def answer(self, approval_id: str, *, approve: bool) -> None:
        """Approve (once, that exact action) or deny an ask.

        Raises:
            ApprovalNotFound: answered already, expired, or another token's.
        """
        body = _body(ApprovalAnswer, _answer_refused, approve=approve)
        self._call("POST", f"/v1/approvals/{_segment(approval_id, _no_approval)}", content=body)


def _pages(events: Iterator[Any]) -> Iterator[ToolResult]:
    for event in events:
        if isinstance(event, PageEvent):
            yield event.result
        elif isinstance(event, ErrorEvent):
            raise _exception(event.error.type, event.error.message)


def _drop_none(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


class AsyncClient:
    """The same calls as :class:`Client`, awaitable under asyncio or trio. Use it as ``async with``."""

    def __init__(
        self,
        url: str | None = None,
        *,
        socket: str | os.PathLike[str] | None = None,
        token: str | None = None,
        timeout_s: float = _DEFAULT_TIMEOUT_S,
    ) -> None:
        base, uds = _transport_kwargs(url, socket)
        self._uds = uds
        self._where = uds or base
        self._timeout = timeout_s
        self._http = httpx2.AsyncClient(
            base_url=base,
            transport=ClosingTransport(uds=uds),
            headers=_headers(token),
            timeout=httpx2.Timeout(timeout_s),
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def _call(self, method: str, path: str, *, waits: bool = False, **kwargs: Any) -> bytes:
        """See :meth:`Client._call`."""
        _check_socket(self._uds, self._where)
        if waits:
            kwargs["timeout"] = httpx2.Timeout(self._timeout, read=None)
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx2.TransportError as exc:
            raise _unanswered(self._where, self._timeout, exc) from exc
        _raise_for(response, response.content)
        return response.content

    @asynccontextmanager
    async def _stream(
        self, method: str, path: str, decoder: _Decoder, **kwargs: Any
    ) -> AsyncIterator[AsyncIterator[Any]]:
        _check_socket(self._uds, self._where)
        timeout = httpx2.Timeout(self._timeout, read=None)
        try:
            async with self._http.stream(method, path, timeout=timeout, **kwargs) as response:
                if response.status_code >= 400:
                    _raise_for(response, await response.aread())
                _check_media(response, decoder)

                async def events() -> AsyncGenerator[Any]:
                    try:
                        async with aclosing(response.aiter_bytes()) as received:
                            async for data in received:
                                for event in decoder.feed(data):
                                    yield event
                        decoder.end()
                    except httpx2.TransportError as exc:
                        raise ServiceUnavailable(f"the service at {self._where} went away mid-stream") from exc
                    except FrameError as exc:
                        raise ServiceUnavailable(f"the exec stream from {self._where} broke off: {exc}") from exc
                    except httpx2.StreamError as exc:
                        raise _closed_stream() from exc

                async with aclosing(events()) as stream:
                    yield stream
        except httpx2.TransportError as exc:
            raise ServiceUnavailable(
                f"no executor service answers at {self._where}: start one with `executor serve`"
            ) from exc

    async def health(self) -> Health:
        """The service's state."""
        return _parse(Health, await self._call("GET", "/v1/health"))

    async def metrics(self) -> str:
        """The Prometheus text exposition."""
        return (await self._call("GET", "/v1/metrics")).decode()

    async def create_session(
        self,
        *,
        profile: str | None = None,
        image: str | None = None,
        name: str | None = None,
        idle_s: float | Literal["none"] | None = None,
    ) -> SessionView:
        """See :meth:`Client.create_session`."""
        body = _body(SessionCreate, _session_refused, profile=profile, image=image, name=name, idle_s=idle_s)
        return _parse(SessionView, await self._call("POST", "/v1/sessions", content=body))

    async def list_sessions(self) -> list[SessionView]:
        """Your sessions."""
        return _SESSIONS.validate_json(await self._call("GET", "/v1/sessions"))

    async def session(self, session: str) -> SessionView:
        """See :meth:`Client.session`."""
        return _parse(SessionView, await self._call("GET", _Requests.session(session)))

    async def stop_session(self, session: str) -> None:
        """See :meth:`Client.stop_session`."""
        await self._call("DELETE", _Requests.session(session))

    @asynccontextmanager
    async def stream_exec(
        self,
        session: str,
        command: str,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        timeout_ms: int | None = None,
        focus_mode: Literal["off", "shadow", "on"] | None = None,
        intent: str | None = None,
        approvals: _Approvals = "wait",
    ) -> AsyncIterator[AsyncIterator[Any]]:
        """See :meth:`Client.stream_exec`."""
        body = _Requests.exec_body(
            command,
            cwd=cwd,
            env=env,
            stdin=stdin,
            timeout_ms=timeout_ms,
            focus_mode=focus_mode,
            intent=intent,
            approvals=approvals,
        )
        path = _Requests.session(session, "/exec")
        decoder = ExecEvents(_EXEC_EVENT)
        async with self._stream("POST", path, decoder, content=body, headers=_ACCEPT_FRAMES) as events:
            yield events

    async def exec(
        self,
        session: str,
        command: str,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        timeout_ms: int | None = None,
        focus_mode: Literal["off", "shadow", "on"] | None = None,
        intent: str | None = None,
        approvals: _Approvals = "wait",
    ) -> ToolResult:
        """See :meth:`Client.exec`."""
        finals: list[Any] = []
        async with self.stream_exec(
            session,
            command,
            cwd=cwd,
            env=env,
            stdin=stdin,
            timeout_ms=timeout_ms,
            focus_mode=focus_mode,
            intent=intent,
            approvals=approvals,
        ) as events:
            async for event in events:
                if event.kind in ("result", "error"):
                    finals.append(event)
        return _final(finals)

    async def write(
        self,
        session: str,
        path: str,
        content: bytes | str,
        *,
        parents: bool = False,
        mode: str | None = None,
        approvals: _Approvals = "wait",
    ) -> ToolResult:
        """See :meth:`Client.write`."""
        data = content.encode() if isinstance(content, str) else content
        body = _body(
            WriteRequest, _write_refused, path=path, content=data, parents=parents, mode=mode, approvals=approvals
        )
        path_ = _Requests.session(session, "/write")
        return _parse(ToolResult, await self._call("POST", path_, content=body, waits=approvals == "wait"))

    async def upload(
        self,
        session: str,
        source: str | os.PathLike[str],
        dest: str,
        *,
        contents: bool = True,
        approvals: _Approvals = "wait",
    ) -> ToolResult:
        """See :meth:`Client.upload`."""
        packer = iter(_packer(source, contents))

        async def body() -> AsyncIterator[bytes]:
            while True:
                chunk = await anyio.to_thread.run_sync(next, packer, None)
                if chunk is None:
                    return
                yield chunk

        path = _Requests.session(session, "/files")
        params = {"path": dest, "approvals": approvals}
        return _parse(
            ToolResult, await self._call("PUT", path, params=params, content=body(), waits=approvals == "wait")
        )

    @asynccontextmanager
    async def download_stream(self, session: str, path: str) -> AsyncIterator[AsyncIterator[bytes]]:
        """See :meth:`Client.download_stream`."""
        _check_socket(self._uds, self._where)
        timeout = httpx2.Timeout(self._timeout, read=None)
        params = {"path": path}
        url = _Requests.session(session, "/files")
        try:
            async with self._http.stream("GET", url, params=params, timeout=timeout) as got:
                if got.status_code >= 400:
                    _raise_for(got, await got.aread())
                _check_tar_response(got)

                async def chunks() -> AsyncGenerator[bytes]:
                    received = 0
                    try:
                        async with aclosing(got.aiter_raw()) as raw:
                            async for chunk in raw:
                                received += len(chunk)
                                yield chunk
                    except httpx2.TransportError as exc:
                        raise _cut(self._where, exc, path, received, got) from exc
                    except httpx2.StreamError as exc:
                        raise _closed_stream() from exc

                async with aclosing(chunks()) as stream:
                    yield stream
        except httpx2.TransportError as exc:
            raise ServiceUnavailable(
                f"no executor service answers at {self._where}: start one with `executor serve`"
            ) from exc

    async def download_tar(self, session: str, path: str) -> bytes:
        """See :meth:`Client.download_tar`."""
        parts: list[bytes] = []
        async with self.download_stream(session, path) as chunks:
            async for chunk in chunks:
                parts.append(chunk)
        return b"".join(parts)

    async def download(self, session: str, path: str, dest: str | os.PathLike[str]) -> ArchiveStats:
        """See :meth:`Client.download`."""
        with tempfile.TemporaryFile() as spool:
            async with self.download_stream(session, path) as chunks:
                async for chunk in chunks:
                    await anyio.to_thread.run_sync(spool.write, chunk)
            spool.seek(0)
            return await anyio.to_thread.run_sync(extract_tar, spool, Path(dest))

    async def read_output(
        self,
        session: str,
        artifact_id: str,
        *,
        stream: str | None = None,
        start_line: int = 1,
        line_count: int | None = None,
        start_byte_in_line: int | None = None,
    ) -> ToolResult:
        """See :meth:`Client.read_output`."""
        params = _drop_none(
            stream=stream, start_line=start_line, line_count=line_count, start_byte_in_line=start_byte_in_line
        )
        path = _Requests.artifact(session, artifact_id)
        return _parse(ToolResult, await self._call("GET", path, params=params))

    async def search_output(
        self,
        session: str,
        artifact_id: str,
        *,
        pattern: str,
        stream: str | None = None,
        limit: int = 20,
        start_line: int = 1,
    ) -> ToolResult:
        """See :meth:`Client.search_output`."""
        params = _drop_none(pattern=pattern, stream=stream, limit=limit, start_line=start_line)
        path = _Requests.artifact(session, artifact_id, "/search")
        return _parse(ToolResult, await self._call("GET", path, params=params))

    async def start_task(
        self,
        session: str,
        command: str,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        approvals: _Approvals = "wait",
    ) -> ToolResult:
        """See :meth:`Client.start_task`."""
        body = _body(
            TaskStart, _command_refused, command=command, cwd=cwd, env=dict(env) if env else None, approvals=approvals
        )
        path = _Requests.session(session, "/tasks")
        return _parse(ToolResult, await self._call("POST", path, content=body, waits=approvals == "wait"))

    async def read_task(
        self, session: str, task_id: str, *, stream: Literal["stdout", "stderr"] = "stdout", offset: int = 0
    ) -> ToolResult:
        """See :meth:`Client.read_task`."""
        path = _Requests.task(session, task_id)
        return _parse(ToolResult, await self._call("GET", path, params={"stream": stream, "offset": offset}))

    @asynccontextmanager
    async def follow_task(
        self, session: str, task_id: str, *, stream: Literal["stdout", "stderr"] = "stdout", offset: int = 0
    ) -> AsyncIterator[AsyncIterator[ToolResult]]:
        """See :meth:`Client.follow_task`."""
        path = _Requests.task(session, task_id)
        params = {"stream": stream, "offset": offset, "follow": "true"}
        async with self._stream("GET", path, LineDecoder(_TASK_EVENT), params=params) as events:

            async def pages() -> AsyncIterator[ToolResult]:
                async for event in events:
                    if isinstance(event, PageEvent):
                        yield event.result
                    elif isinstance(event, ErrorEvent):
                        raise _exception(event.error.type, event.error.message)

            yield pages()

    async def stop_task(self, session: str, task_id: str) -> TaskView:
        """See :meth:`Client.stop_task`."""
        path = _Requests.task(session, task_id)
        return _parse(TaskView, await self._call("DELETE", path))

    async def list_tasks(self, session: str) -> list[TaskView]:
        """See :meth:`Client.list_tasks`."""
        return _TASKS.validate_json(await self._call("GET", _Requests.session(session, "/tasks")))

    async def approvals(self) -> list[ApprovalView]:
        """See :meth:`Client.approvals`."""
        return _APPROVALS.validate_json(await self._call("GET", "/v1/approvals"))

    async def answer(self, approval_id: str, *, approve: bool) -> None:
        """See :meth:`Client.answer`."""
        body = _body(ApprovalAnswer, _answer_refused, approve=approve)
        await self._call("POST", f"/v1/approvals/{_segment(approval_id, _no_approval)}", content=body)
