"""Offline replay: judgments resolved by id, re-decided at another trust or policy, nothing executed."""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import cast

import pytest

from executor.config import JournalSettings
from executor.errors import JudgeError
from executor.focus.sections import split_sections
from executor.focus.select import FOCUS_TABLE, apply_focus
from executor.gate.decision import GATE_TABLE, decide
from executor.gate.policy import load_policy
from executor.journal import (
    ActionPrepared,
    ApprovalRequested,
    ApprovalResolved,
    DecisionEvent,
    EventBase,
    FocusDecision,
    JournalEvent,
    JudgmentEvent,
    SectionManifest,
    read_journal,
    read_journal_file,
)
from executor.journal.writer import JournalWriter
from executor.models import Answer, BashAction, JudgmentRequest
from executor.replay import refocus, replay
from executor.testing.journal import SESSION, decision, journal_bytes, judgment, prepared, stamp, verdict

CALM: dict[str, Answer] = {q.id: (False if q.answer == "bool" else 0) for q in GATE_TABLE.questions}


def _answers(**levels: Answer) -> dict[str, Answer]:
    return {**CALM, **levels}


def _gate(judgment_id: str, action_id: str, **levels: Answer) -> JudgmentEvent:
    return judgment(judgment_id, action_id, _answers(**levels), table=GATE_TABLE)


def _events(*events: EventBase) -> list[JournalEvent]:
    # stamp() keeps each event's concrete class, which is always one of the JournalEvent members.
    return [cast(JournalEvent, stamp(event, seq)) for seq, event in enumerate(events, start=1)]


class CountingJudge:
    """A fake judge that counts calls and answers from a table keyed by the request's subject."""

    def __init__(self, answers: Mapping[str, Mapping[str, Answer]] | None = None, *, fail: bool = False) -> None:
        self.calls: list[JudgmentRequest] = []
        self.answers = answers or {}
        self.fail = fail

    async def judge(self, request: JudgmentRequest) -> Mapping[str, Answer]:
        self.calls.append(request)
        if self.fail:
            raise JudgeError("judge timed out after 20.0s")
        return self.answers[str(request.material["subject"])]


def _interleaved() -> list[JournalEvent]:
    # j1 (dangerous, for a1) and j2 (harmless, for a2) interleave; a1's decision comes after j2, so a resolver
    # taking "the latest gate judgment" would score a1 with j2's harmless answers.
    return _events(
        prepared("a1", "rm -rf build"),
        prepared("a2", "ls"),
        _gate("j1", "a1", destructive=2),
        _gate("j2", "a2"),
        decision("a2", "allow", judgment_ids=("j2",)),
        decision("a1", "deny", judgment_ids=("j1",)),
    )


def _latest_of_type(events: list[JournalEvent], trust: int) -> dict[str, str]:
    """The wrong resolver: each decision takes the most recent gate judgment before it."""
    latest: JudgmentEvent | None = None
    out: dict[str, str] = {}
    for event in events:
        if isinstance(event, JudgmentEvent):
            latest = event
        elif isinstance(event, DecisionEvent) and latest is not None:
            out[event.action_id] = decide(latest.table, latest.answers, trust)
    return out


async def test_judgments_resolve_by_id_not_by_recency() -> None:
    """Interleaved same-type judgments: each decision is re-scored with its own judgment, not the latest one."""
    events = _interleaved()
    assert _latest_of_type(events, 2)["a1"] == "allow"  # what the wrong resolver would claim
    same = await replay(events, trust=1)
    assert (same.replayed.unchanged, same.replayed.changed) == (2, 0)
    report = await replay(events, trust=2)
    assert (report.replayed.unchanged, report.replayed.changed) == (1, 1)
    (change,) = report.replayed.changes
    assert (change.action_id, change.old, change.new, change.line) == ("a1", "deny", "ask", 6)
    assert change.why == "trust 1->2; judgment j1 deny->ask"


async def test_policy_mode_never_calls_the_judge() -> None:
    """Policy mode makes zero provider calls even when a judge is supplied."""
    judge = CountingJudge()
    report = await replay(_interleaved(), trust=3, mode="policy", judge=judge)
    assert judge.calls == []
    assert report.provider_calls == 0
    assert report.replayed.changed == 1


async def test_missing_judgment_id_is_unsupported() -> None:
    """A decision naming a judgment the journal lacks is unsupported, never scored with another judgment."""
    events = _events(
        prepared("a1", "ls"), _gate("j1", "a1", destructive=3), decision("a1", "allow", judgment_ids=("j9",))
    )
    report = await replay(events, trust=1)
    assert report.replayed.unchanged + report.replayed.changed == 0
    (item,) = report.unsupported
    assert (item.kind, item.ref, item.line) == ("decision", "a1", 3)
    assert item.reason.startswith("judgment j9 is not in the journal")


