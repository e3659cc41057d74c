"""Journal events: one validated pydantic model per line of a session's ndjson journal.

Pure: no IO, no trio. Every event shares an envelope:

* ``v``: the schema version (:data:`SCHEMA_VERSION`); a reader refuses any other;
* ``seq``: strictly increasing within one journal; the writer assigns it, whatever the caller passed;
* ``ts``: wall-clock seconds since the epoch when the event was built;
* ``session_id``: the owning session; the writer stamps it;
* ``event_id``: unique within the journal (a fresh :func:`executor.ids.unique_hex` unless the caller gives one);
* ``type``: the discriminator naming the event.

The pipeline builds an event without the envelope and hands it to :meth:`JournalWriter.emit`, for example
``journal.emit(DecisionEvent(action_id=a, decision="ask", trust=1, judgment_ids=(j,)))``.

Judgments are referenced by ``judgment_id`` only: a decision lists the ids of the judgments it used, so an offline
replay never has to guess which judgment a decision meant.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter, model_validator

from executor.ids import unique_hex
from executor.models import Action, Cause, Decision, JudgmentRecord

__all__ = [
    "SCHEMA_VERSION",
    "ActionPrepared",
    "ApprovalOutcome",
    "ApprovalRequested",
    "ApprovalResolved",
    "ArtifactInterrupted",
    "DecisionEvent",
    "EventBase",
    "EventType",
    "ExecutionFinished",
    "ExecutionStarted",
    "FocusDecision",
    "FocusMode",
    "FocusStatus",
    "JournalEvent",
    "JudgmentEvent",
    "ManifestSection",
    "RuleMatch",
    "SectionManifest",
    "SessionClosed",
    "SessionOpened",
    "StaticVerdict",
    "escaped",
    "event_adapter",
    "unescaped",
]

SCHEMA_VERSION: Literal[1] = 1
"""The journal schema version this code writes and reads."""

_ID = Annotated[str, Field(min_length=1, max_length=256)]

ApprovalOutcome = Literal["approved", "denied", "eof", "cancelled", "invalidated", "unavailable"]
"""How an approval ended: a person said yes or no, the terminal hit EOF, the wait was cancelled, the action changed
under review, or nobody could be asked."""

FocusMode = Literal["off", "shadow", "on"]
"""The focus rollout mode in force when a focus decision was made."""

FocusStatus = Literal["select", "full", "compute_or_retrieve", "error"]
"""What the focus judgment decided (``error``: the judgment failed and the bounded view was used)."""


class _SectionLike(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def start_line(self) -> int: ...
    @property
    def end_line(self) -> int: ...
    @property
    def kind(self) -> str: ...


def _new_event_id() -> str:
    return unique_hex()


class _Model(BaseModel):
    # allow_inf_nan=False: a journal line with NaN or Infinity could never be read back (the reader rejects them).
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, allow_inf_nan=False)


class EventBase(_Model):
    """The envelope every journal event shares; subclasses add ``type`` and their fields."""

    v: Literal[1] = SCHEMA_VERSION
    """Schema version."""
    seq: int = Field(0, ge=0)
    """Position in the journal, strictly increasing; assigned by the writer."""
    ts: float = Field(default_factory=time.time, ge=0)
    """Seconds since the epoch when the event was built."""
    session_id: str = Field("", max_length=256)
    """The owning session; stamped by the writer (a line on disk always carries it)."""
    event_id: _ID = Field(default_factory=_new_event_id)
    """Unique within the journal."""


class SessionOpened(EventBase):
    """A session started journaling."""

    type: Literal["session_opened"] = "session_opened"
    """Discriminator."""
    profile: str | None = None
    """The profile the session runs with."""
    trust: int | None = Field(None, ge=0, le=3)
    """The trust level in force at the start."""
    policy: str | None = None
    """Name (or path) of the static policy in force."""
    policy_hash: str | None = None
    """Hash of the static policy in force, so a replay can tell whether it differs."""
    gate_mode: Literal["enforce", "observe"] | None = None
    """``observe``: harness mode, the gate journals but never blocks (the container is the only boundary)."""
    pool_created_at: float | None = None
    """When a warm pool created the session's container (seconds since the epoch); None for a cold open."""


class SessionClosed(EventBase):
    """A session stopped journaling; nothing follows in this journal."""

    type: Literal["session_closed"] = "session_closed"
    """Discriminator."""
    reason: str | None = None
    """Why it closed (``closed``, ``error: ...``), for people."""


class ActionPrepared(EventBase):
    """An action was prepared: its canonical form and identity hash, before any gating."""

    type: Literal["action_prepared"] = "action_prepared"
    """Discriminator."""
    action_id: _ID
    """The action's id (stamped with the session)."""
    identity_hash: _ID
    """Hash of the action's canonical identity; an approval is bound to it."""
    action: Action
    """The full action, so that a replay can run another static policy over it."""


