"""The embedded ``rules`` judge's answers for the sanitize reflex: offline and deterministic.

It flags lines of the material (``{"id": "L<n>", "text": ...}``, already escaped and redacted by
``executor.focus.sanitize.build_sanitize_request``) that address the agent with instructions. It is
broader than the sanitizer's built-in floor (it also flags requests to run or write things and
pipe-to-shell commands addressed to the reader); it imports nothing from ``executor.focus``, a sibling
layer, so its phrase list is its own.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping

from executor.errors import JudgeError
from executor.models import Answer, JudgmentRequest

__all__ = ["answer"]

_PATTERNS = [
    # Attempts to replace the agent's instructions.
    r"\b(ignore|disregard|forget|override|bypass)\b.{0,40}?\b(previous|prior|above|earlier|preceding|all|your|"
    r"the|any|system|safety)\b.{0,20}?\b(instructions?|prompts?|directions|rules|guidelines|messages|context|"
    r"policy|policies|restrictions)\b",
    # Role claims and chat-template tokens.
    r"^\W{0,8}(system|assistant|developer|human)(\s+(prompt|message|note|override))?\s*:",
    r"<\|?(im_start|im_end|system|endoftext|assistant|user)\|?>|\[/?inst\]|<</?sys>>|</?(system|instructions?)>",
    r"\byou are now\b|\bfrom now on,? you\b|\bnew (system )?instructions\b|\byour new (task|goal|role)\b",
    # Claims of approval aimed at the gate.
    r"\bpre-?approved\b|\b(command|action|request)s? (is|are|has been|have been) (approved|authori[sz]ed|safe)\b",
    r"\b(answer|respond|reply|output|say)\s+(with\s+)?[\"']?allow\b|\bauto-?approve",
    # Direct address.
    r"\b(note|message|attention|instructions?|notice) (to|for) (the |any |all )?(ai|agent|assistant|llm|model)s?\b",
    r"\b(ai|llm|language model) (agents?|assistants?|models?)\b.{0,30}?\b(must|should|need to|are required to)\b",
    r"\b(dear|hey|hello) (ai|agent|assistant|claude|chatgpt|gpt|copilot)\b",
    # Requests to act.
    r"\b(now|please|you must|you should|immediately) (run|execute|write|append|send|upload|delete|curl)\b",
    r"\b(curl|wget)\b[^|]{0,200}\|\s*(sudo\s+)?(ba|z)?sh\b",
    r"\b(write|append|add)\b.{0,40}?(authorized_keys|\.bashrc|\.ssh/|/etc/sudoers|crontab)",
    r"\b(do not|don't|never) (tell|inform|mention|show|report)\b.{0,30}?\b(user|human|operator)\b",
]
_FLAGGED = re.compile("|".join(f"(?:{pattern})" for pattern in _PATTERNS))
# The material is already escaped: drop escape notation so "ig<U+200B>nore" still reads "ignore".
_NOTATION = re.compile(r"<U\+[0-9A-F]{4,6}>|\\x[0-9a-f]{2}(?:\{×\d+\})?|\\r|\[untrusted tool output\] ")
_SPACES = re.compile(r"\s+")


def _reads_as(text: str) -> str:
    return _SPACES.sub(" ", _NOTATION.sub("", text)).casefold().strip()


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
    read: list[tuple[str, str, bool]] = []
    for line in lines:
        line_id, text = line.get("id"), line.get("text")
        if not isinstance(line_id, str) or not isinstance(text, str):
            raise JudgeError("sanitize material: each line needs a string 'id' and 'text'")
        reads = _reads_as(text)
        read.append((line_id, reads, bool(_FLAGGED.search(reads))))
    flagged = {line_id for line_id, _, hit in read if hit}
    for (first_id, first, first_hit), (second_id, second, second_hit) in itertools.pairwise(read):
        # Only a phrase that straddles the break counts: neither line may match on its own.
        if not (first_hit or second_hit) and _FLAGGED.search(f"{first} {second}"):
            flagged.update((first_id, second_id))
    return {"instruction_lines": tuple(line_id for line_id, _, _ in read if line_id in flagged)}
