"""The decision scale: answers plus trust level to allow/ask/deny."""

from __future__ import annotations

import itertools

import pytest

from executor.gate.decision import GATE_TABLE, decide, explain, strictest
from executor.models import Decision
from executor.testing.fake_judge import gate_answers

EXPECTED: dict[int, tuple[Decision, Decision, Decision, Decision]] = {
    0: ("allow", "ask", "deny", "deny"),
    1: ("allow", "ask", "deny", "deny"),
    2: ("allow", "allow", "ask", "deny"),
    3: ("allow", "allow", "allow", "deny"),
}


@pytest.mark.parametrize(("trust", "level"), list(itertools.product(range(4), range(4))))
def test_the_documented_table(trust: int, level: int) -> None:
    """Each trust level maps the highest answered level as documented."""
    assert decide(GATE_TABLE, gate_answers(privilege=level), trust) == EXPECTED[trust][level]  # type: ignore[arg-type]


def test_raising_trust_never_makes_a_decision_stricter() -> None:
    """The scale is monotone and level 3 is denied at every trust level."""
    rank = {"allow": 0, "ask": 1, "deny": 2}
    for level in range(4):
        decisions = [rank[decide(GATE_TABLE, gate_answers(destructive=level), t)] for t in range(4)]  # type: ignore[arg-type]
        assert decisions == sorted(decisions, reverse=True)


def test_flags_ask_at_trust_zero_only() -> None:
    """A true flag asks at trust 0 and has no effect above."""
    flagged = gate_answers(instructions_in_material=True)
    assert decide(GATE_TABLE, flagged, 0) == "ask"  # type: ignore[arg-type]
    assert decide(GATE_TABLE, flagged, 1) == "allow"  # type: ignore[arg-type]


def test_missing_or_invalid_answers_fail_closed() -> None:
    """A missing level or a mistyped answer asks at least, even at trust 3."""
    answers = gate_answers()
    del answers["destructive"]
    assert decide(GATE_TABLE, answers, 3) == "ask"  # type: ignore[arg-type]
    assert decide(GATE_TABLE, gate_answers(obfuscation="0"), 3) == "ask"  # type: ignore[arg-type]
    assert "destructive: missing or invalid answer" in explain(GATE_TABLE, answers)  # type: ignore[arg-type]


def test_strictest_and_trust_range() -> None:
    """deny > ask > allow; an out-of-range trust level is refused."""
    assert strictest() == "allow"
    assert strictest("allow", "deny", "ask") == "deny"
    assert strictest("allow", "ask") == "ask"
    with pytest.raises(ValueError, match="trust level 4"):
        decide(GATE_TABLE, gate_answers(), 4)  # type: ignore[arg-type]