class RuleMatch(_Model):
    """One static-policy rule that matched an action (the shape of ``executor.gate.policy.RuleMatch``)."""

    rule: _ID
    """The rule's name in its policy file."""
    kind: Literal["command", "path"]
    """Which kind of rule."""
    decision: Decision
    """The decision that rule gives."""
    justification: str = ""
    """The rule's justification, shown to people."""


class StaticVerdict(EventBase):
    """Static policy's verdict on an action."""

    type: Literal["static_verdict"] = "static_verdict"
    """Discriminator."""
    action_id: _ID
    """The action judged."""
    policy: str | None = None
    """Name of the policy file that was applied."""
    policy_sha256: str | None = None
    """Hex SHA-256 of that policy file, so a replay can tell whether another policy differs."""
    decision: Decision | None
    """The strictest matching rule's decision; None when no rule matched."""
    matches: tuple[RuleMatch, ...] = ()
    """Every matching rule, with its justification."""
    static_only: bool = False
    """True when this verdict settled the action without any judgment (a floor verdict)."""


class JudgmentEvent(EventBase, JudgmentRecord):
    """A judgment by a judge provider (or the answer cache), with what it was asked.

    Carries every field of :class:`executor.models.JudgmentRecord` at the top level (``judgment_id``, reflex,
    provider, table and its hash, answers, latency, ``cache_hit``, ``cached_from_judgment_id``, error).
    """

    type: Literal["judgment"] = "judgment"
    """Discriminator."""
    action_id: _ID | None = None
    """The action judged (reflex ``gate``)."""
    artifact_id: _ID | None = None
    """The artifact judged (reflexes ``focus`` and ``sanitize``)."""
    material: dict[str, JsonValue] = Field(default_factory=dict)
    """The request material as it was sent, so that a replay in ``reevaluate`` mode can ask again."""

    @model_validator(mode="after")
    def _subject(self) -> JudgmentEvent:
        if self.action_id is None and self.artifact_id is None:
            raise ValueError("a judgment names the action_id or the artifact_id it judged")
        return self


class DecisionEvent(EventBase):
    """The gate's decision on an action."""

    type: Literal["decision"] = "decision"
    """Discriminator."""
    action_id: _ID
    """The action decided."""
    decision: Decision
    """allow, ask or deny."""
    trust: int = Field(ge=0, le=3)
    """The trust level the decision was made at."""
    judgment_ids: tuple[_ID, ...] = ()
    """The judgments the decision used, by id; empty for a static-only decision."""
    static_only: bool = False
    """True when static policy alone decided (no judgment ran)."""
    enforced: bool = True
    """False in harness mode (``gate_mode = "observe"``): the decision was journaled but the action ran anyway."""


class ApprovalRequested(EventBase):
    """An ask opened a pending approval bound to one exact action."""

    type: Literal["approval_requested"] = "approval_requested"
    """Discriminator."""
    action_id: _ID
    """The action awaiting approval."""
    approval_id: _ID
    """The approval's id."""
    identity_hash: _ID
    """The identity hash of the action the approval is bound to."""
    summary: str = ""
    """What the person was shown (the command, or the diff's summary)."""


class ApprovalResolved(EventBase):
    """A pending approval ended; a historical outcome that replay never re-creates."""

    type: Literal["approval_resolved"] = "approval_resolved"
    """Discriminator."""
    approval_id: _ID
    """The approval that ended."""
    outcome: ApprovalOutcome
    """How it ended."""
    answered_by: str | None = None
    """Who answered (approved or denied): a service token's owner id, ``socket`` (the service's unix socket),
    ``terminal``, ``mcp``; None when nobody answered or the handler does not say."""


class ExecutionStarted(EventBase):
    """A gated action started executing in the sandbox."""

    type: Literal["execution_started"] = "execution_started"
    """Discriminator."""
    action_id: _ID
    """The action."""


class ExecutionFinished(EventBase):
    """A gated action finished executing."""

    type: Literal["execution_finished"] = "execution_finished"
    """Discriminator."""
    action_id: _ID
    """The action."""
    cause: Cause | None = None
    """Why a run ended (bash); None for a write."""
    exit_code: int | None = None
    """The shell's exit status, when it exited by itself."""
    duration_ms: float = Field(0.0, ge=0)
    """Wall time of the execution."""
    artifact_ids: tuple[_ID, ...] = ()
    """Artifacts holding the captured streams."""


class ManifestSection(_Model):
    """One section of a stream, as the focus manifest listed it (line numbers as ``executor.focus`` counts them)."""

    id: _ID
    """The section's id within its manifest (``S1``, ``S2``...)."""
    start_line: int = Field(ge=1)
    """First line of the section, 1-based."""
    end_line: int = Field(ge=1)
    """Last line of the section, inclusive."""
    kind: str = Field("block", min_length=1, max_length=64)
    """What the splitter recognised (traceback, failure, heading, log, block, rest)."""

    @model_validator(mode="after")
    def _ordered(self) -> ManifestSection:
        if self.end_line < self.start_line:
            raise ValueError(f"section {self.id}: end_line {self.end_line} is before start_line {self.start_line}")
        return self


