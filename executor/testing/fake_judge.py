"""A scripted judge for pure unit tests of the gate, the cache and the reflexes that use them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

import trio

from executor.errors import JudgeError
from executor.gate.judge.base import Judge
from executor.models import JudgmentRequest

__all__ = ["FakeJudge", "gate_answers"]

Script = Mapping[str, object] | Callable[[JudgmentRequest], Mapping[str, object] | Awaitable[Mapping[str, object]]]


def gate_answers(**levels: object) -> dict[str, object]:
    """Gate-table answers: every level 0 and no flag, except what is given."""
    answers: dict[str, object] = dict.fromkeys(
        ("destructive", "exfiltration", "privilege", "obfuscation", "sensitive_path"), 0
    )
    answers["instructions_in_material"] = False
    answers.update(levels)
    return answers


class FakeJudge(Judge):
    """Answers from a script: a fixed mapping, or a function of the request (sync or async).

    ``calls`` lists every request that reached the provider (cache hits never do). ``gate`` (a
    :class:`trio.Event`), when given, holds every call until it is set; ``error`` makes every call fail.
    """

    def __init__(
        self,
        script: Script,
        *,
        name: str = "fake",
        gate: trio.Event | None = None,
        error: str | None = None,
        cacheable: bool = True,
    ) -> None:
        self._script = script
        self.name = name
        self.cacheable = cacheable
        self._gate = gate
        self._error = error
        self.calls: list[JudgmentRequest] = []

    async def answer(self, request: JudgmentRequest) -> object:
        """Record the call, wait for the gate event if any, then answer from the script."""
        self.calls.append(request)
        if self._gate is not None:
            await self._gate.wait()
        if self._error is not None:
            raise JudgeError(self._error)
        if callable(self._script):
            result = self._script(request)
            if isinstance(result, Awaitable):
                result = await result
            return dict(result)
        return dict(self._script)
