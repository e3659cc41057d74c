"""A small OpenAI-compatible chat-completions server on 127.0.0.1 for judge tests (hypercorn.trio + starlette)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

__all__ = ["ChatServer", "Reply", "completion", "open_chat_server"]

Reply = Callable[[dict[str, Any]], Awaitable[Response]]


def completion(content: str) -> Response:
    """A chat completion whose message content is ``content``."""
    body = {
        "id": "c1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
    }
    return Response(json.dumps(body), media_type="application/json")


@dataclass
class ChatServer:
    """The running server: its base URL and every request body and Authorization header it saw."""

    base_url: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    authorizations: list[str | None] = field(default_factory=list)

    def user_payload(self, index: int = -1) -> dict[str, Any]:
        """The JSON user message of a request."""
        messages = self.requests[index]["messages"]
        return dict(json.loads(messages[-1]["content"]))


@asynccontextmanager
async def open_chat_server(reply: Reply) -> AsyncIterator[ChatServer]:
    """Serve ``reply`` at ``/v1/chat/completions`` on an ephemeral 127.0.0.1 port until the block ends."""
    server = ChatServer(base_url="")

    async def endpoint(request: Request) -> Response:
        body = json.loads(await request.body())
        server.requests.append(body)
        server.authorizations.append(request.headers.get("authorization"))
        return await reply(body)

    app = Starlette(routes=[Route("/v1/chat/completions", endpoint, methods=["POST"])])
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.graceful_timeout = 0.5
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        # starlette and hypercorn type the ASGI callable differently; the app is a valid ASGI 3 app.
        asgi = cast(Any, app)
        binds = await nursery.start(partial(serve, asgi, config, shutdown_trigger=shutdown.wait))
        server.base_url = binds[0].rstrip("/") + "/v1"
        try:
            yield server
        finally:
            shutdown.set()
