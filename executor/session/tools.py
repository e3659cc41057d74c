"""The :class:`Session` object and its tools: ``bash``, ``write_file``, ``read_output``, ``search_output`` and tasks.

Each tool prepares its exact action, gates it (:mod:`executor.session.gating`), executes it inside the one
capture/journal bracket (``Gatekeeper.execution``), and presents the stored result
(:mod:`executor.session.presentation`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import shlex
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal

import trio

from executor.artifacts import SessionArtifacts
from executor.artifacts.hints import Surface
from executor.config import Profile, Settings
from executor.errors import (
    ActionDenied,
    AgentError,
    ApprovalRequired,
    CommandRejected,
    ContentRejected,
    ExecutorError,
    SandboxLost,
    SessionClosed,
    SessionStopped,
    SpawnFailed,
    WriteError,
)
from executor.gate.approvals import ApprovalHandler
from executor.gate.gate import Gate
from executor.gate.shell import UNPACKERS, parse_command
from executor.journal import JournalWriter
from executor.models import BashAction, CaptureSink, RunResult, RunSpec, StdinFile, StreamName, WriteAction
from executor.sandbox.agent.client import AgentClient
from executor.sandbox.base import SessionInfo
from executor.sandbox.usage import usage_path
from executor.session.api import (
    USE_DEFAULT,
    ArtifactBytes,
    FileContent,
    FocusMode,
    HandlerChoice,
    Outcome,
    TaskBytes,
    TaskInfo,
    ToolResult,
)
from executor.session.gating import Gatekeeper, naming_kept
from executor.session.output import OutputTools
from executor.session.presentation import Views, limits_note, orphans_note, outcome_of, run_header
from executor.session.tasks import BackgroundTasks
from executor.tools.archive import ArchiveBounds, archive_bounds, list_members
from executor.tools.bash import build_run_spec, check_utf8, cwd_rejection
from executor.tools.write import AGENT_PATH, WriteTool

__all__ = ["Session"]

_ARGV_INLINE_BYTES = 96 * 1024
"""An exec argument list larger than this is handed to bash on stdin rather than in the RUN frame."""


class Session:
    """One session container, its agent connection, its artifacts and its journal.

    Obtain one from :meth:`Executor.open_session` or :meth:`Executor.attach_session`; methods may be called from
    several tasks at once.
    """

    def __init__(
        self,
        info: SessionInfo,
        profile: Profile,
        *,
        settings: Settings,
        artifacts: SessionArtifacts,
        client: AgentClient,
        journal: JournalWriter,
        gate: Gate,
        nursery: trio.Nursery,
        approval_handler: ApprovalHandler | None,
        surface: Surface = "python",
        was_stopped: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        """``was_stopped`` tells whether the session is being stopped or gone (:meth:`Backend.was_stopped`): a run
        that then loses its agent is reported cancelled by the stop, not as a lost sandbox."""
        self.info = info
        self._was_stopped = was_stopped
        self._closed = False
        self._stopped = False
        """The session was found stopped under a run (it stays so)."""
        self.profile = profile
        self._client = client
        self._journal = journal
        self._settings = settings
        self._default_handler = approval_handler
        self.artifacts = artifacts
        self._writer = WriteTool(
            client, profile, self._settings.write, allow_outside_workspace=True, builtin_denials=False
        )
        self._gatekeeper = Gatekeeper(
            session_id=info.id,
            profile=profile,
            gate=gate,
            journal=journal,
            artifacts=self.artifacts,
            usage=usage_path(settings.home, info.id),
        )
        self._views = Views(
            session_id=info.id,
            settings=self._settings,
            artifacts=self.artifacts,
            gatekeeper=self._gatekeeper,
            surface=surface,
        )
        self._output = OutputTools(artifacts=self.artifacts, views=self._views)
        self._tasks = BackgroundTasks(
            client=client,
            artifacts=self.artifacts,
            journal=journal,
            views=self._views,
            nursery=nursery,
            legacy_records=self._settings.home / "sessions" / info.id / "tasks.json",
            max_running=self._settings.bash.max_background_tasks,
            display_max_chars=self._settings.artifacts.display_max_chars,
        )

    @property
    def id(self) -> str:
        """The session id (``s-`` and 12 hex digits)."""
        return self.info.id

    @property
    def name(self) -> str | None:
        """The session's name, if it was given one."""
        return self.info.name

    @property
    def owner(self) -> str | None:
        """The owner token the session was opened with."""
        return self.info.owner

    @property
    def journal_path(self) -> Path:
        """The session's decision journal (ndjson)."""
        return self._journal.path

    def _mark_closed(self) -> None:
        """Its block ended (the executor calls this): every later call raises :class:`SessionClosed`."""
        self._closed = True

    def _check_open(self, *, agent: bool = True) -> None:
        """Refuse a call after the session's block ended, or (``agent``: a call its agent serves) once it is known
        to have been stopped; its stored artifacts stay readable."""
        if self._closed:
            raise SessionClosed(
                f"session {self.id} was used after the block that opened it ended (its connection and journal are "
                "closed); open or attach it again: the session itself may still run"
            )
        if agent and self._stopped:
            # Learnt when its agent went away under an earlier call: nothing can run in it any more.
            raise SessionStopped(
                f"session {self.id} was stopped; open a new one (its artifacts stay readable with read_output)"
            )

    @contextlib.asynccontextmanager
    async def _stops_said(self) -> AsyncIterator[None]:
        """Around a call its agent serves: the agent going away under it because the session was stopped (not
        lost) is said so.

        Raises:
            SessionStopped: it was.
        """
        try:
            yield
        except SandboxLost as exc:
            if await self._stopped_now():
                raise SessionStopped(
                    f"session {self.id} was stopped while this ran; its tasks were stopped with it"
                ) from exc
            raise

    async def _stopped_now(self) -> bool:
        """Whether the session is being stopped or gone (asked once the agent went away; it stays so)."""
        if not self._stopped and self._was_stopped is not None:
            with contextlib.suppress(ExecutorError):
                self._stopped = await self._was_stopped()
        return self._stopped

    async def _lost(self, elapsed_ms: float) -> RunResult:
        """The result of a run whose agent went away: cancelled when the session was being stopped (by any process
        of the home, or its idle limit), else a lost sandbox."""
        return _lost(elapsed_ms, stopped=await self._stopped_now())

    async def wait_lost(self) -> None:
        """Return once the connection to the session's agent is gone (its container died, or the session closed):
        a holder of the session learns it then, not at its next call."""
        await self._client.wait_closed()

    # -- gating ------------------------------------------------------------------------------------------------

    def _handler(self, given: HandlerChoice) -> ApprovalHandler | None:
        return self._default_handler if given is USE_DEFAULT else given

    async def _gate(
        self,
        action_id: str,
        action: BashAction | WriteAction,
        approval_handler: HandlerChoice,
        *,
        tool: Literal["bash", "write_file", "task_start"],
        current_identity: Callable[[], Awaitable[str]],
    ) -> ToolResult | None:
        """Gate ``action``; None means run it, else the (sanitized) result that says why it did not run."""
        refusal = await self._gatekeeper.gate_action(
            action_id, action, self._handler(approval_handler), current_identity=current_identity
        )
        if refusal is None:
            return None
        text = await self._views.sanitize(refusal.text, action_id=action_id)
        return ToolResult(tool=tool, action_id=action_id, outcome=refusal.outcome, text=text)

    async def _gate_run(
        self,
        spec: RunSpec,
        approval_handler: HandlerChoice,
        *,
        tool: Literal["bash", "task_start"],
        exec_argv: tuple[str, ...] | None = None,
    ) -> tuple[str, ToolResult | None]:
        """Gate the exact run ``spec``; returns its action id and, unless it may run, the result to return."""
        stdin_sha256, stdin_program, stdin_members = await _stdin_facts(
            spec, self._settings.gate.stdin_program_max_bytes, archive_bounds(self._settings.archive)
        )
        action = BashAction(
            session_id=self.id,
            command=spec.command,
            cwd=spec.cwd,
            env=spec.env,
            stdin_sha256=stdin_sha256,
            stdin_program=stdin_program,
            stdin_members=stdin_members,
            timeout_ms=spec.timeout_ms,
            exec_argv=exec_argv,
        )
        action_id = self._gatekeeper.new_action_id()

        async def same_identity() -> str:
            return action.identity()

        gated = await self._gate(action_id, action, approval_handler, tool=tool, current_identity=same_identity)
        return action_id, gated

    # -- tools -------------------------------------------------------------------------------------------------

    async def bash(
        self,
        command: str,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bytes | StdinFile | None = None,
        timeout_ms: int | None = None,
        focus_mode: FocusMode | None = None,
        intent: str | None = None,
        approval_handler: HandlerChoice = USE_DEFAULT,
    ) -> ToolResult:
        """Run ``command`` as a fresh ``bash -c`` in the session, gated, captured and presented.

        Args:
            command: the bash command.
            cwd: working directory (default: the workspace; relative paths are inside it).
            env: explicit environment entries, merged last.
            stdin: bytes for stdin (then closed), or a host file streamed there (an upload's archive, never held
                whole; the gate binds the hash of its bytes); None means /dev/null.
            timeout_ms: deadline (default ``bash.timeout_ms``, at most ``bash.max_timeout_ms``).
            focus_mode: ``off``/``shadow``/``on`` for this call (default ``focus.mode``).
            intent: what the caller is looking for in the output (helps focus).
            approval_handler: who answers an ask for this call (default: the executor's handler; None: nobody).

        Raises:
            CommandRejected: refused before anything ran (size, timeout above the cap, stdin size, text that is not
                UTF-8).
        """
        self._check_open()
        if intent is not None:
            check_utf8(intent, "the intent")
        spec = build_run_spec(
            command,
            settings=self._settings.bash,
            profile=self.profile,
            cwd=cwd,
            env=env,
            stdin=stdin,
            timeout_ms=timeout_ms,
        )
        action_id, gated = await self._gate_run(spec, approval_handler, tool="bash")
        if gated is not None:
            return gated
        # commit_at_exit=False: the sanitized result below commits (Views.sanitize) before it is returned.
        async with self._gatekeeper.execution(
            action_id, kind="bash", streams=("stdout", "stderr"), commit_at_exit=False
        ) as execution:
            try:
                result = await self._client.run(spec, execution.capture)
            except AgentError as exc:
                rejected = cwd_rejection(exc, spec.cwd)
                if rejected is None:
                    raise
                execution.finish(status="rejected")
                raise rejected from None
            except SandboxLost:
                result = await self._lost(execution.elapsed_ms())
            record = execution.finish(
                status="ok" if result.cause == "exited" else result.cause,
                cause=result.cause,
                exit_code=result.exit_code,
                duration_ms=result.duration_ms,
            )
        view = await self._views.present_run(
            record.id, command=command, mode=focus_mode or self._settings.focus.mode, intent=intent
        )
        parts = [run_header(result, spec.timeout_ms, spec.grace_ms, stopped=self._stopped), view]
        if note := orphans_note(result):
            parts.append(note)
        if note := limits_note(result, self.profile):
            parts.append(note)
        if result.drain_cut:
            parts.append("[a process still held the output pipes after the command exited; reading stopped]")
        with naming_kept(record):
            text = await self._views.sanitize("\n".join(parts), artifact_id=record.id)
        stdout, stdout_whole = self._views.raw_stream(record, "stdout")
        stderr, stderr_whole = self._views.raw_stream(record, "stderr")
        return ToolResult(
            tool="bash",
            stdout=stdout,
            stdout_whole=stdout_whole,
            stderr=stderr,
            stderr_whole=stderr_whole,
            outcome=outcome_of(result),
            text=text,
            action_id=action_id,
            artifact_id=record.id,
            run=result,
            exit_code=None if result.exit_code is None and result.signal is None else result.display_code,
        )

    async def write_file(
        self,
        path: str,
        content: bytes | str,
        *,
        create_parents: bool = False,
        approval_handler: HandlerChoice = USE_DEFAULT,
    ) -> ToolResult:
        """Create or replace a file in the session, staged and symlink-safe, gated on the exact path and content.

        A write the container refuses (a missing folder, a symlink on the path, a non-regular target), whether it
        is found while the target is reviewed or while it is written, is a result with outcome ``error`` and
        nothing written: the same outcome on every surface. Its ``data`` is ``{"error": CODE, "errno": N}``
        (``permission``: the session user could not write the file in place, for example after ``chmod -w``, even
        though its folder is writable; ``not_found``, ``not_regular``, ``symlink``, ``read_only``, ...).

        Args:
            path: the target (relative paths are inside the workspace).
            content: the bytes (or text, written as UTF-8).
            create_parents: create missing parent folders (as the session user); without it a missing folder is
                refused.
            approval_handler: who answers an ask for this call.

        Raises:
            PathRejected: the path is refused before any container call.
            ContentRejected: the content is larger than ``write.max_bytes``.
        """
        self._check_open()
        try:
            data = content.encode("utf-8") if isinstance(content, str) else content
        except UnicodeEncodeError as exc:
            raise ContentRejected(
                f"the content is not valid UTF-8 (an undecodable byte at character {exc.start}); pass bytes to "
                "write binary data"
            ) from None
        try:
            prepared = await self._writer.prepare(path, data, create_parents=create_parents)
        except WriteError as exc:
            if isinstance(exc, ValueError):  # PathRejected, ContentRejected: bad input, refused before any call
                raise
            text = await self._views.sanitize(f"[write refused: {exc}]\nnothing was written to {path}")
            return ToolResult(tool="write_file", outcome="error", text=text, data=_refusal_data(exc))
        action = WriteAction(
            session_id=self.id,
            path=prepared.path,
            content_sha256=prepared.content_sha256,
            size=prepared.size,
            reviewed=prepared.reviewed,
            diff=prepared.diff,
            git_dir=prepared.git_dir,
            create_parents=prepared.create_parents,
        )
        action_id = self._gatekeeper.new_action_id()

        async def current_identity() -> str:
            again = await self._writer.prepare(path, data, create_parents=create_parents)
            update = {"reviewed": again.reviewed, "diff": again.diff, "git_dir": again.git_dir}
            return action.model_copy(update=update).identity()

        gated = await self._gate(
            action_id, action, approval_handler, tool="write_file", current_identity=current_identity
        )
        if gated is not None:
            return gated
        outcome: Outcome = "completed"
        data_out: dict[str, object] | None = None
        # The agent replaces the file by one atomic rename, which a cancel can come just after: the file then holds
        # either its old content or the whole new one, and only reading it tells which.
        abort_note = (
            "output",
            f"[write to {prepared.path} cancelled: it may or may not have been made (the file holds either its old "
            "content or the whole new one); read the file to know]".encode(),
        )
        async with self._gatekeeper.execution(  # the sanitized result below commits (Views.sanitize)
            action_id, kind="write_file", streams=("output",), on_abort=abort_note, commit_at_exit=False
        ) as execution:
            try:
                result = await self._writer.execute(prepared, data)
            except WriteError as exc:
                outcome = "error"
                data_out = _refusal_data(exc)
                summary = f"[write refused: {exc}]"
                if not exc.committed:
                    summary += f"\nnothing was written to {prepared.path}"
            else:
                data_out = result.model_dump(mode="json")
                verb = "created" if result.created else "replaced"
                summary = (
                    f"[{verb} {result.path}: {prepared.size} bytes, mode {oct(result.state.mode)}, sha256 "
                    f"{prepared.content_sha256[:16]}…, verified by read-back]\n{prepared.diff}"
                )
            execution.capture.feed("output", summary.encode("utf-8"))
            record = execution.finish(
                status="ok" if outcome == "completed" else "error", exit_code=0 if outcome == "completed" else 1
            )
        with naming_kept(record):
            text = await self._views.sanitize(self._views.bounded(record.id), artifact_id=record.id)
        return ToolResult(
            tool="write_file", outcome=outcome, text=text, action_id=action_id, artifact_id=record.id, data=data_out
        )

    async def exec(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout_ms: int | None = None,
        user: str | None = None,
        max_output_bytes: int | None = None,
        approval_handler: HandlerChoice = USE_DEFAULT,
    ) -> ToolResult:
        """Run an argument list directly (no shell), gated and journaled like :meth:`bash`, for programs.

        The gate reads the list as its shell rendering (``shlex.join``); the action's identity binds the exact list,
        stdin's hash, env, cwd and deadline. ``argv[0]`` without a ``/`` is looked up in ``PATH`` (through
        ``/usr/bin/env``). A program that cannot be started is a ``failed`` result with exit code 126 (not
        executable) or 127 (not found) and the reason on stderr, as a shell reports it. Streams are stored whole as
        an artifact (up to ``artifacts.capture_max_bytes``, then head and tail) and returned whole up to
        ``max_output_bytes``; no model view is rendered.

        Args:
            argv: the program and its arguments.
            stdin: bytes for stdin (then closed); None means /dev/null.
            cwd: working directory (default: the workspace; relative paths are inside it).
            env: explicit environment entries, merged last.
            timeout_ms: deadline (default ``bash.timeout_ms``, at most ``bash.max_timeout_ms``).
            user: the session user (its uid, ``uid:gid`` or None) only: commands never run as another user.
            max_output_bytes: bytes of each stream returned (default ``bash.max_stdin_bytes``); more sets
                ``stdout_whole``/``stderr_whole`` false.
            approval_handler: who answers an ask for this call.

        Raises:
            CommandRejected: refused before anything ran (empty list, NUL, size, timeout above the cap, another user).
        """
        self._check_open()
        if isinstance(argv, (str, bytes)):
            # A string is a sequence too: exec("ls") ran the program 'l' with the argument 's'.
            raise CommandRejected(
                "exec takes an argument list (['ls', '-l']), not a string; use bash() for a command line"
            )
        words = tuple(argv)
        if not words or not all(isinstance(word, str) for word in words) or not words[0]:
            raise CommandRejected("exec needs a non-empty list of strings: the program, then its arguments")
        self._check_user(user)
        spec = build_run_spec(
            shlex.join(words),
            settings=self._settings.bash,
            profile=self.profile,
            cwd=cwd,
            env=env,
            stdin=stdin,
            timeout_ms=timeout_ms,
        )
        cap = self._settings.bash.max_stdin_bytes if max_output_bytes is None else max_output_bytes
        if cap < 0:
            raise CommandRejected(f"max_output_bytes must be >= 0, got {cap}")
        action_id, gated = await self._gate_run(spec, approval_handler, tool="bash", exec_argv=words)
        if gated is not None:
            return ToolResult(tool="exec", outcome=gated.outcome, text=gated.text, action_id=action_id)
        spawn: list[str] | None = list(words) if words[0].startswith("/") else ["/usr/bin/env", "--", *words]
        run_spec = spec
        if sum(len(word.encode("utf-8", "surrogateescape")) + 1 for word in words) > _ARGV_INLINE_BYTES:
            # Too large for one protocol frame: bash reads `exec -- ARGV` from its stdin pipe and replaces itself
            # with the program, so the program still gets exactly this list (the kernel's ARG_MAX still applies).
            spawn, run_spec = None, spec.model_copy(update={"command": "exec -- " + spec.command})
        async with self._gatekeeper.execution(action_id, kind="exec", streams=("stdout", "stderr")) as execution:
            sink = _TeeSink(execution.capture, cap)
            try:
                result = await self._client.run(run_spec, sink, argv=spawn)
            except SandboxLost:
                result = await self._lost(execution.elapsed_ms())
            except AgentError as exc:
                rejected = cwd_rejection(exc, spec.cwd)
                if rejected is not None:
                    execution.finish(status="rejected")
                    raise rejected from None
                if not isinstance(exc, SpawnFailed) or "could not start the command: exec: " not in str(exc):
                    raise  # not the program's execve failing (a fork refused, a setup step): the executor's error
                # as a shell reports it: 126 found but not executable, 127 not found
                code = 127 if "No such file" in str(exc) else 126
                message = f"exec: {words[0]}: {str(exc).rsplit(': ', 1)[-1]}\n".encode()
                sink.feed("stderr", message)
                result = RunResult(
                    cause="exited",
                    exit_code=code,
                    signal=None,
                    duration_ms=execution.elapsed_ms(),
                    cpu_ms=0.0,
                    max_rss_kb=0,
                    stream_bytes={"stderr": len(message)},
                )
            record = execution.finish(
                status="ok" if result.cause == "exited" else result.cause,
                cause=result.cause,
                exit_code=result.exit_code,
                duration_ms=result.duration_ms,
            )
        return ToolResult(
            tool="exec",
            outcome=outcome_of(result),
            # No status when the agent never reported one (the sandbox lost, or the session stopped under the run).
            exit_code=None if result.exit_code is None and result.signal is None else result.display_code,
            stdout=bytes(sink.data["stdout"]),
            stderr=bytes(sink.data["stderr"]),
            stdout_whole="stdout" not in sink.overflow,
            stderr_whole="stderr" not in sink.overflow,
            text=run_header(result, spec.timeout_ms, spec.grace_ms, stopped=self._stopped),
            action_id=action_id,
            artifact_id=record.id,
            run=result,
        )

    def _check_user(self, user: str | None) -> None:
        if user is None or user in (str(self.profile.uid), self.profile.user):
            return
        raise CommandRejected(
            f"commands run only as the session user ({self.profile.user}); running as {user!r} is not supported: "
            "the agent drops every command to one unprivileged user, and root is never used"
        )

    async def read_file(
        self, path: str, *, max_bytes: int | None = None, approval_handler: HandlerChoice = USE_DEFAULT
    ) -> FileContent:
        """Read a whole regular file as the session user, gated like ``cat -- PATH`` and journaled.

        The same path rules as :meth:`write_file` apply (relative paths are inside the workspace; a symlink on the
        path is refused). The content is returned, not stored as an artifact and not shown to a model.

        Args:
            path: the file.
            max_bytes: largest file accepted (default and ceiling ``write.read_max_bytes``).
            approval_handler: who answers an ask for this call.

        Raises:
            PathRejected: the path is refused before any container call.
            ActionDenied, ApprovalRequired: the gate refused the read (nothing was read).
            UnsafeTarget: a symlink on the path, or not a regular file (``errno`` EISDIR for a directory).
            WriteFailed: not found (``errno`` ENOENT), not readable by the session user (EACCES), larger than
                ``max_bytes`` (EFBIG).
        """
        self._check_open()
        limit = self._settings.write.read_max_bytes
        cap = limit if max_bytes is None else min(max(max_bytes, 0), limit)
        resolved = self._writer.resolve(path)
        read_argv = (AGENT_PATH, "fs-read", resolved, "--max", str(cap))
        spec = build_run_spec(shlex.join(["cat", "--", resolved]), settings=self._settings.bash, profile=self.profile)
        action_id, gated = await self._gate_run(spec, approval_handler, tool="bash", exec_argv=read_argv)
        if gated is not None:
            refusal = ApprovalRequired if gated.outcome == "blocked" else ActionDenied
            raise refusal(f"reading {resolved} was refused by the gate: {gated.text}")
        async with self._gatekeeper.execution(action_id, kind="read_file", streams=("output",)) as execution:
            try:
                resolved, data, digest = await self._writer.read(path, max_bytes=cap)
            except WriteError as exc:
                execution.capture.feed("output", f"[read refused: {exc}]".encode())
                execution.finish(status="error", exit_code=1)
                raise
            execution.capture.feed("output", f"[read {resolved}: {len(data)} bytes, sha256 {digest}]".encode())
            execution.finish(status="ok", exit_code=0)
        return FileContent(path=resolved, data=data, sha256=digest, action_id=action_id)

    async def read_artifact(
        self, artifact_id: str, *, stream: str | None = None, offset: int = 0, max_bytes: int = 1 << 20
    ) -> ArtifactBytes:
        """Raw stored bytes of one of this session's artifacts, for programs: no page rendering, no sanitizing, no
        judgment and no journal entry (use :meth:`read_output` for what a model reads). Read on from
        ``offset + len(data)`` until ``stored_bytes``.

        Raises:
            ArtifactNotFound: unknown, malformed or another session's id (one message for all).
            ArtifactEvicted, StreamNotFound, OutputRangeError: see :meth:`read_output`.
        """
        self._check_open(agent=False)
        record = self.artifacts.record(artifact_id)
        name = stream if stream is not None else next(iter(record.streams), "output")
        # the index's connection belongs to this thread; the read is one bounded pread
        data, stored, dropped = self.artifacts.read_bytes(artifact_id, stream=name, offset=offset, max_bytes=max_bytes)
        return ArtifactBytes(
            artifact_id=record.id, stream=name, offset=offset, data=data, stored_bytes=stored, dropped_bytes=dropped
        )

    async def read_output(
        self,
        artifact_id: str,
        *,
        stream: str | None = None,
        start_line: int = 1,
        line_count: int | None = None,
        start_byte_in_line: int | None = None,
    ) -> ToolResult:
        """One page of a stored stream, bounded and sanitized like any tool result.

        Raises:
            ArtifactNotFound: unknown, malformed or another session's id (one message for all).
            ArtifactEvicted: evicted by retention.
            StreamNotFound: the artifact has no such stream.
            OutputRangeError: a range out of bounds.
        """
        self._check_open(agent=False)
        await self._tasks.settle_for(artifact_id)
        return await self._output.read_output(
            artifact_id,
            stream=stream,
            start_line=start_line,
            line_count=line_count,
            start_byte_in_line=start_byte_in_line,
        )

    async def search_output(
        self,
        artifact_id: str,
        *,
        pattern: str,
        stream: str | None = None,
        limit: int = 20,
        start_line: int = 1,
    ) -> ToolResult:
        """Search a stored stream line by line; resume with the page's ``next_start_line``.

        Raises:
            ArtifactNotFound, ArtifactEvicted, StreamNotFound: see :meth:`read_output`.
            PatternError: the pattern does not compile or is too long.
            PatternTimeout: the pattern ran past ``artifacts.search_timeout_s``.
        """
        self._check_open(agent=False)
        await self._tasks.settle_for(artifact_id)
        return await self._output.search_output(
            artifact_id,
            pattern=pattern,
            stream=stream,
            limit=limit,
            start_line=start_line,
        )

    # -- background tasks --------------------------------------------------------------------------------------

    async def start_task(
        self,
        command: str,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        owner: str | None = None,
        approval_handler: HandlerChoice = USE_DEFAULT,
    ) -> ToolResult:
        """Start ``command`` in the background (gated like bash; no deadline) and return at once.

        The result's ``data`` holds the ``task_id``; read output with :meth:`read_task` by byte offsets. Its
        streams are mirrored into an artifact (``artifact_id``) while this session object lives.

        Raises:
            CommandRejected: refused before anything ran, or too many tasks already run.
        """
        self._check_open()
        spec = build_run_spec(
            command, settings=self._settings.bash, profile=self.profile, cwd=cwd, env=env, background=True
        )
        await self._tasks.check_capacity()
        action_id, gated = await self._gate_run(spec, approval_handler, tool="task_start")
        if gated is not None:
            return gated
        return await self._tasks.start(spec, command=command, owner=owner, action_id=action_id)

    async def read_task(
        self,
        task_id: str,
        *,
        stream: Literal["stdout", "stderr"] = "stdout",
        offset: int = 0,
        max_bytes: int = 65_536,
        owner: str | None = None,
    ) -> ToolResult:
        """Read a background task's stream from whole-stream byte ``offset``; ``data.next_offset`` continues.

        A page holds at most ``max_bytes`` bytes and what the display budget (``artifacts.display_max_chars``)
        shows of them: it ends after a line (or between characters, for a line longer than the budget), its header
        names the bytes shown, and ``data.next_offset`` is where they end, so following it shows every byte once.

        Raises:
            TaskNotFound: no such task, or it belongs to another owner.
        """
        self._check_open()
        async with self._stops_said():
            return await self._tasks.read_task(task_id, stream=stream, offset=offset, max_bytes=max_bytes, owner=owner)

    async def read_task_page(
        self,
        task_id: str,
        *,
        stream: Literal["stdout", "stderr"] = "stdout",
        offset: int = 0,
        max_bytes: int = 65_536,
        owner: str | None = None,
    ) -> tuple[ToolResult, TaskBytes]:
        """:meth:`read_task`, and the exact bytes its page shows (``data.offset`` to ``data.next_offset``, any
        bytes, UTF-8 or not), from the same read: what the service answers a task read with.

        Raises:
            TaskNotFound: no such task, or it belongs to another owner.
        """
        self._check_open()
        async with self._stops_said():
            return await self._tasks.read_page(task_id, stream=stream, offset=offset, max_bytes=max_bytes, owner=owner)

    async def read_task_bytes(
        self,
        task_id: str,
        *,
        stream: Literal["stdout", "stderr"] = "stdout",
        offset: int = 0,
        max_bytes: int = 65_536,
        owner: str | None = None,
    ) -> TaskBytes:
        """Read a background task's stream from whole-stream byte ``offset`` as its exact bytes (any bytes, UTF-8
        or not), for a follower that prints them; ``next_offset`` continues.

        Raises:
            TaskNotFound: no such task, or it belongs to another owner.
        """
        self._check_open()
        async with self._stops_said():
            return await self._tasks.read_task_bytes(
                task_id, stream=stream, offset=offset, max_bytes=max_bytes, owner=owner
            )

    async def end_tasks(self) -> None:
        """Before the session is stopped: stop every background task still running and keep each one's whole output
        as its artifact (the executor's :meth:`~executor.session.Executor.stop_session` calls it)."""
        await self._tasks.stop_all()

    async def stop_task(self, task_id: str, *, owner: str | None = None) -> TaskInfo:
        """Kill a background task's whole process group (TERM, grace, KILL) and say how it ended.

        Raises:
            TaskNotFound: no such task, or it belongs to another owner.
        """
        self._check_open()
        async with self._stops_said():
            return await self._tasks.stop_task(task_id, owner=owner)

    async def list_tasks(self, *, owner: str | None = None) -> list[TaskInfo]:
        """The session's background tasks (only ``owner``'s when an owner is given)."""
        self._check_open()
        async with self._stops_said():
            return await self._tasks.list_tasks(owner=owner)

    def owner_of(self, task_id: str) -> str | None:
        """The opaque owner token stored with a task (never interpreted here).

        Raises:
            TaskNotFound: no such task.
        """
        return self._tasks.owner_of(task_id)


