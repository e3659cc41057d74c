"""Offline replay of journaled judgments against another trust level or static policy.

Replay reads; it never acts. Nothing recorded is executed again, no approval is requested or granted, and
in ``policy`` mode no judge is called at all. What it does:

* every gate decision is re-decided from the judgments it names **by judgment_id** (never "the latest
  judgment of this type"): :func:`executor.gate.decision.decide` at the new trust level for each judgment,
  combined with the static verdict by :func:`executor.gate.decision.strictest`. With a policy, the static
  verdict is recomputed from the recorded action; without one, the recorded static verdict is reused;
* a decision settled by static policy alone (no judgment) is listed as *static-only*: a floor verdict, not
  replayable at another trust level. With a policy it is re-decided when the new policy decides it alone too (a
  deny, or an allow whose environment does not change what runs) and when the new policy asks where the old
  one allowed (judges can only make an ask stricter: at least ``ask``); otherwise the judges that were never
  asked would decide, and it is *unsupported*;
* a decision that cannot be reconstructed (a judgment id the journal does not hold, or holds twice, a judgment
  of another action, a failed judgment, an altered action) is listed as *unsupported* with the reason;
* a focus decision with its recorded section manifest is re-checked: the recorded answers are validated
  against the manifest and the selection recomputed (the same rules as
  :func:`executor.focus.select.apply_focus`); one without a manifest is unsupported;
* an approval stays a historical outcome. A changed decision on an action a person approved or denied is
  reported with that outcome, and replay never turns it into a new approval or a new execution;
* ``reevaluate`` mode asks the configured judge again on each judgment's recorded table and material and
  reports how each answer drifted, per question id.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict

from executor.errors import ExecutorError
from executor.gate.decision import decide, strictest
from executor.gate.env import risky_env
from executor.gate.policy import Policy
from executor.gate.shell import parse_command
from executor.journal import (
    ActionPrepared,
    ApprovalOutcome,
    ApprovalRequested,
    ApprovalResolved,
    DecisionEvent,
    FocusDecision,
    FocusStatus,
    JournalEvent,
    JournalIssue,
    JournalRead,
    JournalRecord,
    JudgmentEvent,
    SectionManifest,
    StaticVerdict,
)
from executor.journal.events import unescaped
from executor.models import Answer, BashAction, Decision, JudgmentRequest

__all__ = [
    "AnswerDrift",
    "DecisionChange",
    "FocusReplay",
    "ReplayJudge",
    "ReplayMode",
    "ReplayReport",
    "Replayed",
    "StaticOnly",
    "Unsupported",
    "refocus",
    "replay",
]

ReplayMode = Literal["policy", "reevaluate"]
"""``policy``: re-score recorded answers, never call a judge; ``reevaluate``: ask the judge again."""

_FOCUS_CHOICES: tuple[FocusStatus, ...] = ("select", "full", "compute_or_retrieve")


class ReplayJudge(Protocol):
    """What ``reevaluate`` mode needs from a judge: answers to one request, validated against its table.

    Raises:
        JudgeError: the judge failed (timeout, non-JSON, schema violation, budget); replay reports it.
    """

    async def judge(self, request: JudgmentRequest) -> Mapping[str, Answer]:
        """Answer ``request``."""
        ...


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class DecisionChange(_Model):
    """A gate decision that comes out differently on replay."""

    action_id: str
    """The action."""
    line: int
    """Journal line of the recorded decision."""
    old: Decision
    """The recorded decision."""
    new: Decision
    """The replayed decision."""
    why: str
    """What moved it: the trust level, the static verdict, and each judgment's own decision, old -> new."""
    approval: ApprovalOutcome | None = None
    """The recorded outcome of this action's approval, if one was asked; it stands unchanged."""
    note: str | None = None
    """What the change means for the recorded approval or execution (nothing is re-run or re-approved)."""


