"""The ``rules`` provider: the embedded, offline, deterministic judge.

It dispatches on the request's reflex to a pure module of rules:

* ``gate`` -> :mod:`executor.gate.judge.rules_gate`;
* ``focus`` -> ``executor.gate.judge.rules_focus``;
* ``sanitize`` -> ``executor.gate.judge.rules_sanitize``.

Each module exposes ``answer(request: JudgmentRequest) -> Mapping[str, object]``. The focus and sanitize
modules are imported lazily; while one is absent, asking that reflex fails with a
:class:`~executor.errors.JudgeError` (and the caller fails closed).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import cast

from executor.errors import JudgeError
from executor.gate.judge import rules_gate
from executor.gate.judge.base import Judge
from executor.models import JudgmentRequest, Reflex

__all__ = ["RulesJudge"]

_MODULES: dict[Reflex, str] = {
    "focus": "executor.gate.judge.rules_focus",
    "sanitize": "executor.gate.judge.rules_sanitize",
}


class RulesJudge(Judge):
    """Offline and deterministic; never calls out, never costs budget."""

    name = "rules"
    cacheable = False  # cheaper to recompute than to hold cache entries that evict paid answers

    async def answer(self, request: JudgmentRequest) -> object:
        """Answer from the reflex's rules module.

        Raises:
            JudgeError: the reflex's rules module is absent or failed.
        """
        reflex = request.table.reflex
        if reflex == "gate":
            return rules_gate.answer(request)
        module_name = _MODULES[reflex]
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            raise JudgeError(f"the rules judge has no {reflex} rules yet ({module_name} is missing)") from exc
        function = cast(Callable[[JudgmentRequest], Mapping[str, object]], getattr(module, "answer", None))
        if function is None:
            raise JudgeError(f"{module_name} has no answer(request) function")
        return function(request)
