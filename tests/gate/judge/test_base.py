"""Answer validation against a question table."""

from __future__ import annotations

import pytest

from executor.errors import JudgeError
from executor.gate.judge.base import validate_answers
from executor.models import Question, QuestionTable

TABLE = QuestionTable(
    reflex="focus",
    version=1,
    questions=(
        Question(id="flag", text="?", answer="bool"),
        Question(id="level", text="?", answer="level"),
        Question(id="mode", text="?", answer="choice", choices=("select", "full")),
        Question(id="ids", text="?", answer="ids"),
    ),
)


def test_valid_answers_are_typed_in_table_order() -> None:
    """A list answer becomes a tuple; everything else keeps its type."""
    answers = validate_answers(TABLE, {"ids": ["s1"], "mode": "full", "level": 3, "flag": False})
    assert list(answers) == ["flag", "level", "mode", "ids"]
    assert answers["ids"] == ("s1",)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"flag": True, "level": 0, "mode": "full"}, "unanswered: ids"),
        ({"flag": True, "level": 0, "mode": "full", "ids": [], "extra": 1}, "does not ask: 'extra'"),
        ({"flag": 1, "level": 0, "mode": "full", "ids": []}, "'flag' needs true or false"),
        ({"flag": True, "level": True, "mode": "full", "ids": []}, "'level' needs an integer"),
        ({"flag": True, "level": 4, "mode": "full", "ids": []}, "'level' needs an integer"),
        ({"flag": True, "level": 0, "mode": "allow", "ids": []}, "'mode' needs one of"),
        ({"flag": True, "level": 0, "mode": "full", "ids": [1]}, "'ids' needs strings"),
        ({"flag": True, "level": 0, "mode": "full", "ids": "s1"}, "'ids' needs a list"),
        (["flag"], "not an object"),
    ],
)
def test_invalid_answers_are_judge_errors(raw: object, message: str) -> None:
    """Missing, extra and ill-typed answers are refused."""
    with pytest.raises(JudgeError, match=message):
        validate_answers(TABLE, raw)
