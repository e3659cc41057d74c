"""Gating and journaling: every action is prepared, judged and (if asked) approved, and its execution is bracketed.

:class:`Gatekeeper` owns a session's gate and journal. :meth:`Gatekeeper.gate_action` runs static policy, the judge
and the approval step and journals each decision; :meth:`Gatekeeper.execution` is the one capture/journal bracket
that every executed action (``bash``, ``write_file``) runs inside, so that its artifact and its
``ExecutionStarted``/``ExecutionFinished`` pair are recorded whatever happens, cancellation included.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager, nullcontext, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from executor.artifacts import ArtifactRecord, Capture, SessionArtifacts
from executor.config import Profile
from executor.errors import (
    ActionDenied,
    ApprovalInvalidated,
    ApprovalRequired,
    ArtifactError,
    ExecutorError,
    JournalError,
)
from executor.gate.approvals import ApprovalDenied, ApprovalHandler, request_approval
from executor.gate.gate import Gate, GateOutcome
from executor.journal import JournalWriter
from executor.journal.events import (
    ActionPrepared,
    ApprovalRequested,
    ApprovalResolved,
    DecisionEvent,
    ExecutionFinished,
    ExecutionStarted,
    JudgmentEvent,
    RuleMatch,
    StaticVerdict,
)
from executor.models import BashAction, Cause, JudgmentRecord, JudgmentRequest, WriteAction
from executor.sandbox.usage import UsageMark
from executor.session.api import Outcome

__all__ = ["Execution", "Gatekeeper", "Refusal", "owner_matches"]


def owner_matches(expected: str | None, given: str | None) -> bool:
    """Whether ``given`` may act for a resource owned by ``expected`` (None: unowned; compared in constant time).
    A ``given`` of None is the home's operator (the in-process CLI and API, the service's unix socket), who may act
    for every owner, as :func:`executor.service.core.owns` lets the socket's caller: it lists them all already."""
    if expected is None or given is None:
        return True
    return given is not None and secrets.compare_digest(expected, given)


@dataclass(frozen=True)
class Refusal:
    """The gate said no (or nobody could say yes): the outcome and the raw text to present (not yet sanitized)."""

    outcome: Outcome
    text: str


@contextmanager
def naming_kept(record: ArtifactRecord) -> Iterator[None]:
    """A journal failure after ``record`` finished (a full disk) says that its output is kept, and where.

    The run then fails (the caller gets no result): a result is returned only once its journal entry is written.
    """
    try:
        yield
    except JournalError as exc:
        kept = ", ".join(f"{name} {info.bytes_stored} bytes" for name, info in record.streams.items())
        raise JournalError(
            f"{exc}; the run's end is not journaled; its output is kept in artifact {record.id} ({kept})"
        ) from exc


@dataclass
class Execution:
    """One executed action inside :meth:`Gatekeeper.execution`: its capture, and how to record its end."""

    action_id: str
    capture: Capture
    journal: JournalWriter
    started: float = field(default_factory=time.monotonic)
    record: ArtifactRecord | None = None

    def elapsed_ms(self) -> float:
        """Wall time since the execution started."""
        return (time.monotonic() - self.started) * 1000

    def finish(
        self,
        *,
        status: str,
        cause: Cause | None = None,
        exit_code: int | None = None,
        duration_ms: float | None = None,
        settle: bool = False,
    ) -> ArtifactRecord:
        """Close the capture with ``status`` and journal ``ExecutionFinished`` (synchronous: no checkpoint).

        The event is appended, which starts its fsync on the commit thread at once: the disk wait overlaps the
        presentation and judgment of the result, and the commit before the result is returned finds it done or
        underway (``settle``: emit it, durable before this returns, for the abort path that cannot wait).
        """
        record = self.capture.finish(status=status)
        self.record = record
        write = self.journal.emit if settle else self.journal.append
        with naming_kept(record):
            write(
                ExecutionFinished(
                    action_id=self.action_id,
                    cause=cause,
                    exit_code=exit_code,
                    duration_ms=self.elapsed_ms() if duration_ms is None else duration_ms,
                    artifact_ids=(record.id,),
                )
            )
        return record


