"""The gate: static policy, then judgment, then a decision (approvals are :mod:`executor.gate.approvals`).

Order and floors:

1. Static policy (:meth:`Policy.evaluate`). A static ``deny`` or ``allow`` decides alone; the outcome is
   marked ``static_only`` and no judge is asked (an allow rule only ever covers one plain read-only
   command). A static ``ask`` is a floor: judgment can still turn it into a deny, never into an allow.
   One exception, whatever the policy file says: a static ``allow`` never decides alone for a command whose
   environment changes what runs (the caller's env or the command's own assignments, classified by
   :mod:`executor.gate.env`): ``ls`` with ``BASH_ENV`` or ``PATH`` set is not the ``ls`` the rule allowed, so
   the judges are asked as if no rule had matched.
2. Judgment of the :data:`~executor.gate.decision.GATE_TABLE`. The embedded rules judge always runs first,
   as a floor; the configured judge (for example ``openai``) runs next unless the verdict is already deny,
   and can only make it stricter. A failed judgment counts as ``ask`` (fail closed); where nobody can
   answer an ask, the approval step blocks it.
3. The decision is the strictest of the static verdict and every judgment's :func:`decide` at trust N.

Material from the sandbox (command output, file content) is passed under ``sandbox_data`` as JSON string
values with an explicit untrusted-data notice; the rules judge only scans it for instruction-like text,
which can raise a flag but never lower a level.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping
from typing import Final

from pydantic import BaseModel, ConfigDict

from executor.config import GateSettings
from executor.gate.cache import AnswerCache, run_judgment
from executor.gate.decision import GATE_TABLE, decide, explain, strictest
from executor.gate.env import risky_env
from executor.gate.judge.base import Judge
from executor.gate.judge.openai import UNTRUSTED_NOTICE
from executor.gate.judge.rules import RulesJudge
from executor.gate.judge.rules_gate import judge_material
from executor.gate.policy import Policy, StaticVerdict
from executor.gate.shell import parse_command
from executor.models import BashAction, Decision, JudgmentRecord, JudgmentRequest, WriteAction

__all__ = ["DEFAULT_CACHE", "Gate", "GateOutcome", "gate_material"]


class _DefaultCache:
    def __repr__(self) -> str:
        return "DEFAULT_CACHE"


DEFAULT_CACHE: Final = _DefaultCache()
"""Sentinel: build the cache from ``GateSettings.cache`` (None means no cache at all)."""


_STATIC_MEMO_ENTRIES: Final = 256
"""Static verdicts a gate remembers (the most recently used actions)."""


class GateOutcome(BaseModel):
    """What the gate decided for one action, and why."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    identity: str
    """The action's identity hash (an approval binds to it)."""
    decision: Decision
    """allow / ask / deny."""
    static_only: bool
    """True when static policy decided alone and no judge was asked (never replayable against answers)."""
    static_verdict: StaticVerdict
    """The static policy's verdict (its decision is a floor)."""
    judgments: list[JudgmentRecord]
    """Every judgment made, floor first."""
    trust: int
    """The trust level the judgments were decided at."""
    reasons: list[str]
    """Human-readable reasons: matched rules with justifications, judge findings, judge failures."""


