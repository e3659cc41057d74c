"""Reading a background task's stream as bytes, page by page, for followers (``bg read --follow``, the service's
``follow=true``).

``read_task`` returns a page's bytes as text (the session API's results are text); :func:`read_page` turns a page
back into its exact bytes when its text is all of them, and otherwise asks for up to three bytes less (a character
cut at the page's end), so a follower prints UTF-8 output byte for byte. Bytes that are not UTF-8 at all come back
with the replacement character: the one loss a follower has.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import NamedTuple

from executor.session.api import ToolResult

__all__ = ["Page", "read_page"]


class Page(NamedTuple):
    """One page of a task's stream."""

    result: ToolResult
    """The read's result (its ``data`` has the offsets; ``run`` says how the task ended once it has)."""
    data: bytes
    """The page's bytes."""
    next_offset: int
    """Where the next read starts."""
    end: int
    """Bytes the stream has so far."""
    running: bool
    """The task still runs."""


def _exact(result: ToolResult) -> tuple[bytes | None, int, int, bool]:
    data = result.data or {}
    begin = int(str(data.get("offset", 0)))
    after = int(str(data.get("next_offset", begin)))
    text = (result.stdout if data.get("stream") == "stdout" else result.stderr) or ""
    raw = text.encode("utf-8")
    exact = len(raw) == after - begin and "\ufffd" not in text
    return (raw if exact else None), after, int(str(data.get("end", 0))), bool(data.get("running"))


async def read_page(read: Callable[[int, int], Awaitable[ToolResult]], offset: int, max_bytes: int) -> Page:
    """Read the page at ``offset`` (at most ``max_bytes``, which should not exceed the display budget,
    ``artifacts.display_max_chars``, or the text is cut) through ``read(offset, max_bytes)``."""
    result = await read(offset, max_bytes)
    raw, after, end, running = _exact(result)
    shorter = 1
    while raw is None and shorter < 4 and after - offset > shorter:
        result = await read(offset, after - offset - shorter)
        raw, after, end, running = _exact(result)
        shorter += 1
    if raw is None:
        data = result.data or {}
        text = (result.stdout if data.get("stream") == "stdout" else result.stderr) or ""
        raw = text.encode("utf-8")
    return Page(result, raw, after, end, running)
