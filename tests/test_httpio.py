"""A reader that stops early under trio leaves no async generator for the garbage collector (executor.httpio)."""

from __future__ import annotations

import gc
import warnings
from contextlib import aclosing
from functools import partial
from typing import Any

import httpx2
import pytest
import trio
import trio.lowlevel

from executor.httpio import ClosingTransport

pytestmark = pytest.mark.timeout(30)


async def _serve_a_long_body(stream: trio.SocketStream) -> None:
    await stream.receive_some(65536)
    try:
        await stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-length: 1000000\r\n\r\n")
        for _ in range(100):
            await stream.send_all(b"x" * 10_000)
    except trio.BrokenResourceError:
        pass  # the reader stopped early, as the test wants


async def _url(nursery: trio.Nursery) -> str:
    listeners: list[trio.SocketListener] = await nursery.start(
        partial(trio.serve_tcp, _serve_a_long_body, 0, host="127.0.0.1")
    )
    return f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}/"


async def _leaks_after_an_early_stop(**client: Any) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        async with trio.open_nursery() as nursery:
            url = await _url(nursery)
            async with (
                httpx2.AsyncClient(**client) as http,
                http.stream("GET", url) as response,
                aclosing(response.aiter_bytes()) as chunks,
            ):
                async for _ in chunks:
                    break
            gc.collect()
            await trio.lowlevel.checkpoint()
            nursery.cancel_scope.cancel()
    return [str(warning.message) for warning in caught if "garbage collected" in str(warning.message)]


async def test_the_stock_transport_leaves_the_connection_iterator_to_the_collector() -> None:
    """The problem this module exists for is real: without it an early stop leaves a generator behind."""
    assert await _leaks_after_an_early_stop()


async def test_the_closing_transport_closes_what_an_early_stop_leaves() -> None:
    """With ClosingTransport, a reader that breaks out of a response leaves nothing to finalize."""
    assert await _leaks_after_an_early_stop(transport=ClosingTransport()) == []


async def test_errors_and_bodies_are_those_of_the_stock_transport() -> None:
    """A whole body reads the same, and a refused connection raises httpx2's own ConnectError."""
    async with trio.open_nursery() as nursery:
        url = await _url(nursery)
        async with httpx2.AsyncClient(transport=ClosingTransport()) as http:
            assert len((await http.get(url)).content) == 1_000_000
            with pytest.raises(httpx2.ConnectError):
                await http.get("http://127.0.0.1:1/")
        nursery.cancel_scope.cancel()