class FocusReplay(_Model):
    """A focus decision recomputed from its recorded manifest and answers."""

    artifact_id: str
    """The artifact."""
    stream: str
    """The stream within it."""
    line: int
    """Journal line of the recorded focus decision."""
    old_status: FocusStatus
    """Recorded status."""
    new_status: FocusStatus
    """Recomputed status (``error`` when the answers do not validate against the manifest)."""
    old_selected: tuple[str, ...]
    """Recorded selection."""
    new_selected: tuple[str, ...]
    """Recomputed selection."""
    changed: bool
    """Status or selection differ."""
    why: str
    """Why it differs (or ``same``)."""


class StaticOnly(_Model):
    """A decision made by static policy alone: a floor verdict with no judgment, never replayable."""

    action_id: str
    """The action."""
    line: int
    """Journal line of the decision."""
    decision: Decision
    """The recorded decision."""
    rules: tuple[str, ...]
    """Names of the recorded matching rules."""


class Unsupported(_Model):
    """Something replay cannot reconstruct, and why."""

    kind: Literal["decision", "focus", "approval"]
    """What could not be replayed."""
    ref: str
    """The action id, artifact id (``artifact/stream``) or approval id."""
    line: int
    """Journal line of the record."""
    reason: str
    """Why, and what would make it replayable."""


class AnswerDrift(_Model):
    """One answer that differs between the recorded judgment and a fresh one (``reevaluate`` mode)."""

    judgment_id: str
    """The recorded judgment."""
    question_id: str
    """The question."""
    recorded: Answer | None
    """The recorded answer (None: none was recorded)."""
    fresh: Answer | None
    """The fresh answer (None: none was given)."""


class Replayed(_Model):
    """Decisions and focus decisions that were reconstructed and re-decided."""

    unchanged: int
    """Gate and focus decisions that come out the same."""
    changed: int
    """Gate and focus decisions that come out differently."""
    changes: tuple[DecisionChange, ...]
    """The changed gate decisions."""
    focus: tuple[FocusReplay, ...]
    """Every replayed focus decision, changed or not."""


class ReplayReport(_Model):
    """The outcome of one replay."""

    mode: ReplayMode
    """How judgments were re-scored."""
    trust: int
    """The trust level decisions were re-decided at."""
    policy: str | None
    """Name of the static policy applied (None: the recorded static verdicts were reused)."""
    lines: int
    """Journal lines seen."""
    records: int
    """Valid records replay worked from."""
    errors: tuple[JournalIssue, ...]
    """Refused journal lines, with line numbers; their content was ignored (the first ``journal.max_issues``)."""
    errors_omitted: int = 0
    """Refused journal lines past ``journal.max_issues``: counted, not listed."""
    replayed: Replayed
    """Reconstructed decisions."""
    static_only: tuple[StaticOnly, ...]
    """Static-only decisions (never replayable)."""
    unsupported: tuple[Unsupported, ...]
    """What could not be reconstructed, with reasons."""
    drift: tuple[AnswerDrift, ...]
    """Answers that changed between the recorded and the fresh judgment (``reevaluate`` only)."""
    provider_calls: int
    """Judge calls made (always 0 in ``policy`` mode)."""


