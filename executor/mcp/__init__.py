"""The MCP surface: ``executor mcp --transport stdio|http`` serves the executor's tools to agents."""

from executor.mcp.server import (
    APPROVAL_SCHEMA,
    MAX_HEAD_BYTES,
    McpSurface,
    McpTransport,
    head_bytes,
    message_limit,
    no_tokens_error,
    open_surface,
    owner_for_token,
    refuse_long_head,
    serve_http,
    serve_http_app,
    serve_stdio,
)

__all__ = [
    "APPROVAL_SCHEMA",
    "MAX_HEAD_BYTES",
    "McpSurface",
    "McpTransport",
    "head_bytes",
    "message_limit",
    "no_tokens_error",
    "open_surface",
    "owner_for_token",
    "refuse_long_head",
    "serve_http",
    "serve_http_app",
    "serve_stdio",
]
