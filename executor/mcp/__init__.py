"""The MCP surface: ``executor mcp --transport stdio|http`` serves the executor's tools to agents."""

from executor.mcp.server import (
    APPROVAL_SCHEMA,
    McpSurface,
    McpTransport,
    no_tokens_error,
    open_surface,
    owner_for_token,
    serve_http,
    serve_http_app,
    serve_stdio,
)

__all__ = [
    "APPROVAL_SCHEMA",
    "McpSurface",
    "McpTransport",
    "no_tokens_error",
    "open_surface",
    "owner_for_token",
    "serve_http",
    "serve_http_app",
    "serve_stdio",
]
