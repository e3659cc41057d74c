"""Builders of journal events for tests of the journal, its reader and replay (pure)."""

from __future__ import annotations

from collections.abc import Mapping

from executor.journal.events import (
    ActionPrepared,
    DecisionEvent,
    EventBase,
    JudgmentEvent,
    StaticVerdict,
)
from executor.models import Answer, BashAction, Question, QuestionTable

__all__ = [
    "GATE_TABLE",
    "SESSION",
    "bash_action",
    "decision",
    "journal_bytes",
    "judgment",
    "line",
    "prepared",
    "stamp",
    "verdict",
]

SESSION = "s1"

GATE_TABLE = QuestionTable(
    reflex="gate",
    version=1,
    questions=(
        Question(id="risk", text="How risky is this action?", answer="level"),
        Question(id="destructive", text="Does it destroy data?", answer="bool"),
    ),
)


def bash_action(command: str) -> BashAction:
    """A bash action in the test session."""
    return BashAction(session_id=SESSION, command=command, cwd="/workspace", timeout_ms=30_000)


def prepared(action_id: str, command: str) -> ActionPrepared:
    """An action_prepared event for a bash command."""
    action = bash_action(command)
    return ActionPrepared(action_id=action_id, identity_hash=action.identity(), action=action)


def judgment(
    judgment_id: str,
    action_id: str | None,
    answers: Mapping[str, Answer],
    *,
    error: str | None = None,
    material: Mapping[str, object] | None = None,
    table: QuestionTable = GATE_TABLE,
    artifact_id: str | None = None,
) -> JudgmentEvent:
    """A judgment (of ``table``'s reflex) with the given answers."""
    return JudgmentEvent.model_validate(
        {
            "judgment_id": judgment_id,
            "reflex": table.reflex,
            "provider": "rules",
            "table": table.model_dump(mode="json"),
            "table_hash": "t1",
            "answers": dict(answers),
            "latency_ms": 1.5,
            "cache_hit": False,
            "cached_from_judgment_id": None,
            "error": error,
            "action_id": action_id,
            "artifact_id": artifact_id,
            "material": dict(material or {"subject": action_id or artifact_id}),
        }
    )


def verdict(action_id: str, decision: str | None = None, *, static_only: bool = False) -> StaticVerdict:
    """A static verdict."""
    return StaticVerdict.model_validate(
        {"action_id": action_id, "decision": decision, "matches": [], "static_only": static_only}
    )


def decision(action_id: str, value: str, *, trust: int = 1, judgment_ids: tuple[str, ...] = ()) -> DecisionEvent:
    """A gate decision."""
    return DecisionEvent.model_validate(
        {
            "action_id": action_id,
            "decision": value,
            "trust": trust,
            "judgment_ids": list(judgment_ids),
            "static_only": not judgment_ids,
        }
    )


def stamp(event: EventBase, seq: int) -> EventBase:
    """The event as a writer would stamp it."""
    return event.model_copy(update={"seq": seq, "session_id": SESSION})


def line(event: EventBase, seq: int) -> bytes:
    """One journal line (with its newline) for the event at ``seq``."""
    return stamp(event, seq).model_dump_json().encode() + b"\n"


def journal_bytes(*events: EventBase) -> bytes:
    """A well-formed journal holding ``events`` with seq 1..N."""
    return b"".join(line(event, seq) for seq, event in enumerate(events, start=1))
