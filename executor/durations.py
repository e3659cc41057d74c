"""Idle limits as people write them (``3600``, ``"30m"``, ``"2h"``, ``"none"``): standard library only, so the
thin CLI (:mod:`executor.cli.thin`) parses ``--idle`` exactly as the settings and the in-process CLI do."""

from __future__ import annotations

import re
from typing import Final

__all__ = ["IDLE_LIMIT_MAX_S", "parse_idle_limit"]

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$", re.IGNORECASE)
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86_400}
IDLE_LIMIT_MAX_S: Final = 365 * 86_400.0
"""Longest idle limit a session may have (a year)."""


def parse_idle_limit(value: object) -> float | None:
    """Parse an idle limit: seconds (``3600``, ``"3600"``), a duration with a unit (``"30m"``, ``"2h"``, ``"1d"``,
    ``"90s"``), or ``"none"`` (no limit, returned as None).

    Raises:
        ValueError: anything else, or a limit not above 0 or above a year; the message says what is accepted.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError("an idle limit is seconds, a duration like '30m', or 'none'")
    seconds: float
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        if value.strip().lower() == "none":
            return None
        match = _DURATION_RE.match(value)
        if match is None:
            raise ValueError(f"{value!r} is not an idle limit; give seconds, a duration like '30m' or '2h', or 'none'")
        seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2).lower()]
    else:
        raise ValueError("an idle limit is seconds, a duration like '30m', or 'none'")
    if not 0 < seconds <= IDLE_LIMIT_MAX_S:
        raise ValueError(f"an idle limit must be above 0 and at most a year ({IDLE_LIMIT_MAX_S:.0f}s), or 'none'")
    return seconds