def _as_text(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return json.dumps(value, ensure_ascii=False, default=str, sort_keys=True)


def gate_material(
    action: BashAction | WriteAction,
    *,
    workspace: str,
    home: str,
    sandbox_data: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """The material a judge sees for ``action``; every sandbox value becomes a quoted JSON string."""
    view: dict[str, object]
    if isinstance(action, BashAction):
        view = {
            "kind": "bash",
            "command": action.command,
            "cwd": action.cwd,
            "env": dict(action.env),
            "timeout_ms": action.timeout_ms,
            "stdin_supplied": action.stdin_sha256 is not None,
        }
        if action.stdin_sha256 is not None:
            view["stdin_program"] = action.stdin_program
        if action.stdin_members is not None:
            view["stdin_members"] = list(action.stdin_members)
    else:
        view = {
            "kind": "write",
            "path": action.path,
            "size": action.size,
            "content_sha256": action.content_sha256,
            "target_kind": action.reviewed.kind,
            "target_mode": oct(action.reviewed.mode),
            "diff": action.diff,
        }
        if action.git_dir is not None:
            view["git_dir"] = action.git_dir
    return {
        "notice": UNTRUSTED_NOTICE,
        "workspace": workspace,
        "home": home,
        "action": view,
        "sandbox_data": {str(name): _as_text(value) for name, value in (sandbox_data or {}).items()},
    }


class Gate:
    """Static policy plus judgment for one executor; safe to share between sessions."""

    def __init__(
        self,
        settings: GateSettings,
        *,
        policy: Policy,
        judge: Judge | None = None,
        cache: AnswerCache | _DefaultCache | None = DEFAULT_CACHE,
    ) -> None:
        """Args:
        settings: the gate section (trust level, cache settings).
        policy: the loaded static policy of the session's profile.
        judge: the configured provider; None or a :class:`RulesJudge` means the embedded judge alone.
        cache: the shared answer cache; :data:`DEFAULT_CACHE` builds one from settings, None disables it.
        """
        self.settings = settings
        self.policy = policy
        self.floor: Judge = RulesJudge()
        self.judge = None if judge is None or isinstance(judge, RulesJudge) else judge
        self.cache = AnswerCache.from_settings(settings.cache) if isinstance(cache, _DefaultCache) else cache
        self._static: OrderedDict[str, tuple[Policy, StaticVerdict, bool]] = OrderedDict()
        """Static verdicts by action identity (the hash of the whole action), with the policy that gave them."""

    def _static_verdict(self, action: BashAction | WriteAction, identity: str) -> tuple[StaticVerdict, bool]:
        """The policy's verdict on ``action`` and whether its env changes code: pure, so remembered by identity.

        The identity hashes every field of the action (command, cwd, env, stdin, timeout, path, content...), so a
        remembered verdict is the verdict on exactly this action; a replaced policy is never served from the memo.
        """
        known = self._static.get(identity)
        if known is not None and known[0] is self.policy:
            self._static.move_to_end(identity)
            return known[1], known[2]
        verdict = self.policy.evaluate(action)
        env_changes = self._env_changes_code(action)
        self._static[identity] = (self.policy, verdict, env_changes)
        while len(self._static) > _STATIC_MEMO_ENTRIES:
            self._static.popitem(last=False)
        return verdict, env_changes

    @staticmethod
    def _env_changes_code(action: BashAction | WriteAction) -> bool:
        if not isinstance(action, BashAction):
            return False
        return bool(risky_env(action.env, parse_command(action.command).assignments))

    def request_for(
        self, action: BashAction | WriteAction, *, session_id: str, material: Mapping[str, object] | None = None
    ) -> JudgmentRequest:
        """The gate-reflex judgment request for ``action``."""
        return JudgmentRequest(
            table=GATE_TABLE,
            material=gate_material(
                action, workspace=self.policy.workspace, home=self.policy.home, sandbox_data=material
            ),
            session_id=session_id,
        )

    async def run_judgment(self, request: JudgmentRequest) -> JudgmentRecord:
        """Judge any reflex's request with the configured provider (or the rules judge) through the cache.

        Never raises a judge failure: a record with ``error`` set means fail closed.
        """
        return await run_judgment(self.judge or self.floor, request, cache=self.cache)

    async def evaluate(
        self,
        action: BashAction | WriteAction,
        *,
        session_id: str,
        material: Mapping[str, object] | None = None,
        trust: int | None = None,
        identity: str | None = None,
    ) -> GateOutcome:
        """Decide ``action``.

        Args:
            action: the prepared action.
            session_id: the session the judgment is charged to; must be the action's own.
            material: sandbox data for context (recent output, file content), passed as quoted strings.
            trust: overrides ``settings.trust`` for this call (0..3).
            identity: ``action.identity()`` when the caller has it already (it is not computed again).

        Raises:
            ValueError: ``session_id`` is not the action's session, or ``trust`` is out of range.
        """
        if action.session_id != session_id:
            raise ValueError(f"action belongs to session {action.session_id!r}, not {session_id!r}")
        level = self.settings.trust if trust is None else trust
        if level not in (0, 1, 2, 3):
            raise ValueError(f"trust level {level!r} is not one of 0, 1, 2, 3")
        identity = action.identity() if identity is None else identity
        static, env_changes = self._static_verdict(action, identity)
        # The file's name, not its host path: the reasons reach the model; `executor config show` gives the path.
        reasons = [
            f"policy rule {m.rule!r} ({m.decision}, policy file {self.policy.rule_file(m.rule)}): {m.justification}"
            for m in static.matches
        ]
        alone = static.decision == "deny" or (static.decision == "allow" and not env_changes)
        if alone and static.decision is not None:
            return GateOutcome(
                identity=identity,
                decision=static.decision,
                static_only=True,
                static_verdict=static,
                judgments=[],
                trust=level,
                reasons=reasons,
            )
        request = self.request_for(action, session_id=session_id, material=material)
        decision: Decision = "ask" if static.decision == "ask" else "allow"
        judgments: list[JudgmentRecord] = []
        for judge in (self.floor, self.judge):
            if judge is None or decision == "deny":
                continue
            record = await run_judgment(judge, request, cache=self.cache)
            judgments.append(record)
            if record.error is not None:
                decision = strictest(decision, "ask")
                reasons.append(f"judge {record.provider} failed, so the gate fails closed: {record.error}")
                continue
            decision = strictest(decision, decide(GATE_TABLE, record.answers, level))
            if judge is self.floor:
                reasons.extend(
                    f"rules (judged at trust {level}): {reason}" for reason in judge_material(request.material).reasons
                )
            else:
                reasons.extend(f"judge {record.provider}: {reason}" for reason in explain(GATE_TABLE, record.answers))
        return GateOutcome(
            identity=identity,
            decision=decision,
            static_only=False,
            static_verdict=static,
            judgments=judgments,
            trust=level,
            reasons=reasons,
        )