class _TeeSink:
    """Feeds the artifact capture and keeps each stream's first ``cap`` bytes for the caller."""

    def __init__(self, capture: CaptureSink, cap: int) -> None:
        self._capture = capture
        self._cap = cap
        self.data: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        self.overflow: set[str] = set()

    def feed(self, stream: StreamName, data: bytes) -> None:
        self._capture.feed(stream, data)
        buf = self.data.setdefault(stream, bytearray())
        room = self._cap - len(buf)
        if len(data) > room:
            self.overflow.add(stream)
            data = data[: max(room, 0)]
        buf += data


def _lost(elapsed_ms: float, *, stopped: bool) -> RunResult:
    return RunResult(
        cause="cancelled" if stopped else "sandbox_lost",
        exit_code=None,
        signal=None,
        duration_ms=elapsed_ms,
        cpu_ms=0.0,
        max_rss_kb=0,
        stream_bytes={},
    )


def _refusal_data(exc: WriteError) -> dict[str, object]:
    """The structured part of a refused write: which error, and the errno a program would have seen."""
    code = getattr(exc, "errno", None) or 0
    names = {errno.EACCES: "permission", errno.ENOENT: "not_found", errno.EISDIR: "is_directory"}
    return {"error": names.get(code, type(exc).__name__), "errno": code}


