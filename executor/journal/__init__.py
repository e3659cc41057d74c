"""The decision journal: ndjson events per session, an append-only writer and a bounded, pure reader.

See :mod:`executor.journal.events` for the event models, :mod:`executor.journal.writer` for appending (safely from
many processes at once), :mod:`executor.journal.chain` for the per-home key and the MAC chain that make tampering
evident, and :mod:`executor.journal.reader` for reading corrupt or hostile journals safely.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from executor._lazy import lazy_getattr

if TYPE_CHECKING:
    from executor.journal.chain import (
        JournalKey,
        load_journal_key,
    )
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
    from executor.journal.writer import (
        JournalWriter,
        interruption_journaler,
    )

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

_HOMES = {
    "JournalKey": "executor.journal.chain",
    "load_journal_key": "executor.journal.chain",
    "SCHEMA_VERSION": "executor.journal.events",
    "ActionPrepared": "executor.journal.events",
    "ApprovalOutcome": "executor.journal.events",
    "ApprovalRequested": "executor.journal.events",
    "ApprovalResolved": "executor.journal.events",
    "ArtifactInterrupted": "executor.journal.events",
    "DecisionEvent": "executor.journal.events",
    "EventBase": "executor.journal.events",
    "EventType": "executor.journal.events",
    "ExecutionFinished": "executor.journal.events",
    "ExecutionStarted": "executor.journal.events",
    "FocusDecision": "executor.journal.events",
    "FocusMode": "executor.journal.events",
    "FocusStatus": "executor.journal.events",
    "JournalEvent": "executor.journal.events",
    "JudgmentEvent": "executor.journal.events",
    "ManifestSection": "executor.journal.events",
    "RuleMatch": "executor.journal.events",
    "SectionManifest": "executor.journal.events",
    "SessionClosed": "executor.journal.events",
    "SessionOpened": "executor.journal.events",
    "StaticVerdict": "executor.journal.events",
    "event_adapter": "executor.journal.events",
    "IssueCode": "executor.journal.reader",
    "JournalIssue": "executor.journal.reader",
    "JournalRead": "executor.journal.reader",
    "JournalRecord": "executor.journal.reader",
    "ReadMode": "executor.journal.reader",
    "Verification": "executor.journal.reader",
    "decode_line": "executor.journal.reader",
    "read_journal": "executor.journal.reader",
    "read_journal_file": "executor.journal.reader",
    "JournalWriter": "executor.journal.writer",
    "interruption_journaler": "executor.journal.writer",
}

__getattr__ = lazy_getattr(__name__, _HOMES)
