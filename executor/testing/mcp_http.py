"""An MCP client over streamable HTTP that closes every response stream it reads.

Three upstream layers abandon async generators they started, and trio reports each one the garbage collector finds
(a ``ResourceWarning``, an error under this suite's ``filterwarnings = error``) in whichever test happens to collect
it: that is why two HTTP tests failed on a fresh install and passed on another (issue 30). The owners here close
them instead:

- httpx2's transport adapter iterates the connection's byte stream without closing it: ``executor.httpio`` (used by
  the product's own async clients too) closes it.
- httpx2's ``Response.aiter_text`` does not close the ``aiter_bytes`` it reads: :class:`_Response` reads text through
  ``aclosing`` and, as the owner of what was read from it, closes its text readers when it is closed.
- The SDK (mcp 2.3.0, ``StreamableHTTPTransport._handle_sse_response``) returns from inside its ``async for`` over an
  ``httpx2.EventSource`` once it has the answer, after closing the response but not the iterator. Importing this
  module binds the SDK's ``EventSource`` names to :class:`_EventSource`, whose events are a plain async iterator:
  abandoning it leaves no generator behind, and the text reader it fed is closed with the response.
"""

from __future__ import annotations

import codecs
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing, asynccontextmanager
from typing import Any

import httpx2
import mcp.client.streamable_http
from httpx2._sse import _SSEParser
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

from executor.httpio import ClosingTransport

__all__ = ["open_mcp_http_client"]


class _Response(httpx2.Response):
    _readers: list[AsyncGenerator[str, None]]

    def aiter_text(self, chunk_size: int | None = None) -> AsyncGenerator[str, None]:
        reader = self._read_text()
        self._readers = [*getattr(self, "_readers", ()), reader]
        return reader

    async def _read_text(self) -> AsyncGenerator[str, None]:
        decoder = codecs.getincrementaldecoder(self.encoding or "utf-8")(errors="replace")
        async with aclosing(self.aiter_bytes()) as parts:
            async for part in parts:
                if text := decoder.decode(part):
                    yield text
        if text := decoder.decode(b"", final=True):
            yield text

    async def aclose(self) -> None:
        try:
            for reader in getattr(self, "_readers", ()):
                if not reader.ag_running:
                    await reader.aclose()
        finally:
            await super().aclose()


class _Transport(ClosingTransport):
    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        got = await super().handle_async_request(request)
        return _Response(
            got.status_code, headers=got.headers, stream=got.stream, extensions=got.extensions, request=request
        )


class _Events:
    def __init__(self, texts: AsyncIterator[str], max_event_size: int | None) -> None:
        self._texts = texts
        self._parser = _SSEParser(max_event_size)
        self._ready: deque[httpx2.ServerSentEvent] = deque()
        self._ended = False

    def __aiter__(self) -> _Events:
        return self

    async def __anext__(self) -> httpx2.ServerSentEvent:
        while not self._ready:
            if self._ended:
                raise StopAsyncIteration
            try:
                text = await anext(self._texts)
            except StopAsyncIteration:
                self._ended = True
                self._ready.extend(self._parser.flush())
            else:
                self._ready.extend(self._parser.decode(text))
        return self._ready.popleft()


class _EventSource(httpx2.EventSource):
    def __aiter__(self) -> _Events:  # a plain iterator, not a generator: see the module's docstring
        self._check_content_type()
        return _Events(self.response.aiter_text(), self._max_event_size)


# The SDK's two SSE readers: the answer to a POST (streamable_http) and the GET stream (sse_within_origin).
setattr(mcp.client.streamable_http, "EventSource", _EventSource)  # noqa: B010  # mypy refuses assigning a class name
setattr(httpx2, "EventSource", _EventSource)  # noqa: B010  # what mcp.shared._httpx_utils.sse_within_origin builds


@asynccontextmanager
async def open_mcp_http_client(url: str, token: str | None = None, **client_kwargs: Any) -> AsyncIterator[Client]:
    """An MCP ``Client`` of ``url`` (bearer ``token`` if given); ``client_kwargs`` go to ``mcp.Client``.

    The HTTP client is closed after the MCP client, which owns none of it.
    """
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    timeout = httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout, transport=_Transport()) as http,
        Client(streamable_http_client(url, http_client=http), **client_kwargs) as client,
    ):
        yield client
