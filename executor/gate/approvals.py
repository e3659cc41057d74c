"""Approvals: a person (or a program) permits one exact action, once.

Rules (each is tested):

* An :class:`Approval` is a single-use token bound to the action's identity hash, which covers the session,
  the exact command and its parsed arguments, cwd, env, stdin and timeout, or for a write the resolved
  path, the content hash and the reviewed target state. :meth:`Approval.consume` refuses any other identity
  and any second use.
* Only a handler's literal ``True`` approves. ``False``, ``None`` (an empty answer), EOF, an exception, or
  any other value denies (:class:`ActionDenied`); cancellation propagates. Elapsed time never approves:
  a bound is a cancel scope around :func:`request_approval`, and expiry cancels.
* When the handler has answered, ``current_identity()`` is asked again; if the action changed meanwhile
  (for a write, the caller re-stats the target, and a changed file changes the identity) the approval is
  invalidated (:class:`ApprovalInvalidated`) and nothing runs.
* Without a handler (a non-interactive run) an ask raises :class:`ApprovalRequired` whose message is the
  blocked tool result telling the agent to ask the user (:func:`blocked_result_text`).
"""

from __future__ import annotations

import secrets
import sys
import unicodedata
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TextIO

import trio
from pydantic import BaseModel, ConfigDict

from executor.errors import ActionDenied, ApprovalInvalidated, ApprovalRequired, ExecutorError
from executor.ids import new_approval_id
from executor.models import BashAction, WriteAction

__all__ = [
    "Answered",
    "Approval",
    "ApprovalDenied",
    "ApprovalHandler",
    "ApprovalRequest",
    "CallbackApprovalHandler",
    "TerminalApprovalHandler",
    "blocked_result_text",
    "printable",
    "request_approval",
    "summarize",
]


