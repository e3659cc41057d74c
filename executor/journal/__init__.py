"""The decision journal: ndjson events per session, an append-only writer and a bounded, pure reader.

See :mod:`executor.journal.events` for the event models, :mod:`executor.journal.writer` for appending (safely from
many processes at once), :mod:`executor.journal.chain` for the per-home key and the MAC chain that make tampering
evident, and :mod:`executor.journal.reader` for reading corrupt or hostile journals safely.
"""

from __future__ import annotations

from executor.journal.chain import JournalKey, load_journal_key
from executor.journal.events import (
    SCHEMA_VERSION,
    ActionPrepared,
    ApprovalOutcome,
    ApprovalRequested,
    ApprovalResolved,
    ArtifactInterrupted,
    DecisionEvent,
    EventBase,
    EventType,
    ExecutionFinished,
    ExecutionStarted,
    FocusDecision,
    FocusMode,
    FocusStatus,
    JournalEvent,
    JudgmentEvent,
    ManifestSection,
    RuleMatch,
    SectionManifest,
    SessionClosed,
    SessionOpened,
    StaticVerdict,
    event_adapter,
)
from executor.journal.reader import (
    IssueCode,
    JournalIssue,
    JournalRead,
    JournalRecord,
    ReadMode,
    Verification,
    decode_line,
    read_journal,
    read_journal_file,
)
from executor.journal.writer import JournalWriter, interruption_journaler

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
    "IssueCode",
    "JournalEvent",
    "JournalIssue",
    "JournalKey",
    "JournalRead",
    "JournalRecord",
    "JournalWriter",
    "JudgmentEvent",
    "ManifestSection",
    "ReadMode",
    "RuleMatch",
    "SectionManifest",
    "SessionClosed",
    "SessionOpened",
    "StaticVerdict",
    "Verification",
    "decode_line",
    "event_adapter",
    "interruption_journaler",
    "load_journal_key",
    "read_journal",
    "read_journal_file",
]
