"""Benchmark of the pure logic on hostile input: sanitize, section splitting and static policy stay linear.

Not a test (pytest collects ``test_*.py`` only); the unit tests check these inputs' results, this measures their
time. ``run()`` returns rows for ``tests.benchmarks``: the slowest of a few runs per input, in milliseconds.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from executor.config import load_settings
from executor.focus.sanitize import sanitize
from executor.focus.sections import split_sections
from executor.gate.policy import load_profile_policy
from executor.models import BashAction

__all__ = ["run"]

_SANITIZE = {
    "dashes": "a-" * 50_000,
    "sk": "sk-" * 30_000,
    "password": "password_" * 10_000,
    "urls": "http://a:" * 20_000,
    "csi": "\x1b[" * 50_000,
    "ignore": "ignore " * 30_000,
    "one long word": "a" * 200_000,
    "look-alikes": "\u0456" * 200_000,
    "combining marks": "i\u0307" * 100_000,
    "names": "ignore_" * 30_000,
    "spelled out": "i " * 100_000,
}
_POLICY = {
    "semicolons": "a;" * 60_000,
    "curls": "curl " * 50_000,
    "functions": "x() { " * 40_000,
    "rm flags": "rm " + "-r " * 80_000,
    "substitutions": "$(" * 60_000,
    "long echo": "echo " + "a" * 250_000,
    "quoted substitutions": 'echo "' + '$(echo "' * 20_000 + "x" + '")' * 20_000 + '"',
    "here-documents": "cat " + "<<E " * 30_000 + "\n" + "x\n" * 30_000,
    "comments": "# '\n" * 50_000 + "rm -rf /",
}


def _slowest_ms(job: Callable[[], object], repeats: int = 3) -> float:
    worst = 0.0
    for _ in range(repeats):
        started = time.perf_counter()
        job()
        worst = max(worst, (time.perf_counter() - started) * 1000)
    return worst


def _row(name: str, value: float, limit_ms: float) -> dict[str, Any]:
    return {
        "section": "6 pure",
        "name": name,
        "unit": "ms",
        "executor": value,
        "raw": None,
        "ratio": None,
        "target": f"< {limit_ms:.0f}",
        "met": value < limit_ms,
        "note": "",
    }


def run() -> list[dict[str, Any]]:
    """Time every hostile input once per kind; targets are the bounds the unit tests used to assert."""
    rows = [
        _row(
            f"sanitize hostile {name} ({len(raw) // 1000} kchars)",
            _slowest_ms(functools.partial(sanitize, raw, redact_credentials=True)),
            1500,
        )
        for name, raw in _SANITIZE.items()
    ]
    sections_text = "".join(f"{c * 1000}\n" for c in "1_=-.E ") * 40
    rows.append(
        _row(
            "split_sections hostile runs (280 kchars)",
            _slowest_ms(lambda: split_sections(sections_text, max_sections=2000)),
            1500,
        )
    )
    settings = load_settings()
    policy = load_profile_policy(settings.gate, settings.profile())
    for name, command in _POLICY.items():
        action = BashAction(session_id="s-000000000000", command=command, cwd="/workspace", timeout_ms=5000)
        rows.append(
            _row(
                f"policy hostile {name} ({len(command) // 1000} kchars)",
                _slowest_ms(functools.partial(policy.evaluate, action)),
                3000,
            )
        )
    return rows
