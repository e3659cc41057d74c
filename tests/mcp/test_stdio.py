"""The guarded stdio transport: what a line that is not a valid JSON-RPC message is answered with."""

from __future__ import annotations

import json

import pytest

from executor.mcp.stdio import reply_to_invalid


def _reply(line: str) -> dict[str, object]:
    reply = reply_to_invalid(line)
    assert reply
    data = json.loads(reply)
    assert isinstance(data, dict)
    return data


def test_valid_messages_pass_through() -> None:
    """A valid request, notification or response is not answered here (None: pass it on)."""
    assert reply_to_invalid('{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}\n') is None
    assert reply_to_invalid('{"jsonrpc": "2.0", "method": "notifications/initialized"}') is None
    assert reply_to_invalid('{"jsonrpc": "2.0", "id": 1, "result": {}}') is None


@pytest.mark.parametrize(
    ("line", "ident", "code"),
    [
        ('{"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": "oops"}', 7, -32602),
        ('{"jsonrpc": "2.0", "id": "a", "method": "tools/call", "params": [1, 2]}', "a", -32602),
        ('{"jsonrpc": "2.0", "id": 8, "method": "x", "params": {"s": "\\udcff"}}', 8, -32602),
        ('{"jsonrpc": "2.0", "id": 9, "method": 3}', 9, -32600),
        ('{"jsonrpc": "1.0", "id": 10, "method": "ping"}', 10, -32600),
        ('{"jsonrpc": "2.0", "id": 11}', 11, -32600),
        ('{"jsonrpc": "2.0", "id": true, "method": 3}', None, -32600),
        ("[1, 2]", None, -32600),
        ("not json {", None, -32700),
    ],
)
def test_invalid_requests_get_an_error_with_their_id(line: str, ident: object, code: int) -> None:
    """Every invalid line that could be a request gets one JSON-RPC error carrying the request's id."""
    reply = _reply(line)
    assert reply["jsonrpc"] == "2.0" and reply["id"] == ident
    error = reply["error"]
    assert isinstance(error, dict) and error["code"] == code and error["message"]


def test_invalid_notifications_responses_and_blank_lines_are_dropped() -> None:
    """Nobody waits for a reply to a notification or a response, so an invalid one is dropped silently."""
    assert reply_to_invalid('{"jsonrpc": "2.0", "method": "notifications/x", "params": "s"}') == ""
    assert reply_to_invalid('{"jsonrpc": "2.0", "id": 1, "result": 3, "error": 4}') == ""
    assert reply_to_invalid("   \n") == ""


def test_nesting_past_max_json_depth_is_a_parse_error_before_any_parser() -> None:
    """service.max_json_depth bounds a line: at the limit a valid request passes; one level more (or 200,000) is a
    -32700 naming the setting, whatever the line's shape."""
    at_limit = '{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"a": [[1]]}}'
    assert reply_to_invalid(at_limit, max_depth=4) is None
    refused = reply_to_invalid(at_limit, max_depth=3)
    assert refused is not None and json.loads(refused) == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": -32700,
            "message": "Parse error: JSON nested 4 levels deep; at most 3 (service.max_json_depth) are accepted",
        },
    }
    assert _reply("[" * 200_000)["error"] == {
        "code": -32700,
        "message": "Parse error: JSON nested 200000 levels deep; at most 64 (service.max_json_depth) are accepted",
    }
