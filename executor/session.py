"""The session pipeline: prepare -> gate -> execute -> capture -> present -> journal.

This module is the one place where the services meet. Surfaces (the CLI, the MCP server and the Python API)
call :func:`open_executor`, then :meth:`Executor.open_session` (a new session container, removed on exit) or
:meth:`Executor.attach_session` (an existing one, left running). Every tool call returns a :class:`ToolResult`
whose ``text`` is the exact, bounded, sanitized view the model sees; every stream is stored whole as an artifact
first, and every decision is journaled.

Input the executor refuses before doing anything (a malformed path, an oversized command, an unknown artifact id)
raises the matching :class:`~executor.errors.ExecutorError`; outcomes of gated actions (blocked, denied) are results,
because the agent must read them.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Final, Literal

import trio
from pydantic import BaseModel, ConfigDict

from executor.artifacts import ArtifactStore, Capture, SessionArtifacts
from executor.artifacts.view import bounded_view, render_read_page, render_search_page
from executor.config import Profile, Settings
from executor.errors import (
    ActionDenied,
    ApprovalInvalidated,
    ApprovalRequired,
    CommandRejected,
    ConfigError,
    ExecutorError,
    SandboxError,
    SandboxLost,
    SessionNotFound,
    TaskNotFound,
    WriteError,
)
from executor.focus import (
    apply_focus,
    build_focus_request,
    build_sanitize_request,
    flagged_lines,
    instruction_lines,
    present_focused,
    sanitize,
    split_sections,
)
from executor.gate.approvals import ApprovalHandler, request_approval
from executor.gate.cache import AnswerCache
from executor.gate.gate import DEFAULT_CACHE, Gate, GateOutcome
from executor.gate.judge import Judge, open_judge
from executor.gate.policy import Policy, load_profile_policy
from executor.journal import JournalWriter, interruption_journaler, load_journal_key
from executor.journal.events import (
    ActionPrepared,
    ApprovalRequested,
    ApprovalResolved,
    DecisionEvent,
    ExecutionFinished,
    ExecutionStarted,
    FocusDecision,
    JudgmentEvent,
    RuleMatch,
    SectionManifest,
    SessionClosed,
    SessionOpened,
    StaticVerdict,
)
from executor.models import BashAction, JudgmentRecord, JudgmentRequest, RunResult, RunSpec, WriteAction
from executor.sandbox.agent.client import AgentClient, open_agent_client
from executor.sandbox.base import Backend, SessionInfo, open_backend
from executor.tools.bash import build_run_spec
from executor.tools.write import WriteTool

__all__ = [
    "Executor",
    "FocusMode",
    "Outcome",
    "Session",
    "TaskInfo",
    "ToolResult",
    "open_executor",
]

Outcome = Literal["completed", "failed", "timeout", "cancelled", "blocked", "denied", "error"]
"""How a tool call ended, from the caller's point of view.

``completed``: it ran and exited 0 (or the write/read succeeded); ``failed``: it ran and exited nonzero, was killed
by a signal we did not send, or by the OOM killer; ``timeout``/``cancelled``: we killed its process group;
``blocked``: it needs an approval nobody can give; ``denied``: policy, judge or a person said no, or the approval
was invalidated; ``error``: the executor or the sandbox failed (``sandbox_lost``, a refused write)."""

FocusMode = Literal["off", "shadow", "on"]
"""Focus rollout mode (see ``FocusSettings.mode``)."""

_CLEANUP_BUDGET_S: Final = 10.0
_TASK_POLL_S: Final = 0.05
_USE_DEFAULT: Final = object()


class ToolResult(BaseModel):
    """What one tool call returns: the presented text plus the structured facts behind it."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    tool: Literal["bash", "write_file", "read_output", "search_output", "task"]
    """Which tool produced it."""
    outcome: Outcome
    """How the call ended."""
    text: str
    """The exact, bounded, sanitized view presented to the model."""
    action_id: str | None = None
    """The gated action's id (bash, write_file and task starts)."""
    artifact_id: str | None = None
    """The artifact holding every captured stream whole (recover with read_output / search_output)."""
    run: RunResult | None = None
    """Exit code, cause, duration, CPU, max RSS and orphans of a bash run."""
    exit_code: int | None = None
    """The command's shell-style status (128+N for signal N), when it ran."""
    data: dict[str, object] | None = None
    """Tool-specific structured data (write result, page receipts, task chunk)."""


class TaskInfo(BaseModel):
    """A background task as the executor tracks it."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    task_id: str
    """Identifier given by the session's agent."""
    command: str
    """The command it runs."""
    running: bool
    """Still running."""
    owner: str | None = None
    """The opaque owner token given at start (never interpreted by the executor)."""
    artifact_id: str | None = None
    """Artifact whose streams mirror the task's output (grows while the task runs)."""
    result: RunResult | None = None
    """How it ended, once it has."""


