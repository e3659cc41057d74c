"""Judges ("System One"): a contract, the embedded ``rules`` provider and the ``openai`` provider.

Build the configured provider with :func:`open_judge` at the entry point, which also reads the API key
from the environment variable the settings name (the key is handed in, never read here from
``os.environ``, never logged and never put in a container).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from executor.config import JudgeSettings
from executor.gate.judge.base import Judge, validate_answers
from executor.gate.judge.openai import OpenAIJudge
from executor.gate.judge.rules import RulesJudge

__all__ = ["Judge", "OpenAIJudge", "RulesJudge", "api_key_from", "open_judge", "validate_answers"]


def api_key_from(settings: JudgeSettings, environ: Mapping[str, str]) -> str | None:
    """The key held by the variable ``settings.api_key_env`` in ``environ`` (the entry point passes
    ``os.environ``); None when unset or empty."""
    return environ.get(settings.api_key_env) or None


@asynccontextmanager
async def open_judge(settings: JudgeSettings, *, api_key: str | None = None) -> AsyncIterator[Judge]:
    """The configured provider, closed (its HTTP client) on exit."""
    if settings.provider == "rules":
        yield RulesJudge()
        return
    async with OpenAIJudge(settings, api_key=api_key) as judge:
        yield judge