async def _stdin_facts(
    spec: RunSpec, max_bytes: int, bounds: ArchiveBounds
) -> tuple[str | None, str | None, tuple[str, ...] | None]:
    """A run's stdin's hex SHA-256; the stdin as text when the command runs a shell or interpreter that reads its
    program from it (UTF-8 of at most ``max_bytes``; else None); and the member names of the tar it unpacks from it
    (see :attr:`BashAction.stdin_members`), read within ``bounds``. A file is read in a thread, its archive listing
    streamed."""
    stdin = spec.stdin
    if stdin is None:
        return None, None, None
    parsed = parse_command(spec.command)
    wanted = bool(parsed.stdin_readers)
    unpacks = any(target.via in UNPACKERS for target in parsed.write_targets)
    members: tuple[str, ...] | None = None
    if isinstance(stdin, bytes):
        data = stdin
        if unpacks:  # in a thread: a compressed archive is decompressed to be listed
            members = await trio.to_thread.run_sync(list_members, io.BytesIO(data), bounds)
    else:
        if unpacks:
            members = await trio.to_thread.run_sync(_list_file_members, stdin, bounds)
        if not (wanted and stdin.size <= max_bytes):
            return await trio.to_thread.run_sync(_file_sha256, stdin), None, members
        data = (await trio.to_thread.run_sync(Path(stdin.path).read_bytes))[: stdin.size]
    program = None
    if wanted and len(data) <= max_bytes:
        with contextlib.suppress(UnicodeDecodeError):
            program = data.decode("utf-8")
    return hashlib.sha256(data).hexdigest(), program, members


def _list_file_members(source: StdinFile, bounds: ArchiveBounds) -> tuple[str, ...]:
    with Path(source.path).open("rb") as handle:
        return list_members(handle, bounds)


def _file_sha256(source: StdinFile) -> str:
    digest = hashlib.sha256()
    with Path(source.path).open("rb") as handle:
        left = source.size
        while left > 0:
            data = handle.read(min(1024 * 1024, left))
            if not data:
                break
            digest.update(data)
            left -= len(data)
    return digest.hexdigest()