class _TaskRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task_id: str
    command: str
    owner: str | None = None
    artifact_id: str | None = None
    action_id: str | None = None
    finished: bool = False


def _outcome_of(result: RunResult) -> Outcome:
    if result.cause == "exited":
        return "completed" if result.exit_code == 0 else "failed"
    if result.cause in ("signaled", "oom"):
        return "failed"
    if result.cause == "timeout":
        return "timeout"
    if result.cause == "cancelled":
        return "cancelled"
    return "error"


def _run_header(result: RunResult, spec_timeout_ms: int | None, grace_ms: int) -> str:
    seconds = f"{result.duration_ms / 1000:.2f}s"
    if result.cause == "exited":
        head = f"[exit {result.exit_code} after {seconds}]"
    elif result.cause == "signaled":
        head = f"[killed by signal {result.signal} after {seconds}]"
    elif result.cause == "oom":
        head = f"[killed by the out-of-memory killer after {seconds}: the session's memory limit was reached]"
    elif result.cause == "timeout":
        head = (
            f"[timed out after {spec_timeout_ms} ms: the whole process group got SIGTERM, then SIGKILL after "
            f"{grace_ms} ms; partial output is kept]"
        )
    elif result.cause == "cancelled":
        head = f"[cancelled after {seconds}: the whole process group was killed; partial output is kept]"
    else:
        head = "[sandbox lost: the session's container or its agent went away; the result is not a success]"
    return head


def _orphans_note(result: RunResult) -> str:
    if not result.orphans_left:
        return ""
    killed = {proc.pid for proc in result.orphans_killed}
    lines = [f"[{len(result.orphans_left)} process(es) left running by the command:"]
    for proc in result.orphans_left:
        fate = "killed" if proc.pid in killed else "kept (orphans = keep)"
        lines.append(f"  pid {proc.pid}: {proc.cmd[:200]} ({fate})")
    return "\n".join(lines) + "]"


def _owner_matches(expected: str | None, given: str | None) -> bool:
    if expected is None:
        return True
    return given is not None and secrets.compare_digest(expected, given)


