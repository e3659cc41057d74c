"""The host-side gate: static policy, a pluggable judge with an embedded floor, the answer cache, approvals.

Flow for one action: ``Gate.evaluate`` (static policy -> judgment -> decision); on ``ask``,
``request_approval`` (a single-use approval bound to the action's identity); the executing tool then
``Approval.consume``\\ s it with the identity of what it is about to run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from executor._lazy import lazy_getattr

if TYPE_CHECKING:
    from executor.gate.approvals import (
        Approval,
        ApprovalHandler,
        ApprovalRequest,
        CallbackApprovalHandler,
        TerminalApprovalHandler,
        blocked_result_text,
        request_approval,
    )
    from executor.gate.cache import AnswerCache, run_judgment
    from executor.gate.decision import GATE_TABLE, decide, strictest
    from executor.gate.gate import DEFAULT_CACHE, Gate, GateOutcome
    from executor.gate.identity import action_identity
    from executor.gate.policy import Policy, StaticVerdict, load_policy, load_profile_policy

__all__ = [
    "DEFAULT_CACHE",
    "GATE_TABLE",
    "AnswerCache",
    "Approval",
    "ApprovalHandler",
    "ApprovalRequest",
    "CallbackApprovalHandler",
    "Gate",
    "GateOutcome",
    "Policy",
    "StaticVerdict",
    "TerminalApprovalHandler",
    "action_identity",
    "blocked_result_text",
    "decide",
    "load_policy",
    "load_profile_policy",
    "request_approval",
    "run_judgment",
    "strictest",
]

_HOMES = {
    "Approval": "executor.gate.approvals",
    "ApprovalHandler": "executor.gate.approvals",
    "ApprovalRequest": "executor.gate.approvals",
    "CallbackApprovalHandler": "executor.gate.approvals",
    "TerminalApprovalHandler": "executor.gate.approvals",
    "blocked_result_text": "executor.gate.approvals",
    "request_approval": "executor.gate.approvals",
    "AnswerCache": "executor.gate.cache",
    "run_judgment": "executor.gate.cache",
    "GATE_TABLE": "executor.gate.decision",
    "decide": "executor.gate.decision",
    "strictest": "executor.gate.decision",
    "DEFAULT_CACHE": "executor.gate.gate",
    "Gate": "executor.gate.gate",
    "GateOutcome": "executor.gate.gate",
    "action_identity": "executor.gate.identity",
    "Policy": "executor.gate.policy",
    "StaticVerdict": "executor.gate.policy",
    "load_policy": "executor.gate.policy",
    "load_profile_policy": "executor.gate.policy",
}

__getattr__ = lazy_getattr(__name__, _HOMES)