class SectionManifest(_Model):
    """The section manifest a focus judgment was made against: ids, line ranges and kinds."""

    sections: tuple[ManifestSection, ...]
    """The sections, in stream order."""

    @model_validator(mode="after")
    def _unique_ids(self) -> SectionManifest:
        ids = [section.id for section in self.sections]
        if len(ids) != len(set(ids)):
            raise ValueError("section ids in a manifest must be unique")
        return self

    @classmethod
    def of(cls, sections: Iterable[_SectionLike]) -> SectionManifest:
        """Copy ids, line ranges and kinds from any sections (for example ``executor.focus`` manifest sections)."""
        return cls(
            sections=tuple(
                ManifestSection(id=s.id, start_line=s.start_line, end_line=s.end_line, kind=s.kind) for s in sections
            )
        )


class FocusDecision(EventBase):
    """What focus decided for one stream of an artifact (modes ``shadow`` and ``on``)."""

    type: Literal["focus_decision"] = "focus_decision"
    """Discriminator."""
    artifact_id: _ID
    """The artifact."""
    stream: str = Field(min_length=1, max_length=64)
    """The stream within the artifact."""
    mode: FocusMode
    """The focus mode in force."""
    status: FocusStatus
    """What focus decided."""
    manifest_hash: str | None = None
    """Hash of the section manifest."""
    manifest: SectionManifest | None = None
    """The manifest itself (ids, line ranges, kinds); without it the decision cannot be replayed."""
    judgment_id: _ID | None = None
    """The focus judgment the decision used."""
    selected: tuple[_ID, ...] = ()
    """Section ids presented (status ``select``)."""


class ArtifactInterrupted(EventBase):
    """An artifact whose capturing process ended before finishing it, finalised by the next process on the home."""

    type: Literal["artifact_interrupted"] = "artifact_interrupted"
    """Discriminator."""
    artifact_id: _ID
    """The artifact, now ``interrupted``; the bytes captured before the end are readable."""
    bytes_kept: int = Field(ge=0)
    """Bytes kept across its streams."""
    reason: str = Field(max_length=1000)
    """What happened (which process ended, what was recovered)."""


JournalEvent = Annotated[
    SessionOpened
    | SessionClosed
    | ActionPrepared
    | StaticVerdict
    | JudgmentEvent
    | DecisionEvent
    | ApprovalRequested
    | ApprovalResolved
    | ExecutionStarted
    | ExecutionFinished
    | FocusDecision
    | ArtifactInterrupted,
    Field(discriminator="type"),
]
"""Any journal event, told apart by ``type``."""

EventType = Literal[
    "session_opened",
    "session_closed",
    "action_prepared",
    "static_verdict",
    "judgment",
    "decision",
    "approval_requested",
    "approval_resolved",
    "execution_started",
    "execution_finished",
    "focus_decision",
    "artifact_interrupted",
]
"""The ``type`` values a journal line may carry."""

event_adapter: TypeAdapter[JournalEvent] = TypeAdapter(JournalEvent)
"""Validates one decoded journal line (a dict) into its event model."""


_SURROGATE = re.compile("[\ud800-\udfff]")
_ESCAPE = re.compile(r"\\(?:(\\)|x([89a-f][0-9a-f])|u(d[89a-f][0-9a-f]{2}))")


def _escape_text(text: str) -> str:
    return _SURROGATE.sub(
        lambda m: f"\\x{ord(m[0]) - 0xDC00:02x}" if "\udc80" <= m[0] <= "\udcff" else f"\\u{ord(m[0]):04x}",
        text.replace("\\", "\\\\"),
    )


def escaped(value: Any) -> Any:
    """``value`` (a model's dump holding text that JSON cannot carry: lone surrogates) with every lone surrogate
    written as an escape, ``\\xff`` for an undecodable byte (``surrogateescape``) and ``\\udXXX`` for any other, and
    every backslash of every text doubled, so that :func:`unescaped` restores the value exactly (a real ``\\xff``
    anywhere in it stays itself). The writer escapes only a record that has no JSON form otherwise."""
    if isinstance(value, str):
        return _escape_text(value)
    if isinstance(value, dict):
        return {escaped(k): escaped(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(escaped(v) for v in value)
    return value


def unescaped(value: Any) -> Any:
    """The inverse of :func:`escaped`, for a value known or supposed to have been escaped (in one that was not, a
    doubled backslash or a ``\\xff`` would be read as an escape): a reader that needs the exact original tries it
    when the value as written does not fit, as replay does to check a recorded action against its identity hash."""
    if isinstance(value, str):
        if "\\" not in value:
            return value
        return _ESCAPE.sub(lambda m: "\\" if m[1] else chr(int(m[2] or m[3], 16) + (0xDC00 if m[2] else 0)), value)
    if isinstance(value, dict):
        return {unescaped(k): unescaped(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(unescaped(v) for v in value)
    return value