class Gatekeeper:
    """A session's gate and journal: action ids, the gating decision, judgments and the execution bracket."""

    def __init__(
        self,
        *,
        session_id: str,
        profile: Profile,
        gate: Gate,
        journal: JournalWriter,
        artifacts: SessionArtifacts,
        usage: Path | None = None,
    ) -> None:
        self.session_id = session_id
        self.usage = usage
        """The session's usage file (:mod:`executor.sandbox.usage`): busy while an action executes, touched when it
        ends; None keeps no record."""
        self.profile = profile
        self.gate = gate
        self.journal = journal
        self.artifacts = artifacts
        self._action_seq = 0

    def new_action_id(self) -> str:
        """A fresh action id, stamped with the session id."""
        self._action_seq += 1
        return f"{self.session_id}.x{int(time.time() * 1000):x}{self._action_seq}"

    def journal_judgment(
        self,
        record: JudgmentRecord,
        request: JudgmentRequest,
        *,
        action_id: str | None,
        artifact_id: str | None,
        staged: bool = False,
    ) -> None:
        """Journal one judgment with the material it was asked about (appended, or with ``staged`` staged: the
        tool's result commits it)."""
        # The record's own field values (already validated; no dump and re-validation of its question table).
        fields = {name: getattr(record, name) for name in JudgmentRecord.model_fields}
        event = JudgmentEvent(**fields, action_id=action_id, artifact_id=artifact_id)
        try:
            # Plain JSON by construction (what the JSON round trip makes of it; a value JSON cannot hold is written
            # as its str()), so it is set without walking it again as JsonValue; the writer checks the line.
            material = json.loads(json.dumps(request.material, default=str, allow_nan=False))
        except ValueError:  # NaN or infinity: validated as before, which refuses it
            event = JudgmentEvent(**fields, action_id=action_id, artifact_id=artifact_id, material=request.material)
        else:
            event = event.model_copy(update={"material": material})
        if staged:
            self.journal.stage(event)
        else:
            self.journal.append(event)

    async def run_judgment(
        self, request: JudgmentRequest, *, action_id: str | None = None, artifact_id: str | None = None
    ) -> JudgmentRecord:
        """Ask the judge (through the gate's cache); journal the answer when it concerns an action or artifact."""
        record = await self.gate.run_judgment(request)
        if action_id is not None or artifact_id is not None:
            self.journal_judgment(record, request, action_id=action_id, artifact_id=artifact_id)
        return record

    async def gate_action(
        self,
        action_id: str,
        action: BashAction | WriteAction,
        handler: ApprovalHandler | None,
        *,
        current_identity: Callable[[], Awaitable[str]],
    ) -> Refusal | None:
        """Static policy, judgment, approval. None means: run it (approved once if it was asked about).

        The decision records are appended and committed by what follows: the execution bracket (before the action
        runs) or the sanitized refusal; an ask is emitted (durable and sealed) before anyone is asked.
        """
        identity = action.identity()
        journal = self.journal
        # The steps of the decision are staged: they reach the file together with what follows at once (the
        # execution's start, the refusal's judgment, the ask), in one write.
        journal.stage(ActionPrepared(action_id=action_id, identity_hash=identity, action=action))
        outcome: GateOutcome = await self.gate.evaluate(action, session_id=self.session_id, identity=identity)
        verdict = outcome.static_verdict
        journal.stage(
            StaticVerdict(
                action_id=action_id,
                policy=self.profile.policy,
                policy_sha256=getattr(self.gate.policy, "sha256", None),
                decision=verdict.decision,
                matches=tuple(RuleMatch.model_validate(m.model_dump()) for m in verdict.matches),
                static_only=outcome.static_only,
            )
        )
        if outcome.judgments:  # a static allow or deny asked no judge: no request to build
            request = self.gate.request_for(action, session_id=self.session_id)
            for record in outcome.judgments:
                self.journal_judgment(record, request, action_id=action_id, artifact_id=None, staged=True)
        observe = self.profile.gate_mode == "observe"
        journal.stage(
            DecisionEvent(
                action_id=action_id,
                decision=outcome.decision,
                trust=outcome.trust,
                judgment_ids=tuple(r.judgment_id for r in outcome.judgments),
                static_only=outcome.static_only,
                enforced=not observe or outcome.decision == "allow",
            )
        )
        if observe:
            return None  # harness mode: evaluated and journaled above, never blocked; the container is the boundary
        reasons = "\n".join(f"- {reason}" for reason in outcome.reasons)
        if outcome.decision == "deny":
            return Refusal(
                "denied", f"[denied: nothing ran]\n{reasons}\nDo not retry this action; choose a different approach."
            )
        if outcome.decision == "allow":
            return None
        approval_id = f"ap-{secrets.token_hex(8)}"
        journal.emit(
            ApprovalRequested(action_id=action_id, approval_id=approval_id, identity_hash=identity, summary=reasons)
        )
        resolution: Literal["approved", "denied", "eof", "cancelled", "invalidated", "unavailable"] = "cancelled"
        answered_by: str | None = None
        try:
            approval = await request_approval(
                action, handler, current_identity=current_identity, reasons=outcome.reasons, approval_id=approval_id
            )
            answered_by = approval.answered_by
            approval.consume(identity)
            resolution = "approved"
        except ApprovalRequired as exc:
            resolution = "unavailable"
            return Refusal("blocked", str(exc))
        except ApprovalInvalidated as exc:
            resolution = "invalidated"
            return Refusal("denied", f"[{exc}]")
        except ActionDenied as exc:
            resolution = "eof" if "EOF" in str(exc) else "denied"
            answered_by = exc.answered_by if isinstance(exc, ApprovalDenied) else None
            return Refusal("denied", f"[{exc}]")
        finally:
            journal.emit(ApprovalResolved(approval_id=approval_id, outcome=resolution, answered_by=answered_by))
        return None

    @asynccontextmanager
    async def execution(
        self,
        action_id: str,
        *,
        kind: str,
        streams: tuple[str, ...],
        on_abort: tuple[str, bytes] | None = None,
        commit_at_exit: bool = True,
    ) -> AsyncIterator[Execution]:
        """The capture/journal bracket of one executed action.

        Journals ``ExecutionStarted``, begins the action's artifact while that record's fsync is under way, and
        waits for the fsync (so under the default ``journal.fsync`` the decision and the start are on disk before
        the body runs the action); the body calls :meth:`Execution.finish`. On the way out the bracket commits
        again (the end as durable as the settings promise, the head sealed) unless ``commit_at_exit`` is False:
        then the caller must commit before it returns the result (a sanitized result does: ``Views.sanitize``
        appends its judgment and commits, by which time the end's fsync is done or underway). If the body raises
        (cancellation included) before finishing, the capture is closed as ``cancelled`` (after ``on_abort``'s
        bytes are fed to its stream), ``ExecutionFinished`` is emitted with cause ``cancelled`` (synchronously:
        cancellation cannot interrupt the bookkeeping), and the error propagates.
        """
        journal = self.journal
        try:
            journal.append(ExecutionStarted(action_id=action_id))
        except JournalError as exc:
            raise JournalError(f"{exc}; the action did not run and nothing was kept") from exc
        try:
            capture = self.artifacts.begin(kind=kind, streams=streams, meta={"action_id": action_id})
        except BaseException as exc:
            with suppress(JournalError):  # the same full disk may refuse this too; the first failure is reported
                journal.emit(ExecutionFinished(action_id=action_id))  # nothing ran and nothing was captured
            if type(exc) is ArtifactError:  # the index refused the start (a full disk)
                raise ArtifactError(f"{exc}; the action did not run and nothing was kept") from exc
            raise
        execution = Execution(action_id=action_id, capture=capture, journal=journal)
        mark: AbstractContextManager[object] = UsageMark(self.usage) if self.usage is not None else nullcontext()
        try:
            try:
                await journal.commit(seal=False)  # durable before it runs; the head is sealed before the result
            except JournalError as exc:
                raise JournalError(f"{exc}; the action did not run and nothing was kept") from exc
            with mark:
                yield execution
        except BaseException as exc:
            if execution.record is None:
                try:
                    if on_abort is not None:
                        capture.feed(*on_abort)
                    execution.finish(status="cancelled", cause="cancelled", settle=True)
                except ExecutorError:
                    # A full disk refuses the abort's bookkeeping too; the first failure says what was kept
                    # (the capture's bytes stay on disk, finalised as interrupted when the index is next opened).
                    if not isinstance(exc, ExecutorError):
                        raise
            raise
        if execution.record is None:
            raise AssertionError(f"execution of {action_id} ended without a recorded finish")
        if commit_at_exit:
            with naming_kept(execution.record):
                await journal.commit()
