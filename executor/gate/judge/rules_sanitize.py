"""The embedded ``rules`` judge's answers for the sanitize reflex: offline and deterministic.

It flags lines of the material (``{"id": "L<n>", "text": ...}``, already escaped and redacted by
``executor.focus.sanitize.build_sanitize_request``) that address the agent with instructions, with the one
detector of :mod:`executor.injection`, which the sanitizer's built-in floor also uses: on the same view, this judge
and the fail-closed floor flag the same lines.
"""

from __future__ import annotations

from collections.abc import Mapping

from executor.errors import JudgeError
from executor.injection import flagged_indexes
from executor.models import Answer, JudgmentRequest

__all__ = ["answer"]


def answer(request: JudgmentRequest) -> dict[str, Answer]:
    """Answer the sanitize question (``instruction_lines``) from the request's material.

    A phrase split across two consecutive material lines flags both.

    Raises:
        JudgeError: the request is not a sanitize request or its material is malformed.
    """
    if request.table.reflex != "sanitize":
        raise JudgeError(f"the rules sanitize judge was asked a {request.table.reflex!r} question table")
    lines = request.material.get("lines")
    if not isinstance(lines, list | tuple) or not all(isinstance(line, Mapping) for line in lines):
        raise JudgeError("sanitize material: 'lines' must be a list of objects")
    ids: list[str] = []
    texts: list[str] = []
    for line in lines:
        line_id, text = line.get("id"), line.get("text")
        if not isinstance(line_id, str) or not isinstance(text, str):
            raise JudgeError("sanitize material: each line needs a string 'id' and 'text'")
        ids.append(line_id)
        texts.append(text)
    flagged = flagged_indexes(texts)
    return {"instruction_lines": tuple(line_id for index, line_id in enumerate(ids) if index in flagged)}
