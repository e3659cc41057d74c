"""An async HTTP transport whose response streams close what they iterate.

httpx2's own transport adapter iterates the connection's byte stream (an async generator of httpcore2) with a bare
``async for`` and never closes it. A reader that stops early (a size cap, a cancelled stream, a caller that breaks out
of its loop, an SDK that cancels its reader task) then leaves that generator to the garbage collector, which trio
reports as a ``ResourceWarning`` and closes late, on another task. Here the response stream owns the connection's
iterator and closes it as soon as its own iteration stops. Readers still iterate through ``contextlib.aclosing`` so
that httpx2's generators above the transport (``aiter_bytes``, ``aiter_raw``) close at once too.

Every async HTTP client in the executor (``executor.client.AsyncClient``, the OpenAI-compatible judge) and the tests'
MCP clients use :class:`ClosingTransport`; tests/test_httpio.py stops a stream early under trio with warnings as
errors, so a change upstream that breaks this fails there.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator

import httpx2

# Both names are httpx2's own (private): the stream class the adapter returns and its mapping of httpcore2's errors
# into httpx2's. Using them keeps the errors a reader sees exactly those of the stock transport.
from httpx2._transports.default import AsyncResponseStream, map_httpcore_exceptions

__all__ = ["ClosingTransport"]


class ClosingTransport(httpx2.AsyncHTTPTransport):
    """``httpx2.AsyncHTTPTransport`` (same arguments) whose response streams close the connection's iterator."""

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await super().handle_async_request(request)
        if isinstance(response.stream, AsyncResponseStream):
            response.stream = _ClosingStream(response.stream)
        return response


class _ClosingStream(httpx2.AsyncByteStream):
    def __init__(self, stream: AsyncResponseStream) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        parts = self._stream._httpcore_stream.__aiter__()
        try:
            with map_httpcore_exceptions():
                async for part in parts:
                    yield part
        finally:
            if isinstance(parts, AsyncGenerator):
                await parts.aclose()

    async def aclose(self) -> None:
        await self._stream.aclose()
