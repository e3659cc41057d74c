"""Approvals over MCP: elicitation mid-call (handshake-era protocol) or ``input_required`` rounds (2026-07-28)."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import trio
from mcp.server.mcpserver import Context
from mcp_types import (
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
)
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from executor.gate.approvals import Answered, ApprovalRequest, printable
from executor.mcp.results import tool_result
from executor.models import BashAction
from executor.session import ToolResult

__all__ = [
    "APPROVAL_SCHEMA",
    "INPUT_REQUIRED_VERSION",
    "InputRound",
    "approval_message",
    "decision",
    "elicitation_supported",
    "gated",
    "mcp_answerer",
]


class _ApprovalForm(BaseModel):
    """The one question an approval asks."""

    model_config = ConfigDict(extra="forbid")

    approve: StrictBool = Field(description="true runs exactly this action once; false refuses it.")


APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {
            "type": "boolean",
            "title": "Approve",
            "description": "true runs exactly this action once; false refuses it.",
        }
    },
    "required": ["approve"],
}
"""The elicitation form an approval shows: a single required boolean. Only an accepted form with
``approve: true`` approves; decline, cancel, a missing or malformed answer never do."""

INPUT_REQUIRED_VERSION = "2026-07-28"
"""First protocol revision without server-to-client requests: from it on, approvals ride ``input_required``."""

_APPROVAL_KEY = "approval"
"""Key of the approval question inside an ``input_required`` round."""

_MAX_SUMMARY_CHARS = 16_000
"""Longest command or diff shown in one approval message (clients render it; a diff is already bounded)."""


def approval_message(request: ApprovalRequest) -> str:
    """What the person is shown: the exact command or the path and diff, why it is asked, what each answer does."""
    summary = request.summary  # already made printable by the gate (no hidden control characters)
    if len(summary) > _MAX_SUMMARY_CHARS:
        summary = summary[:_MAX_SUMMARY_CHARS] + "\n[... cut: the full diff is longer than this message allows]"
    kind = "command" if isinstance(request.action, BashAction) else "file write"
    lines = [f"The agent asks to run this {kind} in its sandbox:", "", summary]
    if request.reasons:
        lines += ["", "Why it needs approval: " + "; ".join(printable(r, keep_newlines=False) for r in request.reasons)]
    lines += ["", "Approve to run exactly this, once. Decline or cancel runs nothing."]
    return "\n".join(lines)


def mcp_answerer(owner: str | None) -> str:
    """Who answered an elicitation, as the journal records it: the MCP client, by its token's owner id if any."""
    return f"mcp {owner}" if owner else "mcp"


def decision(answer: ElicitResult | None) -> bool | None:
    """Map an elicitation answer onto the pipeline's: True approves, False denies, None leaves it unanswered."""
    if answer is None or answer.action == "cancel":
        return None
    if answer.action == "decline":
        return False
    try:
        form = _ApprovalForm.model_validate(answer.content or {})
    except ValidationError:
        # An accepted form without a valid answer is not an approval.
        return False
    return form.approve


def elicitation_supported(ctx: Context[Any, Any]) -> bool:
    """Whether the client declared form elicitation (a bare ``elicitation: {}`` counts as form)."""
    capabilities = ctx.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    return elicitation is not None and (elicitation.form is not None or elicitation.url is None)


class _RoundState(BaseModel):
    """What an ``input_required`` round remembers between the question and the retry.

    The SDK seals ``request_state`` (authenticated encryption, bound to the request), so the client cannot
    forge it; the owner is checked as well, so one token's question is never answered under another's.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    v: Literal[1] = 1
    identity_hash: str
    owner: str | None


@dataclass
class InputRound:
    """Approvals on the 2026-07-28 protocol: ask by answering ``input_required``, apply the answer on the retry.

    Round one: the pipeline asks; the handler records the request and cancels the call's scope, so the gate
    records a cancelled wait (not a denial) and nothing runs; the tool answers ``input_required`` with the
    question. Retry: the pipeline prepares the action again; if its identity is the one the person answered about,
    the handler returns that answer, once. A changed action is asked about again.
    """

    owner: str | None
    answer: ElicitResult | None = None
    answered_identity: str | None = None
    pending: ApprovalRequest | None = None
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)

    @classmethod
    def from_context(cls, ctx: Context[Any, Any], owner: str | None) -> InputRound:
        round_ = cls(owner=owner)
        responses = ctx.input_responses or {}
        response = responses.get(_APPROVAL_KEY)
        if ctx.request_state and isinstance(response, ElicitResult):
            try:
                state = _RoundState.model_validate_json(ctx.request_state)
            except ValidationError:
                return round_
            if state.owner == owner:
                round_.answer = response
                round_.answered_identity = state.identity_hash
        return round_

    async def handler(self, request: ApprovalRequest) -> Answered | None:
        if self.answer is not None and hmac.compare_digest(request.identity, self.answered_identity or ""):
            answer, self.answer = self.answer, None
            decided = decision(answer)
            return None if decided is None else Answered(decided, by=mcp_answerer(self.owner))
        self.pending = request
        # The question goes back to the client in this call's result; nobody answers it in this round.
        self.scope.cancel()
        await trio.sleep_forever()

    def question(self) -> InputRequiredResult:
        assert self.pending is not None
        state = _RoundState(identity_hash=self.pending.identity, owner=self.owner)
        params = ElicitRequestFormParams(message=approval_message(self.pending), requested_schema=APPROVAL_SCHEMA)
        return InputRequiredResult(
            input_requests={_APPROVAL_KEY: ElicitRequest(params=params)},
            request_state=state.model_dump_json(),
        )


async def gated(
    round_: InputRound | None, call: Callable[[], Awaitable[ToolResult]]
) -> CallToolResult | InputRequiredResult:
    """Run a gated tool call; on the 2026-07-28 protocol a pending approval turns into ``input_required``."""
    if round_ is None:
        return tool_result(await call())
    with round_.scope:
        return tool_result(await call())
    return round_.question()  # only reached when the handler cancelled the round to ask