async def test_a_judgment_of_another_action_is_unsupported() -> None:
    """A decision pointing at a judgment of a different action is refused as mis-attributed."""
    events = _events(_gate("j1", "a1"), decision("a2", "allow", judgment_ids=("j1",)))
    (item,) = (await replay(events, trust=1)).unsupported
    assert item.reason == "judgment j1 judged a1, not a2"


async def test_duplicate_judgment_ids_make_the_decision_unsupported() -> None:
    """A judgment id that appears twice cannot be resolved; the decision is unsupported and the line reported."""
    data = journal_bytes(
        _gate("j1", "a1"), _gate("j1", "a1", destructive=3), decision("a1", "allow", judgment_ids=("j1",))
    )
    read = read_journal(io.BytesIO(data), settings=JournalSettings(), mode="lenient")
    report = await replay(read, trust=1)
    assert [(e.line, e.code) for e in report.errors] == [(2, "duplicate_judgment_id")]
    (item,) = report.unsupported
    assert "appears more than once" in item.reason


async def test_static_only_decisions_are_listed_not_replayed() -> None:
    """A floor verdict with no judgment is listed as static-only and never counted as replayed."""
    events = _events(prepared("a1", "sudo ls"), verdict("a1", "deny", static_only=True), decision("a1", "deny"))
    report = await replay(events, trust=3)
    assert report.replayed.unchanged + report.replayed.changed == 0
    (item,) = report.static_only
    assert (item.action_id, item.decision, item.line) == ("a1", "deny", 3)


async def test_recorded_static_verdict_stays_the_floor() -> None:
    """Without --policy the recorded static ask still bounds the replayed decision from below."""
    events = _events(
        prepared("a1", "curl x"), verdict("a1", "ask"), _gate("j1", "a1"), decision("a1", "ask", judgment_ids=("j1",))
    )
    report = await replay(events, trust=3)
    assert (report.replayed.unchanged, report.replayed.changed) == (1, 0)


async def test_another_policy_is_applied_to_the_recorded_action(tmp_path: Path) -> None:
    """--policy re-runs static rules on the recorded action; a new ask rule turns a recorded allow into ask."""
    file = tmp_path / "strict.toml"
    file.write_text(
        '[[command]]\nname = "no-ls"\ndecision = "ask"\njustification = "Listing is suspicious today."\n'
        'prefix = ["ls"]\nexamples.match = ["ls -la"]\nexamples.no_match = ["echo ls"]\n'
    )
    policy = load_policy(file)
    events = _events(prepared("a1", "ls -la"), _gate("j1", "a1"), decision("a1", "allow", judgment_ids=("j1",)))
    report = await replay(events, trust=1, policy=policy)
    assert report.policy == "strict"
    (change,) = report.replayed.changes
    assert (change.old, change.new) == ("allow", "ask")
    assert change.why == "static none->ask (no-ls)"
    assert change.note is not None and "Nothing is undone or re-run" in change.note


def _deny_policy(tmp_path: Path, decision: str = "deny") -> Path:
    file = tmp_path / "strict.toml"
    file.write_text(
        f'[[command]]\nname = "no-ls"\ndecision = "{decision}"\njustification = "Not today."\n'
        'prefix = ["ls", "cat"]\nexamples.match = ["ls -la"]\nexamples.no_match = ["echo ls"]\n'
    )
    return file


async def test_a_static_only_decision_is_re_decided_under_another_policy(tmp_path: Path) -> None:
    """With --policy a decision static policy took alone is re-decided: a static allow the new policy denies is a
    change (it stayed listed as static-only with the old policy's rule); one it still allows is unchanged."""
    events = _events(
        prepared("a1", "ls -la"),
        verdict("a1", "allow", static_only=True),
        decision("a1", "allow"),
        prepared("a2", "echo hi"),
        verdict("a2", "allow", static_only=True),
        decision("a2", "allow"),
    )
    policy = load_policy(_deny_policy(tmp_path))
    report = await replay(events, trust=1, policy=policy)
    (change,) = report.replayed.changes
    assert (change.action_id, change.old, change.new) == ("a1", "allow", "deny")
    assert change.why == "static allow->deny (no-ls)"
    assert report.static_only == () and report.replayed.changed == 1
    (item,) = report.unsupported  # echo: the new policy has no rule for it, and no judge was asked then
    assert item.ref == "a2" and "never asked" in item.reason


async def test_a_static_allow_the_new_policy_asks_about_is_at_least_ask(tmp_path: Path) -> None:
    events = _events(prepared("a1", "ls"), verdict("a1", "allow", static_only=True), decision("a1", "allow"))
    report = await replay(events, trust=1, policy=load_policy(_deny_policy(tmp_path, "ask")))
    (change,) = report.replayed.changes
    assert (change.old, change.new) == ("allow", "ask") and "stricter" in change.why


