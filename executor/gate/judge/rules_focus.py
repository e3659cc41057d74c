"""The embedded ``rules`` judge's answers for the focus reflex: offline and deterministic.

It reads only the request's material (the section manifest, the command, the intent and the view
limits that ``executor.focus.select.build_focus_request`` puts there); it imports nothing from
``executor.focus``, a sibling layer.

Rules, in order:

1. no sections, or no more lines than the bounded view shows: ``full``;
2. sections that stand out, most important first: tracebacks and failures, then errors, then
   sections sharing words with the intent (more shared words first), then warnings; if any:
   ``select`` as many as fit in the view's character budget (at least one);
3. nothing stands out and the output fits the budget: ``full``;
4. otherwise ``compute_or_retrieve``: the agent should search or compute over the output.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from executor.errors import JudgeError
from executor.models import Answer, JudgmentRequest

__all__ = ["answer"]

_WORD = re.compile(r"\b[A-Za-z0-9_]*[A-Za-z][A-Za-z0-9_]*\b")
_STOPWORD_TEXT = (
    "the and for with that this from are was were not but you your have has had all any can its into out "
    "use used using via per then than there their they them what when where which who will would should "
    "could been being also just only more most some such other over under line lines file files why how "
    "show find look see output command run ran please does did get got"
)
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def _words(text: str) -> set[str]:
    found = (word.strip("_").lower() for word in _WORD.findall(text[:4_000]))
    return {word for word in found if len(word) >= 3 and word not in _STOPWORDS}


def _int(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise JudgeError(f"focus material: {key!r} must be a non-negative integer")
    return value


def answer(request: JudgmentRequest) -> dict[str, Answer]:
    """Answer the focus questions (``decision``, ``sections``) from the request's material.

    Raises:
        JudgeError: the request is not a focus request or its material is malformed.
    """
    if request.table.reflex != "focus":
        raise JudgeError(f"the rules focus judge was asked a {request.table.reflex!r} question table")
    material = request.material
    manifest = material.get("manifest")
    limits = material.get("limits")
    if not isinstance(manifest, Mapping) or not isinstance(limits, Mapping):
        raise JudgeError("focus material needs a 'manifest' and 'limits' object")
    sections = manifest.get("sections")
    if not isinstance(sections, list | tuple) or not all(isinstance(s, Mapping) for s in sections):
        raise JudgeError("focus material: manifest.sections must be a list of objects")
    line_count = _int(manifest, "line_count")
    char_count = _int(manifest, "char_count")
    head_lines = _int(limits, "head_lines")
    budget = _int(limits, "budget_chars")

    if not sections or line_count <= head_lines:
        return {"decision": "full", "sections": ()}

    intent = material.get("intent")
    wanted = _words(intent) if isinstance(intent, str) else set()
    ranked: list[tuple[int, int, int, str, int]] = []  # (tier, -overlap, order, id, chars)
    for order, section in enumerate(sections):
        section_id = section.get("id")
        if not isinstance(section_id, str):
            raise JudgeError("focus material: a section has no string id")
        terms = section.get("terms", ())
        excerpt = section.get("excerpt", "")
        have = _words(" ".join(str(term) for term in terms) + " " + str(excerpt)) if wanted else set()
        overlap = len(wanted & have)
        if section.get("has_traceback") or section.get("has_failure"):
            tier = 0
        elif section.get("has_error"):
            tier = 1
        elif overlap:
            tier = 2
        elif section.get("has_warning"):
            tier = 3
        else:
            continue
        chars = section.get("char_count", 0)
        ranked.append((tier, -overlap, order, section_id, chars if isinstance(chars, int) else 0))

    if not ranked:
        decision = "full" if char_count <= budget else "compute_or_retrieve"
        return {"decision": decision, "sections": ()}

    ranked.sort()
    chosen: list[str] = []
    used = 0
    for _tier, _overlap, _order, section_id, chars in ranked:
        # A few dozen characters per section for its header and its share of the receipt.
        cost = chars + 40
        if chosen and used + cost > budget:
            break
        chosen.append(section_id)
        used += cost
    return {"decision": "select", "sections": tuple(chosen)}
