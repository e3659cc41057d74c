"""The judge contract and answer validation.

A judge receives a :class:`~executor.models.JudgmentRequest` (a question table and quoted material) and
returns one validated answer per question. :meth:`Judge.judge` is the only entry point: it asks the
provider (:meth:`Judge.answer`) and validates what came back against the request's table, so a provider
can never hand the gate an answer the table does not allow.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping

from executor.errors import JudgeError
from executor.models import Answer, JudgmentRequest, QuestionTable

__all__ = ["MAX_IDS", "MAX_ID_CHARS", "Judge", "validate_answers"]

MAX_IDS = 1024
"""Most strings one ``ids`` answer may hold."""
MAX_ID_CHARS = 256
"""Longest string inside an ``ids`` or ``choice`` answer."""


def validate_answers(table: QuestionTable, raw: object) -> dict[str, Answer]:
    """Check ``raw`` against ``table`` and return typed answers in table order.

    Rules: an object keyed by question id, exactly one answer per question (no missing, no extra);
    ``bool`` is a JSON boolean; ``level`` an integer 0..3 (not a boolean); ``choice`` one of the question's
    choices; ``ids`` a list of at most :data:`MAX_IDS` strings of at most :data:`MAX_ID_CHARS` characters.

    Raises:
        JudgeError: the first violation, naming the question.
    """
    if not isinstance(raw, Mapping):
        raise JudgeError(f"judge answered a {type(raw).__name__}, not an object keyed by question id")
    expected = [question.id for question in table.questions]
    missing = [qid for qid in expected if qid not in raw]
    extra = sorted(str(key) for key in raw if key not in expected)
    if missing:
        raise JudgeError(f"judge left question(s) unanswered: {', '.join(missing)}")
    if extra:
        shown = ", ".join(repr(key[:40]) for key in extra[:5])
        raise JudgeError(f"judge answered question(s) the {table.reflex} table does not ask: {shown}")
    answers: dict[str, Answer] = {}
    for question in table.questions:
        value = raw[question.id]
        if question.answer == "bool":
            if not isinstance(value, bool):
                raise JudgeError(f"question {question.id!r} needs true or false, got {type(value).__name__}")
            answers[question.id] = value
        elif question.answer == "level":
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 3:
                raise JudgeError(f"question {question.id!r} needs an integer level 0..3, got {value!r:.40}")
            answers[question.id] = value
        elif question.answer == "choice":
            if not isinstance(value, str) or value not in question.choices:
                raise JudgeError(f"question {question.id!r} needs one of {list(question.choices)}, got {value!r:.40}")
            answers[question.id] = value
        else:
            if not isinstance(value, list | tuple) or len(value) > MAX_IDS:
                raise JudgeError(f"question {question.id!r} needs a list of at most {MAX_IDS} strings")
            if not all(isinstance(item, str) and len(item) <= MAX_ID_CHARS for item in value):
                raise JudgeError(f"question {question.id!r} needs strings of at most {MAX_ID_CHARS} characters")
            answers[question.id] = tuple(value)
    return answers


class Judge(abc.ABC):
    """A judgment provider.

    Subclasses implement :meth:`answer`; callers use :meth:`judge`. A provider signals every failure
    (timeout, transport, budget, malformed output) by raising :class:`~executor.errors.JudgeError`; the
    gate then fails closed.
    """

    name: str = "judge"
    """Provider name recorded with every judgment (``rules``, ``openai:<model>``)."""
    cacheable: bool = True
    """Whether answers may be reused from the answer cache (False for cheap deterministic providers)."""

    @property
    def cache_scope(self) -> str:
        """What distinguishes this provider's cache entries from another's (defaults to :attr:`name`)."""
        return self.name

    @abc.abstractmethod
    async def answer(self, request: JudgmentRequest) -> object:
        """Ask the provider; return its raw answers (validated by :meth:`judge`).

        Raises:
            JudgeError: the provider failed.
        """

    async def judge(self, request: JudgmentRequest) -> dict[str, Answer]:
        """Validated answers to ``request``.

        Raises:
            JudgeError: the provider failed or answered outside the question table.
        """
        return validate_answers(request.table, await self.answer(request))