async def test_an_altered_action_cannot_be_replayed_under_a_policy(tmp_path: Path) -> None:
    """A recorded action that no longer matches its identity hash is unsupported under --policy."""
    good = prepared("a1", "ls")
    forged = good.model_copy(update={"action": prepared("a1", "rm -rf /").action})
    events = _events(forged, _gate("j1", "a1"), decision("a1", "allow", judgment_ids=("j1",)))
    policy = load_policy(Path("policy/default.toml"))
    (item,) = (await replay(events, trust=1, policy=policy)).unsupported
    assert "does not match its identity hash" in item.reason


async def test_a_human_outcome_is_reported_never_manufactured() -> None:
    """A human-approved ask that would now be allow is reported with its outcome; no approval is created."""
    events = _events(
        prepared("a1", "rm build.log"),
        _gate("j1", "a1", destructive=1),
        decision("a1", "ask", judgment_ids=("j1",)),
        ApprovalRequested(action_id="a1", approval_id="p1", identity_hash=prepared("a1", "rm build.log").identity_hash),
        ApprovalResolved(approval_id="p1", outcome="denied"),
    )
    report = await replay(events, trust=2)
    (change,) = report.replayed.changes
    assert (change.old, change.new, change.approval) == ("ask", "allow", "denied")
    assert change.note is not None and "No approval is made, nothing runs" in change.note
    assert report.unsupported == ()


async def test_forged_approvals_are_flagged_and_grant_nothing() -> None:
    """An approval resolved without a request, or bound to another identity, is reported and ignored."""
    events = _events(
        prepared("a1", "ls"),
        ApprovalResolved(approval_id="forged", outcome="approved"),
        ApprovalRequested(action_id="a1", approval_id="p2", identity_hash="0" * 64),
        ApprovalResolved(approval_id="p2", outcome="approved"),
    )
    report = await replay(events, trust=1)
    assert [(u.kind, u.ref, u.line) for u in report.unsupported] == [("approval", "forged", 2), ("approval", "p2", 3)]
    assert "never requested" in report.unsupported[0].reason


async def test_reevaluate_asks_again_and_reports_drift() -> None:
    """Reevaluate calls the judge once per judgment on the recorded material and reports drift per question."""
    judge = CountingJudge({"a1": _answers(destructive=0), "a2": _answers(exfiltration=3)})
    report = await replay(_interleaved(), trust=1, mode="reevaluate", judge=judge)
    assert [call.material for call in judge.calls] == [{"subject": "a2"}, {"subject": "a1"}]
    assert judge.calls[0].table == GATE_TABLE
    assert report.provider_calls == 2
    assert [(d.judgment_id, d.question_id, d.recorded, d.fresh) for d in report.drift] == [
        ("j2", "exfiltration", 0, 3),
        ("j1", "destructive", 2, 0),
    ]
    assert sorted((c.action_id, c.old, c.new) for c in report.replayed.changes) == [
        ("a1", "deny", "allow"),
        ("a2", "allow", "deny"),
    ]


async def test_reevaluate_failure_is_reported_not_guessed() -> None:
    """A failing fresh judgment makes the decision unsupported with the judge's error."""
    judge = CountingJudge(fail=True)
    report = await replay(_interleaved(), trust=1, mode="reevaluate", judge=judge)
    assert len(judge.calls) == 2
    assert {u.reason for u in report.unsupported} == {
        "asking again for judgment j1 failed: judge timed out after 20.0s",
        "asking again for judgment j2 failed: judge timed out after 20.0s",
    }


async def test_a_failed_recorded_judgment_is_unsupported_in_policy_mode() -> None:
    """A recorded judge failure has no answers to re-score in policy mode."""
    events = _events(
        judgment("j1", "a1", {}, error="timeout", table=GATE_TABLE), decision("a1", "ask", judgment_ids=("j1",))
    )
    (item,) = (await replay(events, trust=3)).unsupported
    assert item.reason.startswith("judgment j1 failed (timeout)")


def _focus_journal(answers: dict[str, Answer], *, with_manifest: bool = True) -> tuple[list[JournalEvent], str]:
    text = "building\n\nTraceback (most recent call last):\n  File 'x'\nValueError: boom\n\nall done\n"
    manifest = split_sections(text, max_sections=100)
    decided = apply_focus(manifest, answers)
    events = _events(
        judgment("f1", None, answers, table=FOCUS_TABLE, artifact_id="s1.a1"),
        FocusDecision(
            artifact_id="s1.a1",
            stream="stdout",
            mode="shadow",
            status=decided.status,
            manifest_hash=manifest.manifest_hash,
            manifest=SectionManifest.of(manifest.sections) if with_manifest else None,
            judgment_id="f1",
            selected=decided.section_ids,
        ),
    )
    return events, manifest.manifest_hash