class Session:
    """One session container, its agent connection, its artifacts and its journal.

    Obtain one from :meth:`Executor.open_session` or :meth:`Executor.attach_session`; methods may be called from
    several tasks at once.
    """

    def __init__(
        self,
        executor: Executor,
        info: SessionInfo,
        profile: Profile,
        client: AgentClient,
        journal: JournalWriter,
        gate: Gate,
        nursery: trio.Nursery,
    ) -> None:
        self._ex = executor
        self.info = info
        self.profile = profile
        self._client = client
        self._journal = journal
        self._gate = gate
        self._nursery = nursery
        self._settings = executor.settings
        self.artifacts: SessionArtifacts = executor.store.session(info.id)
        self._writer = WriteTool(
            client, profile, self._settings.write, allow_outside_workspace=True, builtin_denials=False
        )
        self._tasks_path = executor.settings.home / "sessions" / info.id / "tasks.json"
        self._mirrors: set[str] = set()
        self._action_seq = 0

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

    # -- the pipeline ------------------------------------------------------------------------------------------

    def _new_action_id(self) -> str:
        self._action_seq += 1
        return f"{self.id}.x{int(time.time() * 1000):x}{self._action_seq}"

    def _journal_judgment(
        self, record: JudgmentRecord, request: JudgmentRequest, *, action_id: str | None, artifact_id: str | None
    ) -> None:
        material = json.loads(json.dumps(request.material, default=str))
        self._journal.emit(
            JudgmentEvent(**record.model_dump(), action_id=action_id, artifact_id=artifact_id, material=material)
        )

    async def _gate_action(
        self,
        action_id: str,
        action: BashAction | WriteAction,
        handler: ApprovalHandler | None,
        *,
        tool: Literal["bash", "write_file", "task"],
        current_identity: Callable[[], Awaitable[str]],
    ) -> ToolResult | None:
        """Static policy, judgment, approval. None means: run it (approved once if it was asked about)."""
        identity = action.identity()
        self._journal.emit(ActionPrepared(action_id=action_id, identity_hash=identity, action=action))
        outcome: GateOutcome = await self._gate.evaluate(action, session_id=self.id)
        verdict = outcome.static_verdict
        self._journal.emit(
            StaticVerdict(
                action_id=action_id,
                policy=self.profile.policy,
                policy_sha256=getattr(self._gate.policy, "sha256", None),
                decision=verdict.decision,
                matches=tuple(RuleMatch.model_validate(m.model_dump()) for m in verdict.matches),
                static_only=outcome.static_only,
            )
        )
        request = self._gate.request_for(action, session_id=self.id)
        for record in outcome.judgments:
            self._journal_judgment(record, request, action_id=action_id, artifact_id=None)
        self._journal.emit(
            DecisionEvent(
                action_id=action_id,
                decision=outcome.decision,
                trust=outcome.trust,
                judgment_ids=tuple(r.judgment_id for r in outcome.judgments),
                static_only=outcome.static_only,
            )
        )
        reasons = "\n".join(f"- {reason}" for reason in outcome.reasons)
        if outcome.decision == "deny":
            text = f"[denied: nothing ran]\n{reasons}\nDo not retry this action; choose a different approach."
            return ToolResult(
                tool=tool, action_id=action_id, outcome="denied", text=await self._sanitize(text, action_id=action_id)
            )
        if outcome.decision == "allow":
            return None
        approval_id = f"ap-{secrets.token_hex(8)}"
        self._journal.emit(
            ApprovalRequested(action_id=action_id, approval_id=approval_id, identity_hash=identity, summary=reasons)
        )
        resolution: Literal["approved", "denied", "eof", "cancelled", "invalidated", "unavailable"] = "cancelled"
        try:
            approval = await request_approval(
                action, handler, current_identity=current_identity, reasons=outcome.reasons
            )
            approval.consume(identity)
            resolution = "approved"
        except ApprovalRequired as exc:
            resolution = "unavailable"
            return ToolResult(
                tool=tool,
                action_id=action_id,
                outcome="blocked",
                text=await self._sanitize(str(exc), action_id=action_id),
            )
        except ApprovalInvalidated as exc:
            resolution = "invalidated"
            return ToolResult(
                tool=tool,
                action_id=action_id,
                outcome="denied",
                text=await self._sanitize(f"[{exc}]", action_id=action_id),
            )
        except ActionDenied as exc:
            resolution = "eof" if "EOF" in str(exc) else "denied"
            return ToolResult(
                tool=tool,
                action_id=action_id,
                outcome="denied",
                text=await self._sanitize(f"[{exc}]", action_id=action_id),
            )
        finally:
            self._journal.emit(ApprovalResolved(approval_id=approval_id, outcome=resolution))
        return None

    async def _sanitize(self, text: str, *, action_id: str | None = None, artifact_id: str | None = None) -> str:
        """Judge (reflex ``sanitize``) and clean the exact text the model will see."""
        request = build_sanitize_request(text, self.id)
        record = await self._gate.run_judgment(request)
        if action_id is not None or artifact_id is not None:
            self._journal_judgment(record, request, action_id=action_id, artifact_id=artifact_id)
        if record.error is None:
            try:
                flagged = flagged_lines(record.answers, view_text=text)
            except ExecutorError:
                flagged = instruction_lines(text)
        else:
            # A failed judgment fails closed: the deterministic detector marks what it can.
            flagged = instruction_lines(text)
        return sanitize(text, redact_credentials=self._settings.focus.redact_credentials, flagged_lines=flagged).text

    def _stream_text(self, artifact_id: str, stream: str) -> str:
        parts: list[str] = []
        line = 1
        budget = self._settings.artifacts.capture_max_bytes * 4 + 1024
        while True:
            page = self.artifacts.read_output(
                artifact_id, stream=stream, start_line=line, line_count=100_000, budget_chars=budget
            )
            parts.append(page.text)
            if page.next_start_line is None or page.next_start_byte_in_line is not None:
                break
            line = page.next_start_line
        return "".join(parts)

    async def _present_run(self, artifact_id: str, *, command: str, mode: FocusMode, intent: str | None) -> str:
        """The view of a finished run's artifact under ``mode`` (raw; the caller sanitizes it)."""
        if mode == "off":
            return bounded_view(self.artifacts, artifact_id)
        record = self.artifacts.record(artifact_id)
        settings = self._settings
        focused: list[str] = []
        fallback = False
        for stream, info in record.streams.items():
            if info.bytes_total == 0:
                continue
            if info.truncated:
                self._journal.emit(
                    FocusDecision(artifact_id=artifact_id, stream=stream, mode=mode, status="compute_or_retrieve")
                )
                fallback = True
                continue
            text = self._stream_text(artifact_id, stream)
            manifest = split_sections(text, max_sections=settings.focus.max_sections)
            request = build_focus_request(
                manifest,
                command=command,
                intent=intent,
                session_id=self.id,
                head_lines=settings.artifacts.view_head_lines,
                budget_chars=settings.artifacts.display_max_chars,
            )
            judgment = await self._gate.run_judgment(request)
            self._journal_judgment(judgment, request, action_id=None, artifact_id=artifact_id)
            status: Literal["select", "full", "compute_or_retrieve", "error"] = "error"
            selected: tuple[str, ...] = ()
            decision = None
            if judgment.error is None:
                try:
                    decision = apply_focus(manifest, judgment.answers)
                    status, selected = decision.status, decision.section_ids
                except (ExecutorError, ValueError):
                    decision = None
            self._journal.emit(
                FocusDecision(
                    artifact_id=artifact_id,
                    stream=stream,
                    mode=mode,
                    status=status,
                    manifest_hash=manifest.manifest_hash,
                    manifest=SectionManifest.of(manifest.sections),
                    judgment_id=judgment.judgment_id,
                    selected=selected,
                )
            )
            if decision is not None and status == "select":
                body = present_focused(
                    text,
                    manifest,
                    decision,
                    artifact_id=artifact_id,
                    budget_chars=settings.artifacts.display_max_chars // max(1, len(record.streams)),
                )
                focused.append(f"[{stream}]\n{body}" if len(record.streams) > 1 else body)
            elif status == "full" and len(text) <= settings.artifacts.display_max_chars // max(1, len(record.streams)):
                focused.append(f"[{stream}]\n{text}" if len(record.streams) > 1 else text)
            else:
                fallback = True
        if mode == "shadow" or fallback or not focused:
            return bounded_view(self.artifacts, artifact_id)
        return "\n".join(focused)

    # -- tools -------------------------------------------------------------------------------------------------

    def _handler(self, given: object) -> ApprovalHandler | None:
        if given is _USE_DEFAULT:
            return self._ex.approval_handler
        return given  # type: ignore[return-value]  # an ApprovalHandler or None, by the public signatures

    async def _gate_run(
        self, spec: RunSpec, approval_handler: object, *, tool: Literal["bash", "task"]
    ) -> tuple[str, ToolResult | None]:
        """Gate the exact run ``spec``; returns its action id and, unless it may run, the result to return."""
        action = BashAction(
            session_id=self.id,
            command=spec.command,
            cwd=spec.cwd,
            env=spec.env,
            stdin_sha256=None if spec.stdin is None else hashlib.sha256(spec.stdin).hexdigest(),
            timeout_ms=spec.timeout_ms,
        )
        action_id = self._new_action_id()

        async def same_identity() -> str:
            return action.identity()

        gated = await self._gate_action(
            action_id, action, self._handler(approval_handler), tool=tool, current_identity=same_identity
        )
        return action_id, gated

    async def bash(
        self,
        command: str,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        timeout_ms: int | None = None,
        focus_mode: FocusMode | None = None,
        intent: str | None = None,
        approval_handler: ApprovalHandler | object | None = _USE_DEFAULT,
    ) -> ToolResult:
        """Run ``command`` as a fresh ``bash -c`` in the session, gated, captured and presented.

        Args:
            command: the bash command.
            cwd: working directory (default: the workspace; relative paths are inside it).
            env: explicit environment entries, merged last.
            stdin: bytes for stdin (then closed); None means /dev/null.
            timeout_ms: deadline (default ``bash.timeout_ms``, at most ``bash.max_timeout_ms``).
            focus_mode: ``off``/``shadow``/``on`` for this call (default ``focus.mode``).
            intent: what the caller is looking for in the output (helps focus).
            approval_handler: who answers an ask for this call (default: the executor's handler; None: nobody).

        Raises:
            CommandRejected: refused before anything ran (size, timeout above the cap, stdin size).
        """
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
        capture = self.artifacts.begin(kind="bash", streams=("stdout", "stderr"), meta={"action_id": action_id})
        self._journal.emit(ExecutionStarted(action_id=action_id))
        started = time.monotonic()
        try:
            try:
                result = await self._client.run(spec, capture)
            except SandboxLost:
                result = RunResult(
                    cause="sandbox_lost",
                    exit_code=None,
                    signal=None,
                    duration_ms=(time.monotonic() - started) * 1000,
                    cpu_ms=0.0,
                    max_rss_kb=0,
                    stream_bytes={},
                )
        except BaseException:
            # Synchronous on purpose: no checkpoint, so cancellation cannot interrupt the bookkeeping.
            record = capture.finish(status="cancelled")
            self._journal.emit(
                ExecutionFinished(
                    action_id=action_id,
                    cause="cancelled",
                    duration_ms=(time.monotonic() - started) * 1000,
                    artifact_ids=(record.id,),
                )
            )
            raise
        record = capture.finish(status="ok" if result.cause == "exited" else result.cause)
        self._journal.emit(
            ExecutionFinished(
                action_id=action_id,
                cause=result.cause,
                exit_code=result.exit_code,
                duration_ms=result.duration_ms,
                artifact_ids=(record.id,),
            )
        )
        view = await self._present_run(
            record.id, command=command, mode=focus_mode or self._settings.focus.mode, intent=intent
        )
        parts = [_run_header(result, spec.timeout_ms, spec.grace_ms), view]
        if note := _orphans_note(result):
            parts.append(note)
        if result.drain_cut:
            parts.append("[a process still held the output pipes after the command exited; reading stopped]")
        text = await self._sanitize("\n".join(parts), artifact_id=record.id)
        return ToolResult(
            tool="bash",
            outcome=_outcome_of(result),
            text=text,
            action_id=action_id,
            artifact_id=record.id,
            run=result,
            exit_code=None if result.cause == "sandbox_lost" else result.display_code,
        )

    async def write_file(
        self,
        path: str,
        content: bytes | str,
        *,
        approval_handler: ApprovalHandler | object | None = _USE_DEFAULT,
    ) -> ToolResult:
        """Create or replace a file in the session, staged and symlink-safe, gated on the exact path and content.

        Raises:
            PathRejected: the path is refused before any container call.
            ContentRejected: the content is larger than ``write.max_bytes``.
            UnsafeTarget: a symlink on the path, or a non-regular target (found while preparing).
        """
        data = content.encode("utf-8") if isinstance(content, str) else content
        prepared = await self._writer.prepare(path, data)
        action = WriteAction(
            session_id=self.id,
            path=prepared.path,
            content_sha256=prepared.content_sha256,
            size=prepared.size,
            reviewed=prepared.reviewed,
            diff=prepared.diff,
        )
        action_id = self._new_action_id()

        async def current_identity() -> str:
            again = await self._writer.prepare(path, data)
            return action.model_copy(update={"reviewed": again.reviewed, "diff": again.diff}).identity()

        gated = await self._gate_action(
            action_id, action, self._handler(approval_handler), tool="write_file", current_identity=current_identity
        )
        if gated is not None:
            return gated
        capture = self.artifacts.begin(kind="write_file", streams=("output",), meta={"action_id": action_id})
        self._journal.emit(ExecutionStarted(action_id=action_id))
        started = time.monotonic()
        outcome: Outcome = "completed"
        data_out: dict[str, object] | None = None
        summary = f"[write to {prepared.path} cancelled before it finished]"
        try:
            result = await self._writer.execute(prepared, data)
        except WriteError as exc:
            outcome = "error"
            summary = f"[write refused: {exc}]\nnothing was written to {prepared.path}"
        else:
            data_out = result.model_dump(mode="json")
            verb = "created" if result.created else "replaced"
            summary = (
                f"[{verb} {result.path}: {prepared.size} bytes, mode {oct(result.state.mode)}, sha256 "
                f"{prepared.content_sha256[:16]}…, verified by read-back]\n{prepared.diff}"
            )
        finally:
            # Synchronous on purpose: the result (or the cancellation) is stored whatever happened.
            capture.feed("output", summary.encode("utf-8"))
            record = capture.finish(status="ok" if outcome == "completed" else "error")
            self._journal.emit(
                ExecutionFinished(
                    action_id=action_id,
                    exit_code=0 if outcome == "completed" else 1,
                    duration_ms=(time.monotonic() - started) * 1000,
                    artifact_ids=(record.id,),
                )
            )
        text = await self._sanitize(bounded_view(self.artifacts, record.id), artifact_id=record.id)
        return ToolResult(
            tool="write_file", outcome=outcome, text=text, action_id=action_id, artifact_id=record.id, data=data_out
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
        page = self.artifacts.read_output(
            artifact_id,
            stream=stream,
            start_line=start_line,
            line_count=line_count,
            start_byte_in_line=start_byte_in_line,
        )
        text = await self._sanitize(render_read_page(page), artifact_id=artifact_id)
        return ToolResult(
            tool="read_output",
            outcome="completed",
            text=text,
            artifact_id=artifact_id,
            data=page.model_dump(mode="json", exclude={"text"}),
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
        page = await self.artifacts.search_output(
            artifact_id, stream=stream, pattern=pattern, limit=limit, start_line=start_line
        )
        text = await self._sanitize(render_search_page(page), artifact_id=artifact_id)
        return ToolResult(
            tool="search_output",
            outcome="completed",
            text=text,
            artifact_id=artifact_id,
            data=page.model_dump(mode="json"),
        )

    # -- background tasks --------------------------------------------------------------------------------------

    def _load_tasks(self) -> dict[str, _TaskRecord]:
        try:
            raw = json.loads(self._tasks_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        return {key: _TaskRecord.model_validate(value) for key, value in raw.items()}

    def _save_tasks(self, tasks: Mapping[str, _TaskRecord]) -> None:
        self._tasks_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self._tasks_path.with_suffix(f".{secrets.token_hex(4)}.tmp")
        tmp.write_text(json.dumps({k: v.model_dump() for k, v in tasks.items()}), encoding="utf-8")
        tmp.replace(self._tasks_path)

    def _task(self, task_id: str, owner: str | None) -> _TaskRecord:
        record = self._load_tasks().get(task_id)
        # The owner token is opaque: it is compared only when the caller (a surface's access policy) passes one.
        if record is None or (owner is not None and not _owner_matches(record.owner, owner)):
            raise TaskNotFound(f"no background task {task_id!r} in this session; task_list shows yours")
        return record

    async def start_task(
        self,
        command: str,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        owner: str | None = None,
        approval_handler: ApprovalHandler | object | None = _USE_DEFAULT,
    ) -> ToolResult:
        """Start ``command`` in the background (gated like bash; no deadline) and return at once.

        The result's ``data`` holds the ``task_id``; read output with :meth:`read_task` by byte offsets. Its
        streams are mirrored into an artifact (``artifact_id``) while this session object lives.

        Raises:
            CommandRejected: refused before anything ran, or too many tasks already run.
        """
        spec = build_run_spec(
            command, settings=self._settings.bash, profile=self.profile, cwd=cwd, env=env, background=True
        )
        running = [t for t in await self._client.list_tasks() if t.running]
        if len(running) >= self._settings.bash.max_background_tasks:
            raise CommandRejected(
                f"{len(running)} background tasks already run (bash.max_background_tasks); stop one with task_stop"
            )
        action_id, gated = await self._gate_run(spec, approval_handler, tool="task")
        if gated is not None:
            return gated
        task_id = await self._client.start_task(spec)
        self._journal.emit(ExecutionStarted(action_id=action_id))
        capture = self._task_capture(task_id)
        tasks = self._load_tasks()
        tasks[task_id] = _TaskRecord(
            task_id=task_id, command=command, owner=owner, artifact_id=capture.artifact_id, action_id=action_id
        )
        self._save_tasks(tasks)
        self._mirrors.add(task_id)
        self._nursery.start_soon(self._mirror, task_id, action_id, capture)
        return ToolResult(
            tool="task",
            outcome="completed",
            text=(
                f"[started background task {task_id}; read its output with task_read(task_id={task_id!r}, "
                f"stream='stdout', offset=0); its streams are kept as artifact {capture.artifact_id}]"
            ),
            action_id=action_id,
            artifact_id=capture.artifact_id,
            data={"task_id": task_id},
        )

    async def _mirror(self, task_id: str, action_id: str | None, capture: Capture) -> None:
        """Copy a task's streams from the agent into its artifact until the task ends (or the session closes)."""
        offsets = {"stdout": 0, "stderr": 0}
        result: RunResult | None = None
        try:
            while True:
                # Whether the task had ended is taken before this round's reads: an ended task has written
                # everything, so reading both streams to their end then completes the mirror without a race.
                ended_before_round: bool | None = None
                for stream in ("stdout", "stderr"):
                    while True:
                        chunk = await self._client.read_task(task_id, stream, offsets[stream])
                        if ended_before_round is None:
                            ended_before_round = not chunk.running
                        if chunk.data:
                            capture.feed(stream, chunk.data)
                        offsets[stream] = chunk.offset + len(chunk.data)
                        result = chunk.result
                        if offsets[stream] >= chunk.end:
                            break
                capture.flush()
                if ended_before_round:
                    break
                await trio.sleep(_TASK_POLL_S)
        finally:
            # Synchronous on purpose (no checkpoint): the mirror is closed even when the session is cancelled.
            # A mirror cut short by the end of this process says so ("detached"); a later attach that finds the
            # task ended gives it a complete artifact (see _settle_tasks).
            capture.finish(status="ok" if result is not None else "detached")
            if result is not None:
                if action_id:
                    self._journal.emit(
                        ExecutionFinished(
                            action_id=action_id,
                            cause=result.cause,
                            exit_code=result.exit_code,
                            duration_ms=result.duration_ms,
                            artifact_ids=(capture.artifact_id,),
                        )
                    )
                tasks = self._load_tasks()
                if task_id in tasks:
                    update = {"finished": True, "artifact_id": capture.artifact_id}
                    tasks[task_id] = tasks[task_id].model_copy(update=update)
                    self._save_tasks(tasks)
            self._mirrors.discard(task_id)

    def _task_capture(self, task_id: str) -> Capture:
        return self.artifacts.begin(kind="task", streams=("stdout", "stderr"), meta={"task_id": task_id})

    async def _settle_tasks(self) -> None:
        """Give each ended task whose mirror ended with another process (a CLI call) one complete artifact."""
        records = self._load_tasks()
        pending = [r for r in records.values() if not r.finished and r.task_id not in self._mirrors]
        if not pending:
            return
        ended = {t.task_id for t in await self._client.list_tasks() if not t.running}
        for record in pending:
            if record.task_id in ended:
                capture = self._task_capture(record.task_id)
                self._mirrors.add(record.task_id)
                await self._mirror(record.task_id, record.action_id, capture)

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

        Raises:
            TaskNotFound: no such task, or it belongs to another owner.
        """
        await self._settle_tasks()
        record = self._task(task_id, owner)
        chunk = await self._client.read_task(task_id, stream, offset, max_bytes)
        raw = chunk.data.decode("utf-8", "surrogateescape")
        state = "running" if chunk.running else f"finished ({chunk.result.cause if chunk.result else 'unknown'})"
        shown = f"bytes {chunk.offset}-{chunk.offset + len(chunk.data)} of {chunk.end}"
        header = f"[task {task_id} {stream} {shown}; {state}"
        if chunk.start > offset:
            header += f"; bytes before {chunk.start} were dropped (agent buffer full)"
        header += "]"
        text = await self._sanitize(f"{header}\n{raw}" if raw else header, artifact_id=record.artifact_id)
        return ToolResult(
            tool="task",
            outcome="completed",
            text=text,
            artifact_id=record.artifact_id,
            run=chunk.result,
            data={
                "task_id": task_id,
                "stream": stream,
                "offset": chunk.offset,
                "next_offset": chunk.offset + len(chunk.data),
                "end": chunk.end,
                "dropped": chunk.start,
                "running": chunk.running,
            },
        )

    async def stop_task(self, task_id: str, *, owner: str | None = None) -> TaskInfo:
        """Kill a background task's whole process group (TERM, grace, KILL) and say how it ended.

        Raises:
            TaskNotFound: no such task, or it belongs to another owner.
        """
        self._task(task_id, owner)
        result = await self._client.stop_task(task_id)
        await self._settle_tasks()
        record = self._task(task_id, owner)
        return TaskInfo(
            task_id=task_id,
            command=record.command,
            running=False,
            owner=record.owner,
            artifact_id=record.artifact_id,
            result=result,
        )

    async def list_tasks(self, *, owner: str | None = None) -> list[TaskInfo]:
        """The session's background tasks (only ``owner``'s when an owner is given)."""
        await self._settle_tasks()
        records = self._load_tasks()
        out: list[TaskInfo] = []
        for task in await self._client.list_tasks():
            record = records.get(task.task_id)
            if record is None or (owner is not None and not _owner_matches(record.owner, owner)):
                continue
            out.append(
                TaskInfo(
                    task_id=task.task_id,
                    command=record.command,
                    running=task.running,
                    owner=record.owner,
                    artifact_id=record.artifact_id,
                )
            )
        return out

    def owner_of(self, task_id: str) -> str | None:
        """The opaque owner token stored with a task (never interpreted here).

        Raises:
            TaskNotFound: no such task.
        """
        record = self._load_tasks().get(task_id)
        if record is None:
            raise TaskNotFound(f"no background task {task_id!r} in this session")
        return record.owner


class Executor:
    """The executor: a backend, an artifact store, a gate and the approval handler, shared by sessions."""

    def __init__(
        self,
        settings: Settings,
        backend: Backend,
        store: ArtifactStore,
        judge: Judge | None,
        cache: AnswerCache | None,
        approval_handler: ApprovalHandler | None,
    ) -> None:
        self.settings = settings
        self.backend = backend
        self.store = store
        self.judge = judge
        self.cache = cache
        self.approval_handler = approval_handler

    def _profile(self, name: str | None, image: str | None) -> tuple[str, Profile]:
        profile_name = name or self.settings.default_profile
        profile = self.settings.profile(profile_name)
        if image:
            profile = profile.model_copy(update={"image": image})
        return profile_name, profile

    @asynccontextmanager
    async def open_session(
        self,
        *,
        profile: str | None = None,
        image: str | None = None,
        name: str | None = None,
        owner: str | None = None,
        keep: bool = False,
    ) -> AsyncIterator[Session]:
        """Start a new session container and yield its :class:`Session`; on exit everything the session started is
        killed and the container and its workspace are removed (unless ``keep``).

        Raises:
            ConfigError: unknown profile or an unloadable policy.
            ImageError, AgentError, EngineUnavailable, EngineError: the session could not start.
        """
        profile_name, chosen = self._profile(profile, image)
        policy = load_profile_policy(self.settings.gate, chosen)  # fail before a container exists
        info = await self.backend.open_session(profile=chosen, profile_name=profile_name, name=name, owner=owner)
        try:
            async with self._connect(info, chosen, policy) as session:
                yield session
        finally:
            if not keep:
                with trio.CancelScope(shield=True), trio.move_on_after(_CLEANUP_BUDGET_S):
                    await self.backend.stop_session(info.id)

    @asynccontextmanager
    async def attach_session(
        self,
        id_or_name: str,
        *,
        owner: str | None = None,
        create: bool = False,
        profile: str | None = None,
        image: str | None = None,
    ) -> AsyncIterator[Session]:
        """Connect to an existing session (left running on exit); with ``create``, start a named one if missing.

        Raises:
            SessionNotFound: no such session, it is not running, or it belongs to another owner.
        """
        policy: Policy | None = None
        try:
            info = await self.backend.find_session(id_or_name)
        except SessionNotFound:
            if not create:
                raise
            profile_name, chosen = self._profile(profile, image)
            policy = load_profile_policy(self.settings.gate, chosen)  # fail before a container exists
            info = await self.backend.open_session(
                profile=chosen, profile_name=profile_name, name=id_or_name, owner=owner
            )
        if not _owner_matches(info.owner, owner):
            raise SessionNotFound(f"no session {id_or_name!r}; `executor session ls` lists yours")
        try:
            chosen = self.settings.profile(info.profile)
        except ConfigError:
            chosen = self.settings.profile()
        if policy is None:
            policy = load_profile_policy(self.settings.gate, chosen)
        async with self._connect(info, chosen, policy) as session:
            yield session

    async def list_sessions(self, *, owner: str | None = None) -> list[SessionInfo]:
        """Every session of ours (only ``owner``'s when given)."""
        return await self.backend.list_sessions(owner=owner)

    async def stop_session(self, id_or_name: str, *, owner: str | None = None) -> None:
        """Kill everything a session started and remove its container and workspace.

        Raises:
            SessionNotFound: no such session, or another owner's.
        """
        info = await self.backend.find_session(id_or_name)
        if not _owner_matches(info.owner, owner):
            raise SessionNotFound(f"no session {id_or_name!r}; `executor session ls` lists yours")
        await self.backend.stop_session(info.id)

    @asynccontextmanager
    async def _connect(self, info: SessionInfo, profile: Profile, policy: Policy) -> AsyncIterator[Session]:
        gate_settings = self.settings.gate_for(profile)
        gate = Gate(gate_settings, policy=policy, judge=self.judge, cache=self.cache)
        stream = await self.backend.connect(info.id)
        journal = JournalWriter(
            self.settings.home / "sessions" / info.id / "journal.ndjson",
            session_id=info.id,
            settings=self.settings.journal,
            key=load_journal_key(self.settings.home, create=True),
        )
        async with open_agent_client(
            stream,
            max_frame=self.settings.agent.max_frame_bytes,
            handshake_timeout_s=self.settings.agent.connect_timeout_s,
        ) as client:
            with journal:
                journal.emit(SessionOpened(profile=info.profile, trust=gate_settings.trust, policy=profile.policy))
                reason = "closed"
                try:
                    async with trio.open_nursery() as nursery:
                        session = Session(self, info, profile, client, journal, gate, nursery)
                        try:
                            yield session
                        finally:
                            nursery.cancel_scope.cancel()
                except BaseException as exc:
                    reason = f"error: {type(exc).__name__}"
                    raise
                finally:
                    journal.emit(SessionClosed(reason=reason))


@asynccontextmanager
async def open_executor(
    settings: Settings,
    *,
    approval_handler: ApprovalHandler | None = None,
    judge: Judge | None = None,
    answer_cache: AnswerCache | object | None = DEFAULT_CACHE,
    api_key: str | None = None,
) -> AsyncIterator[Executor]:
    """Open the executor: the engine backend, the artifact store, the judge and the shared answer cache.

    Args:
        settings: the one settings object (built by the entry point).
        approval_handler: who answers the gate's asks by default; None means nobody (asks come back blocked).
        judge: a judge to use instead of the configured provider.
        answer_cache: the shared exact-answer cache; the default builds one from ``gate.cache``; None disables it.
        api_key: the key for the ``openai`` judge provider (the entry point reads it from the environment).

    Raises:
        EngineUnavailable: no Docker engine answers; the message says how to start one.
    """
    cache = AnswerCache.from_settings(settings.gate.cache) if answer_cache is DEFAULT_CACHE else answer_cache
    assert cache is None or isinstance(cache, AnswerCache)
    settings.home.mkdir(parents=True, exist_ok=True, mode=0o700)
    async with open_backend(settings) as backend:
        if settings.docker.gc_on_start:
            # Best effort: leftovers of killed runs are reaped here, and a failure is `executor session gc`'s to report.
            with trio.move_on_after(settings.docker.api_timeout_s):
                with suppress(SandboxError):
                    await backend.gc()
        store = ArtifactStore.open(
            settings.home, settings.artifacts, on_interrupted=interruption_journaler(settings.home, settings.journal)
        )
        try:
            if judge is not None:
                yield Executor(settings, backend, store, judge, cache, approval_handler)
            else:
                async with open_judge(settings.gate.judge, api_key=api_key) as configured:
                    yield Executor(settings, backend, store, configured, cache, approval_handler)
        finally:
            store.close()
