"""Transports, bearer tokens and owners: each HTTP token is an owner (a hash of it, never the token)."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from typing import Literal

from mcp.server.auth.provider import AccessToken

from executor.errors import ConfigError
from executor.ids import validate_session_name

__all__ = [
    "McpTransport",
    "TokenVerifier",
    "check_session_name",
    "no_tokens_error",
    "owner_for_token",
    "session_name_for",
]

McpTransport = Literal["stdio", "http"]
"""How clients reach the server."""


def session_name_for(name: str, owner: str | None) -> str:
    """The session name an owner uses for ``--session NAME``: names are global, so each token gets its own."""
    return name if owner is None else f"{name}.{owner}"


def check_session_name(name: str, transport: McpTransport) -> None:
    sample = session_name_for(name, owner_for_token("x" * 16) if transport == "http" else None)
    try:
        validate_session_name(sample)
    except ValueError as exc:
        room = " (over HTTP each token's session is named NAME.mcp-<hash>, 21 more characters)"
        raise ConfigError(f"--session: {exc}{room if transport == 'http' else ''}") from None


def no_tokens_error() -> ConfigError:
    """The refusal to serve HTTP without bearer tokens."""
    return ConfigError(
        "mcp.tokens: the HTTP transport refuses to start without a bearer token; set at least one (16+ "
        'characters) with [mcp] tokens = ["..."] in the config file or EXECUTOR_MCP__TOKENS=\'["..."]\''
    )


def owner_for_token(token: str) -> str:
    """The owner id a bearer token stands for: a prefix of its SHA-256, never the token itself."""
    return "mcp-" + hashlib.sha256(token.encode()).hexdigest()[:16]


class TokenVerifier:
    """Accepts exactly the configured bearer tokens; the comparison does not stop at the first match."""

    def __init__(self, tokens: Sequence[str]) -> None:
        self._digests = [hashlib.sha256(token.encode()).digest() for token in tokens]

    async def verify_token(self, token: str) -> AccessToken | None:
        presented = hashlib.sha256(token.encode()).digest()
        matched = False
        for digest in self._digests:
            # Hashing first gives equal-length inputs; compare_digest is constant-time over them.
            matched |= hmac.compare_digest(presented, digest)
        if not matched:
            return None
        return AccessToken(token=token, client_id=owner_for_token(token), scopes=[])