async def test_focus_decisions_with_a_manifest_replay() -> None:
    """A focus decision with its manifest is recomputed from the recorded answers and comes out the same."""
    events, _ = _focus_journal({"decision": "select", "sections": ("S2", "S2")})
    report = await replay(events, trust=1)
    (item,) = report.replayed.focus
    assert (item.new_status, item.new_selected, item.changed) == ("select", ("S2",), False)
    assert report.replayed.unchanged == 1


async def test_focus_decision_without_manifest_is_unsupported() -> None:
    """A focus decision journaled without its manifest is listed as unsupported."""
    events, _ = _focus_journal({"decision": "full", "sections": ()}, with_manifest=False)
    (item,) = (await replay(events, trust=1)).unsupported
    assert (item.kind, item.ref) == ("focus", "s1.a1/stdout")
    assert item.reason == "no section manifest was recorded with this focus decision"


async def test_focus_answers_are_revalidated_against_the_manifest() -> None:
    """A recorded selection naming a section the manifest lacks comes out as an error on replay."""
    events, _ = _focus_journal({"decision": "select", "sections": ("S1",)})
    tampered = [
        e.model_copy(update={"answers": {"decision": "select", "sections": ("S99",)}})
        if isinstance(e, JudgmentEvent)
        else e
        for e in events
    ]
    (item,) = (await replay(tampered, trust=1)).replayed.focus
    assert (item.new_status, item.changed) == ("error", True)
    assert "S99" in item.why


@pytest.mark.parametrize(
    "answers",
    [
        {"decision": "select", "sections": ("S3", "S1", "S3")},
        {"decision": "full", "sections": ()},
        {"decision": "compute_or_retrieve", "sections": ("S1",)},
    ],
)
def test_refocus_agrees_with_apply_focus(answers: dict[str, Answer]) -> None:
    """The replay's focus recomputation gives the same status and selection as the focus reflex itself."""
    manifest = split_sections("a\n\nb\n\nc\n", max_sections=10)
    expected = apply_focus(manifest, answers)
    status, selected, why = refocus(SectionManifest.of(manifest.sections), answers)
    assert (status, selected, why) == (expected.status, expected.section_ids, "ok")


async def test_corrupt_lines_are_reported_and_valid_records_still_replay() -> None:
    """A journal with a corrupt line reports it by number and still replays the complete records."""
    data = journal_bytes(*_interleaved())
    lines = data.split(b"\n")
    lines.insert(2, b'{"v": 1, "seq": NaN}')
    read = read_journal(io.BytesIO(b"\n".join(lines) + b'{"cut'), settings=JournalSettings(), mode="lenient")
    report = await replay(read, trust=1)
    assert [(e.line, e.code) for e in report.errors] == [(3, "non_finite"), (8, "truncated")]
    assert report.replayed.unchanged == 2


async def test_bad_arguments_are_refused() -> None:
    """A trust level outside 0..3, or reevaluate without a judge, is refused before anything is read."""
    with pytest.raises(ValueError, match=r"^trust level 7 is not one of 0, 1, 2, 3"):
        await replay([], trust=7)
    with pytest.raises(ValueError, match=r"^--mode reevaluate needs a judge"):
        await replay([], trust=1, mode="reevaluate")


async def test_an_action_journaled_with_escapes_is_replayed_as_it_was_prepared(tmp_path: Path) -> None:
    """An upload whose member names hold undecodable bytes (and a real backslash) is journaled with escapes, JSON
    having no form for them: replay checks the action as it was prepared against its identity hash, so the record
    is re-decided under another policy, not called altered."""
    members = ("f\udcff.txt", "back\\xff", "\\")
    action = BashAction(
        session_id=SESSION, command="cat", cwd="/workspace", timeout_ms=30_000, stdin_sha256="0" * 64,
        stdin_members=members,
    )  # fmt: skip
    path = tmp_path / "journal.ndjson"
    with JournalWriter(path, session_id=SESSION, settings=JournalSettings()) as journal:
        written = journal.emit(ActionPrepared(action_id="a1", identity_hash=action.identity(), action=action))
        journal.emit(verdict("a1", "allow", static_only=True))
        journal.emit(decision("a1", "allow"))
    assert isinstance(written, ActionPrepared) and written.action.identity() != action.identity()  # escaped
    read = read_journal_file(path, settings=JournalSettings())
    report = await replay(read.events, trust=1, policy=load_policy(_deny_policy(tmp_path)))
    assert report.unsupported == ()
    (change,) = report.replayed.changes
    assert (change.action_id, change.old, change.new) == ("a1", "allow", "deny")