class _Unsupported(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Index:
    """The journal's records keyed by id; an id seen twice is ambiguous and resolves to nothing."""

    def __init__(self, records: Sequence[JournalRecord], ambiguous_judgments: Iterable[str]) -> None:
        self.judgments: dict[str, JudgmentEvent] = {}
        self.ambiguous_judgments = set(ambiguous_judgments)
        self.prepared: dict[str, list[ActionPrepared]] = defaultdict(list)
        self.verdicts: dict[str, list[StaticVerdict]] = defaultdict(list)
        self.requests: dict[str, list[tuple[int, ApprovalRequested]]] = defaultdict(list)
        self.resolutions: dict[str, list[tuple[int, ApprovalResolved]]] = defaultdict(list)
        self.decisions: list[tuple[int, DecisionEvent]] = []
        self.focus: list[tuple[int, FocusDecision]] = []
        for record in records:
            event = record.event
            if isinstance(event, JudgmentEvent):
                self.judgments[event.judgment_id] = event
            elif isinstance(event, ActionPrepared):
                self.prepared[event.action_id].append(event)
            elif isinstance(event, StaticVerdict):
                self.verdicts[event.action_id].append(event)
            elif isinstance(event, ApprovalRequested):
                self.requests[event.approval_id].append((record.line, event))
            elif isinstance(event, ApprovalResolved):
                self.resolutions[event.approval_id].append((record.line, event))
            elif isinstance(event, DecisionEvent):
                self.decisions.append((record.line, event))
            elif isinstance(event, FocusDecision):
                self.focus.append((record.line, event))

    def judgment(self, judgment_id: str) -> JudgmentEvent:
        if judgment_id in self.ambiguous_judgments:
            raise _Unsupported(
                f"judgment {judgment_id} appears more than once in the journal; which one was used is unknown"
            )
        found = self.judgments.get(judgment_id)
        if found is None:
            raise _Unsupported(f"judgment {judgment_id} is not in the journal (missing or refused line)")
        return found

    def one_prepared(self, action_id: str) -> ActionPrepared:
        found = self.prepared.get(action_id, [])
        if not found:
            raise _Unsupported(f"no action_prepared record for {action_id}; another policy cannot be applied to it")
        if len({event.identity_hash for event in found}) > 1:
            raise _Unsupported(f"action {action_id} was prepared more than once with different identities")
        prepared = found[0]
        if prepared.action.identity() == prepared.identity_hash:
            return prepared
        # Text the journal could not hold as JSON (a file name's undecodable bytes in a write's path or an upload's
        # members) was written escaped; the action that was prepared, and hashed, is the one before the escaping.
        try:
            action = type(prepared.action).model_validate(unescaped(prepared.action.model_dump()))
        except ValueError:
            action = None
        if action is None or action.identity() != prepared.identity_hash:
            raise _Unsupported(f"the recorded action {action_id} does not match its identity hash (altered record)")
        return prepared.model_copy(update={"action": action})

    def one_verdict(self, action_id: str) -> StaticVerdict | None:
        found = self.verdicts.get(action_id, [])
        if len({(v.decision, v.matches) for v in found}) > 1:
            raise _Unsupported(f"action {action_id} has conflicting static verdicts")
        return found[0] if found else None

    def approval_outcome(self, action_id: str) -> ApprovalOutcome | None:
        outcome: ApprovalOutcome | None = None
        for approval_id, requests in self.requests.items():
            if any(request.action_id == action_id for _, request in requests):
                resolved = self.resolutions.get(approval_id, [])
                if len(resolved) == 1:
                    outcome = resolved[0][1].outcome
        return outcome


def _read(journal: JournalRead | Iterable[JournalEvent]) -> JournalRead:
    if isinstance(journal, JournalRead):
        return journal
    records = tuple(JournalRecord(line=number, event=event) for number, event in enumerate(journal, start=1))
    return JournalRead(records=records, issues=(), lines=len(records))


def _approval_problems(index: _Index) -> list[Unsupported]:
    problems: list[Unsupported] = []
    for approval_id, resolved in index.resolutions.items():
        line = resolved[0][0]
        if approval_id not in index.requests:
            problems.append(
                Unsupported(
                    kind="approval",
                    ref=approval_id,
                    line=line,
                    reason=f"approval {approval_id} is resolved ({resolved[0][1].outcome}) but was never requested in "
                    "this journal; it is ignored and grants nothing",
                )
            )
        elif len(resolved) > 1:
            problems.append(
                Unsupported(
                    kind="approval",
                    ref=approval_id,
                    line=resolved[1][0],
                    reason=f"approval {approval_id} is resolved more than once; its outcome is ignored",
                )
            )
    for approval_id, requests in index.requests.items():
        for line, request in requests:
            prepared = index.prepared.get(request.action_id, [])
            if prepared and all(p.identity_hash != request.identity_hash for p in prepared):
                problems.append(
                    Unsupported(
                        kind="approval",
                        ref=approval_id,
                        line=line,
                        reason=f"approval {approval_id} is bound to identity {request.identity_hash[:16]}, not to the "
                        f"prepared action {request.action_id}; it grants nothing",
                    )
                )
    return problems


def _approval_note(old: Decision, new: Decision, outcome: ApprovalOutcome | None) -> str | None:
    if outcome is not None and new != "ask":
        return f"recorded approval '{outcome}' stands; '{new}' would not have asked. No approval is made, nothing runs"
    if old == "allow" and new != "allow":
        return f"it ran under '{old}'; under '{new}' it would not have run unasked. Nothing is undone or re-run"
    if new == "ask" and outcome is None:
        return "would now need an approval; replay asks nobody and grants none"
    return None


def refocus(manifest: SectionManifest, answers: Mapping[str, Answer]) -> tuple[FocusStatus, tuple[str, ...], str]:
    """Recompute a focus decision from its manifest and answers (the rules of ``apply_focus``).

    Returns:
        The status, the selected section ids, and ``"ok"`` or why the answers do not validate (status ``error``).
    """
    status = answers.get("decision")
    if not isinstance(status, str) or status not in _FOCUS_CHOICES:
        return "error", (), f"answer 'decision' must be one of {', '.join(_FOCUS_CHOICES)}; got {status!r}"
    raw = answers.get("sections", ())
    if isinstance(raw, str) or not isinstance(raw, tuple | list):
        return "error", (), "answer 'sections' is not a list of section ids"
    known = {section.id for section in manifest.sections}
    ids: list[str] = []
    for section_id in raw:
        if not isinstance(section_id, str) or section_id not in known:
            return "error", (), f"answer names section {str(section_id)[:40]!r}, which the manifest does not have"
        if section_id not in ids:
            ids.append(section_id)
    if status == "select" and not ids:
        return "error", (), "answer 'select' names no sections"
    checked = next(choice for choice in _FOCUS_CHOICES if choice == status)
    return checked, tuple(ids) if checked == "select" else (), "ok"


class _Replayer:
    def __init__(
        self, index: _Index, *, trust: int, policy: Policy | None, mode: ReplayMode, judge: ReplayJudge | None
    ):
        self.index = index
        self.trust = trust
        self.policy = policy
        self.mode = mode
        self.judge = judge
        self.calls = 0
        self.fresh: dict[str, Mapping[str, Answer] | str] = {}
        self.drift: list[AnswerDrift] = []

    async def answers(self, judgment: JudgmentEvent) -> Mapping[str, Answer]:
        if self.mode == "policy":
            if judgment.error is not None:
                raise _Unsupported(
                    f"judgment {judgment.judgment_id} failed ({judgment.error[:120]}); there are no answers to "
                    "re-score (--mode reevaluate asks again)"
                )
            return judgment.answers
        assert self.judge is not None
        if judgment.judgment_id not in self.fresh:
            request = JudgmentRequest(table=judgment.table, material=judgment.material, session_id=judgment.session_id)
            self.calls += 1
            try:
                fresh: Mapping[str, Answer] | str = dict(await self.judge.judge(request))
            except ExecutorError as exc:
                fresh = str(exc)[:200] or type(exc).__name__
            self.fresh[judgment.judgment_id] = fresh
            if not isinstance(fresh, str):
                self._record_drift(judgment, fresh)
        result = self.fresh[judgment.judgment_id]
        if isinstance(result, str):
            raise _Unsupported(f"asking again for judgment {judgment.judgment_id} failed: {result}")
        return result

    def _record_drift(self, judgment: JudgmentEvent, fresh: Mapping[str, Answer]) -> None:
        ids = [q.id for q in judgment.table.questions]
        ids += sorted((set(judgment.answers) | set(fresh)) - set(ids))
        for question_id in ids:
            recorded, now = judgment.answers.get(question_id), fresh.get(question_id)
            if _normal(recorded) != _normal(now):
                self.drift.append(
                    AnswerDrift(judgment_id=judgment.judgment_id, question_id=question_id, recorded=recorded, fresh=now)
                )

    async def decision(self, line: int, event: DecisionEvent) -> tuple[Decision, str]:
        verdict = self.index.one_verdict(event.action_id)
        old_static = verdict.decision if verdict is not None else None
        new_static = old_static
        parts: list[str] = []
        if event.trust != self.trust:
            parts.append(f"trust {event.trust}->{self.trust}")
        if self.policy is not None:
            prepared = self.index.one_prepared(event.action_id)
            evaluated = self.policy.evaluate(prepared.action)
            new_static = evaluated.decision
            if new_static != old_static:
                rules = ", ".join(match.rule for match in evaluated.matches) or "no rule"
                parts.append(f"static {old_static or 'none'}->{new_static or 'none'} ({rules})")
        decisions: list[Decision] = [new_static] if new_static is not None else []
        for judgment_id in event.judgment_ids:
            judgment = self.index.judgment(judgment_id)
            if judgment.action_id != event.action_id:
                raise _Unsupported(
                    f"judgment {judgment_id} judged {judgment.action_id or judgment.artifact_id}, not {event.action_id}"
                )
            if judgment.reflex != "gate":
                raise _Unsupported(f"judgment {judgment_id} is a {judgment.reflex} judgment, not a gate judgment")
            answers = await self.answers(judgment)
            before = decide(judgment.table, judgment.answers, event.trust) if judgment.error is None else "ask"
            after = decide(judgment.table, answers, self.trust)
            decisions.append(after)
            if before != after:
                parts.append(f"judgment {judgment_id} {before}->{after}")
        return strictest(*decisions), "; ".join(parts) or "same inputs"

    def static_decision(self, event: DecisionEvent) -> tuple[Decision, str]:
        """A static-only decision under the replay's policy (see the module docstring)."""
        assert self.policy is not None
        action = self.index.one_prepared(event.action_id).action
        evaluated = self.policy.evaluate(action)
        new = evaluated.decision
        rules = ", ".join(match.rule for match in evaluated.matches) or "no rule"
        env_changes = isinstance(action, BashAction) and bool(
            risky_env(action.env, parse_command(action.command).assignments)
        )
        if new == "deny" or (new == "allow" and not env_changes):
            return new, f"static {event.decision}->{new} ({rules})" if new != event.decision else "same inputs"
        if new == "ask" and event.decision == "allow":
            return "ask", f"static allow->ask ({rules}); the judges, never asked then, could only make it stricter"
        raise _Unsupported(
            f"policy {self.policy.name} does not decide it alone ({new or 'no rule'}: {rules}); the judges that would "
            "decide were never asked when it was recorded"
        )

    async def focus(self, line: int, event: FocusDecision) -> FocusReplay:
        if event.manifest is None:
            raise _Unsupported("no section manifest was recorded with this focus decision")
        if event.judgment_id is None:
            raise _Unsupported("no focus judgment was recorded with this focus decision")
        judgment = self.index.judgment(event.judgment_id)
        if judgment.reflex != "focus" or judgment.artifact_id != event.artifact_id:
            raise _Unsupported(f"judgment {event.judgment_id} is not the focus judgment of {event.artifact_id}")
        answers = await self.answers(judgment)
        status, selected, why = refocus(event.manifest, answers)
        changed = (status, selected) != (event.status, event.selected)
        if changed and why == "ok":
            why = f"{event.status} {list(event.selected)} -> {status} {list(selected)}"
        return FocusReplay(
            artifact_id=event.artifact_id,
            stream=event.stream,
            line=line,
            old_status=event.status,
            new_status=status,
            old_selected=event.selected,
            new_selected=selected,
            changed=changed,
            why=why if changed else "same",
        )


def _normal(answer: Answer | None) -> object:
    return tuple(answer) if isinstance(answer, list) else answer


async def replay(
    journal: JournalRead | Iterable[JournalEvent],
    *,
    trust: int,
    policy: Policy | None = None,
    mode: ReplayMode = "policy",
    judge: ReplayJudge | None = None,
) -> ReplayReport:
    """Re-decide a journal's decisions at ``trust`` (and under ``policy``, when given).

    Args:
        journal: a lenient :class:`~executor.journal.JournalRead` (its refused lines are reported) or events.
        trust: the trust level to re-decide at (0..3).
        policy: a static policy to apply to each recorded action instead of the recorded static verdict.
        mode: ``policy`` never calls ``judge``; ``reevaluate`` asks ``judge`` once per judgment replayed.
        judge: the live judge for ``reevaluate`` mode.

    Raises:
        ValueError: ``trust`` is outside 0..3, or ``reevaluate`` without a judge.
    """
    if trust not in (0, 1, 2, 3):
        raise ValueError(f"trust level {trust!r} is not one of 0, 1, 2, 3")
    if mode == "reevaluate" and judge is None:
        raise ValueError("--mode reevaluate needs a judge; configure gate.judge")
    read = _read(journal)
    records = read.records
    index = _Index(records, read.ambiguous_judgments)
    replayer = _Replayer(index, trust=trust, policy=policy, mode=mode, judge=judge if mode == "reevaluate" else None)
    unchanged = 0
    changes: list[DecisionChange] = []
    static_only: list[StaticOnly] = []
    unsupported = _approval_problems(index)
    for line, event in index.decisions:
        if event.static_only or not event.judgment_ids:
            if event.judgment_ids:
                unsupported.append(
                    Unsupported(
                        kind="decision", ref=event.action_id, line=line, reason="marked static-only yet lists judgments"
                    )
                )
                continue
            if policy is None:
                verdict = index.verdicts.get(event.action_id, [])
                rules = tuple(match.rule for v in verdict[:1] for match in v.matches)
                static_only.append(
                    StaticOnly(action_id=event.action_id, line=line, decision=event.decision, rules=rules)
                )
                continue
        try:
            if event.judgment_ids:
                new, why = await replayer.decision(line, event)
            else:
                new, why = replayer.static_decision(event)
        except _Unsupported as exc:
            unsupported.append(Unsupported(kind="decision", ref=event.action_id, line=line, reason=exc.reason))
            continue
        if new == event.decision:
            unchanged += 1
            continue
        outcome = index.approval_outcome(event.action_id)
        changes.append(
            DecisionChange(
                action_id=event.action_id,
                line=line,
                old=event.decision,
                new=new,
                why=why,
                approval=outcome,
                note=_approval_note(event.decision, new, outcome),
            )
        )
    focus: list[FocusReplay] = []
    for line, focus_event in index.focus:
        try:
            focus.append(await replayer.focus(line, focus_event))
        except _Unsupported as exc:
            ref = f"{focus_event.artifact_id}/{focus_event.stream}"
            unsupported.append(Unsupported(kind="focus", ref=ref, line=line, reason=exc.reason))
    focus_changed = sum(1 for item in focus if item.changed)
    return ReplayReport(
        mode=mode,
        trust=trust,
        policy=policy.name if policy is not None else None,
        lines=read.lines,
        records=len(records),
        errors=read.issues,
        errors_omitted=read.issues_omitted,
        replayed=Replayed(
            unchanged=unchanged + len(focus) - focus_changed,
            changed=len(changes) + focus_changed,
            changes=tuple(changes),
            focus=tuple(focus),
        ),
        static_only=tuple(static_only),
        unsupported=tuple(sorted(unsupported, key=lambda item: item.line)),
        drift=tuple(replayer.drift),
        provider_calls=replayer.calls,
    )