class ApprovalRequest(BaseModel):
    """What a person is asked to approve."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    action: BashAction | WriteAction
    """The exact action."""
    identity: str
    """Its identity hash; the approval binds to it."""
    summary: str
    """Human-readable: the command (with cwd, env, timeout) or the path and the proposed diff."""
    reasons: tuple[str, ...] = ()
    """Why the gate asks (matched rules, judge findings)."""
    approval_id: str | None = None
    """The id the session's journal records this ask under (``approval_requested``/``approval_resolved``); a handler
    that names its asks (the service's pending approvals) uses it, so the id a person answers is the journal's."""


class ApprovalDenied(ActionDenied):
    """A person (or a handler) answered no: :attr:`answered_by` says who, when the handler says."""

    def __init__(self, message: str, *, answered_by: str | None) -> None:
        super().__init__(message)
        self.answered_by = answered_by


@dataclass(frozen=True)
class Answered:
    """A handler's answer that says who gave it (journaled as ``approval_resolved.answered_by``)."""

    approve: bool
    """True approves this exact action once."""
    by: str
    """Who answered: a service token's owner id, ``socket`` (the service's unix socket), ``terminal``, ``mcp``..."""


class ApprovalHandler(Protocol):
    """Answers approval requests: ``True`` (or an :class:`Answered` that approves) approves; anything else, an
    exception or EOF denies. A handler may name who answers with an ``answerer`` attribute, or per answer with
    :class:`Answered`."""

    async def __call__(self, request: ApprovalRequest) -> bool | Answered | None:
        """Return True to approve this exact action once."""
        ...


class Approval:
    """A single-use permission for exactly one action identity."""

    __slots__ = ("_used", "answered_by", "approval_id", "identity", "session_id")

    def __init__(self, identity: str, session_id: str, answered_by: str | None = None) -> None:
        self.approval_id = new_approval_id()
        self.identity = identity
        self.session_id = session_id
        self.answered_by = answered_by
        """Who approved (see :class:`Answered`); None when the handler does not say."""
        self._used = False

    @property
    def used(self) -> bool:
        """True once :meth:`consume` succeeded."""
        return self._used

    def consume(self, identity: str) -> None:
        """Spend the approval on the action with ``identity``.

        Raises:
            ApprovalInvalidated: a different action (or session), or the approval was already used.
        """
        if self._used:
            raise ApprovalInvalidated(
                f"approval {self.approval_id} was already used; each approval runs one action once"
            )
        if not secrets.compare_digest(identity, self.identity):
            raise ApprovalInvalidated(
                f"approval {self.approval_id} was given for another action; nothing ran. Ask for approval again"
            )
        self._used = True

    def __repr__(self) -> str:
        return f"Approval({self.approval_id}, identity={self.identity[:12]}, used={self._used})"


_VISIBLE = {"\n", "\t"}
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co"})


def printable(text: str, *, keep_newlines: bool = True) -> str:
    """``text`` with control, invisible, line-breaking and bidirectional characters shown as escapes.

    A command or diff shown to a person must not be able to hide part of itself (carriage returns,
    terminal escapes, right-to-left overrides, zero-width characters) nor start a line of its own
    (newlines, U+2028/U+2029 separators). Escaped: Unicode categories Cc, Cf, Zl, Zp, Cs and Co.
    """
    out: list[str] = []
    for char in text:
        code = ord(char)
        if keep_newlines and char in _VISIBLE:
            out.append(char)
        elif code < 0x20 or 0x7F <= code < 0xA0 or unicodedata.category(char) in _HIDDEN_CATEGORIES:
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(char)
    return "".join(out)


def _line(text: str) -> str:
    """One field of a prompt on one line: newlines, CR, escapes, bidi and invisible characters shown as escapes."""
    return printable(text, keep_newlines=False)


_MEMBERS_SHOWN = 50
"""Most archive member names an approval prompt lists."""
_GUTTER = "  | "
"""Every diff line is shown after this gutter, so content can never start a line of the prompt itself."""


def summarize(action: BashAction | WriteAction) -> str:
    """The human-readable summary shown for approval: the command, or the path and the diff.

    Every field a person reads (command, cwd, env names and values, path, diff lines) is escaped so that it
    cannot forge a line of its own: newlines, carriage returns, terminal escapes, bidi overrides and invisible
    characters appear as ``\\xNN``/``\\uNNNN`` escapes, and diff lines sit behind a ``|`` gutter.
    """
    if isinstance(action, BashAction):
        lines = [
            f"run in session {_line(action.session_id)}:",
            f"  $ {_line(action.command)}",
            f"  cwd: {_line(action.cwd)}",
            f"  timeout: {action.timeout_ms} ms"
            if action.timeout_ms is not None
            else "  timeout: none (a background task)",
        ]
        for name, value in sorted(action.env.items()):
            lines.append(f"  env: {_line(name)}={_line(value)}")
        if action.stdin_sha256:
            lines.append(f"  stdin: sha256 {action.stdin_sha256}")
        if action.stdin_members is not None:
            shown = [member for member in action.stdin_members if member != "..."][:_MEMBERS_SHOWN]
            more = len(action.stdin_members) - len(shown)
            lines.append(f"  unpacks {len(action.stdin_members)} archive member(s) from stdin:")
            lines.extend(_GUTTER + _line(member) for member in shown)
            if more:
                lines.append(f"{_GUTTER}... and more")
        if action.stdin_program is not None:
            # The program a shell or interpreter reads from that stdin: shown whole, as a write's diff is.
            lines.append("  the program read from stdin:")
            lines.extend(_GUTTER + _line(line) for line in action.stdin_program.splitlines())
        return "\n".join(lines)
    target = "new file" if action.reviewed.kind == "missing" else f"replaces a {action.reviewed.kind} file"
    lines = [
        f"write in session {_line(action.session_id)}: {_line(action.path)} ({target}, {action.size} bytes, "
        f"sha256 {action.content_sha256[:16]})"
    ]
    if action.git_dir is not None:
        lines.append(f"  inside the git directory {_line(action.git_dir)}")
    if action.diff:
        lines.extend(_GUTTER + _line(line) for line in action.diff.splitlines())
    else:
        lines.append("(no diff available)")
    return "\n".join(lines)


def blocked_result_text(request: ApprovalRequest) -> str:
    """The tool result an agent gets when an action needs approval and nobody can give it."""
    why = (
        "; ".join(_line(reason) for reason in request.reasons)
        if request.reasons
        else "the gate asks for a person's review"
    )
    kind = "command" if isinstance(request.action, BashAction) else "write"
    return (
        f"BLOCKED: this {kind} needs a person's approval and this run has no one to approve it, so nothing ran. "
        f"Ask the user to review and approve it (or to run it themselves). Why: {why}.\n{request.summary}"
    )


class TerminalApprovalHandler:
    """Asks on a terminal: shows the command or the diff, reads one line; default No, EOF denies.

    The blocking read runs in a worker thread abandoned on cancellation, so a cancelled run never waits
    for a keypress.
    """

    answerer = "terminal"
    """Who answers, as the journal records it."""
    runs_on_trio = True
    """It awaits trio (a worker thread): a :class:`~executor.session.threaded.ThreadedExecutor` calls it on its trio
    loop, not on the asyncio loop of the program that opened it."""

    def __init__(self, *, stdin: TextIO | None = None, stdout: TextIO | None = None) -> None:
        """Args:
        stdin: where the answer is read (default ``sys.stdin``).
        stdout: where the question is shown (default ``sys.stderr``, so stdout stays machine-readable).
        """
        self._stdin = stdin if stdin is not None else sys.stdin
        self._stdout = stdout if stdout is not None else sys.stderr

    async def __call__(self, request: ApprovalRequest) -> bool:
        """Show ``request`` and return True only for an explicit yes.

        Raises:
            EOFError: the input ended before an answer (:func:`request_approval` turns it into a denial).
        """
        out = self._stdout
        out.write("\n=== approval needed ===\n")
        for reason in request.reasons:
            out.write(f"  why: {printable(reason, keep_newlines=False)}\n")
        out.write(request.summary + "\n")
        out.write("Approve this exact action once? [y/N] ")
        out.flush()
        line = await trio.to_thread.run_sync(self._stdin.readline, abandon_on_cancel=True)
        if not line:
            out.write("\n(end of input: denied)\n")
            raise EOFError("end of input before an answer")
        return line.strip().lower() in ("y", "yes")


class CallbackApprovalHandler:
    """Approvals from the Python API: an async callback returns True to approve."""

    def __init__(self, callback: Callable[[ApprovalRequest], Awaitable[bool | None]]) -> None:
        self._callback = callback

    async def __call__(self, request: ApprovalRequest) -> bool | None:
        """Whatever the callback answers (only ``True`` approves)."""
        return await self._callback(request)


async def request_approval(
    action: BashAction | WriteAction,
    handler: ApprovalHandler | None,
    *,
    current_identity: Callable[[], Awaitable[str]],
    reasons: Sequence[str] = (),
    approval_id: str | None = None,
) -> Approval:
    """Ask ``handler`` to approve ``action`` and return a single-use :class:`Approval` for it.

    Args:
        action: the exact prepared action.
        handler: who answers; None for a non-interactive run.
        current_identity: recomputes the action's identity at resolution (for a write: re-stat the target
            and rebuild the action), so a change during review is caught.
        reasons: why the gate asks, shown to the person.
        approval_id: the id the journal records the ask under (handed to the handler in the request).

    Raises:
        ApprovalRequired: no handler; the message is the blocked tool result for the agent.
        ActionDenied: denied, EOF, an empty or non-True answer, or the handler failed.
        ApprovalInvalidated: the action changed between request and resolution.
        trio.Cancelled: cancellation (including a time bound) propagates; nothing is approved.
    """
    identity = action.identity()
    request = ApprovalRequest(
        action=action, identity=identity, summary=summarize(action), reasons=tuple(reasons), approval_id=approval_id
    )
    if handler is None:
        raise ApprovalRequired(blocked_result_text(request))
    by = getattr(handler, "answerer", None)
    by = by if isinstance(by, str) else None
    try:
        answer: object = await handler(request)
    except EOFError as exc:
        raise ActionDenied("end of input (EOF) before an answer counts as a denial; nothing ran") from exc
    except Exception as exc:
        raise ActionDenied(
            f"the approval handler failed ({type(exc).__name__}); treated as a denial, nothing ran"
        ) from exc
    if isinstance(answer, Answered):
        by = answer.by
        answer = answer.approve
    if answer is not True:
        shown = (
            "no answer" if answer is None else "denied" if answer is False else f"unrecognised answer {answer!r:.40}"
        )
        raise ApprovalDenied(f"approval {shown}; nothing ran", answered_by=by if answer is False else None)
    try:
        now = await current_identity()
    except ExecutorError as exc:
        raise ApprovalInvalidated(f"the action could not be re-checked after approval ({exc}); nothing ran") from exc
    if not secrets.compare_digest(now, identity):
        raise ApprovalInvalidated(
            "the action changed while it waited for approval (command, arguments or the file under review); "
            "nothing ran. Prepare it again and ask for a new approval"
        )
    return Approval(identity, action.session_id, answered_by=by)
