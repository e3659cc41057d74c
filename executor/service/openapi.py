"""The OpenAPI 3.1 document of the ``/v1`` API, generated from the wire models (pure: no trio, no docker)."""

from __future__ import annotations

from functools import cache
from typing import Any, Final

from pydantic import BaseModel, TypeAdapter
from pydantic.json_schema import models_json_schema

from executor.models import ToolResult
from executor.service.wire import (
    EXEC_FRAMES,
    ApprovalAnswer,
    ApprovalView,
    ErrorResponse,
    ExecEvent,
    ExecRequest,
    FilesQuery,
    Health,
    ReadQuery,
    SearchQuery,
    SessionCreate,
    SessionView,
    TaskEvent,
    TaskReadQuery,
    TaskStart,
    TaskView,
    WriteRequest,
)

__all__ = ["list_of", "openapi_document"]

_REF: Final = "#/components/schemas/{model}"
_MODELS: Final[tuple[type[BaseModel], ...]] = (
    ApprovalAnswer,
    ApprovalView,
    ErrorResponse,
    ExecRequest,
    Health,
    SessionCreate,
    SessionView,
    TaskStart,
    TaskView,
    ToolResult,
    WriteRequest,
)


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": _REF.format(model=model.__name__)}


def _json_body(model: type[BaseModel]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": _ref(model)}}}


def _ok(description: str, schema: dict[str, Any], media: str = "application/json") -> dict[str, Any]:
    return {"description": description, "content": {media: {"schema": schema}}}


def _errors(*codes: int) -> dict[str, Any]:
    meaning = {
        400: "refused input (the executor's own check)",
        401: "missing or unknown bearer token (TCP)",
        404: "no such session, artifact, task or approval (or another token's)",
        409: "a conflict: the session name is taken, or the action did not complete (a download: the tar run's result)",
        413: "body or archive above its bound",
        422: "malformed request",
        502: "the engine or the sandbox failed",
        503: "draining after SIGTERM, or the action was cancelled by shutdown",
    }
    return {
        str(code): {"description": meaning[code], "content": {"application/json": {"schema": _ref(ErrorResponse)}}}
        for code in (*codes, 401, 422, 503)
    }


def _unauthorized() -> dict[str, Any]:
    """The one error a route without input can answer: 401 over TCP without a valid token."""
    return {k: v for k, v in _errors().items() if k == "401"}


def _params(model: type[BaseModel] | None, *path: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}} for name in path
    ]
    if model is None:
        return out
    schema = model.model_json_schema()
    required = set(schema.get("required", ()))
    for name, prop in schema.get("properties", {}).items():
        entry = {k: v for k, v in prop.items() if k not in ("title", "description")}
        out.append(
            {
                "name": name,
                "in": "query",
                "required": name in required,
                "description": prop.get("description", ""),
                "schema": entry,
            }
        )
    return out


def list_of(model: type[BaseModel]) -> dict[str, Any]:
    """An array of ``model``."""
    return {"type": "array", "items": _ref(model)}


def _ndjson(adapter: TypeAdapter[Any]) -> dict[str, Any]:
    return adapter.json_schema(ref_template=_REF)


@cache
def openapi_document(version: str) -> dict[str, Any]:
    """The OpenAPI 3.1 document served at ``/v1/openapi.json``."""
    _, components = models_json_schema([(m, "serialization") for m in _MODELS], ref_template=_REF)
    schemas: dict[str, Any] = dict(components.get("$defs", {}))
    exec_event = _ndjson(TypeAdapter(ExecEvent))
    task_event = _ndjson(TypeAdapter(TaskEvent))
    for extra in (exec_event, task_event):
        schemas.update(extra.pop("$defs", {}))
    session_path = ["session"]
    s = "/v1/sessions/{session}"
    paths: dict[str, Any] = {
        "/v1/health": {
            "get": {
                "operationId": "health",
                "responses": {"200": _ok("the service's state", _ref(Health)), **_unauthorized()},
            }
        },
        "/v1/metrics": {
            "get": {
                "operationId": "metrics",
                "responses": {
                    "200": _ok("Prometheus text exposition", {"type": "string"}, "text/plain"),
                    **_unauthorized(),
                },
            }
        },
        "/v1/openapi.json": {
            "get": {
                "operationId": "openapi",
                "responses": {"200": _ok("this document", {"type": "object"}), **_unauthorized()},
            }
        },
        "/v1/sessions": {
            "get": {
                "operationId": "listSessions",
                "responses": {"200": _ok("your sessions", list_of(SessionView)), **_errors(502)},
            },
            "post": {
                "operationId": "createSession",
                "requestBody": _json_body(SessionCreate),
                "responses": {"201": _ok("the new session", _ref(SessionView)), **_errors(400, 409, 413, 502)},
            },
        },
        s: {
            "get": {
                "operationId": "inspectSession",
                "parameters": _params(None, *session_path),
                "responses": {"200": _ok("the session", _ref(SessionView)), **_errors(404, 502)},
            },
            "delete": {
                "operationId": "stopSession",
                "parameters": _params(None, *session_path),
                "responses": {"204": {"description": "stopped and removed"}, **_errors(404, 502)},
            },
        },
        s + "/exec": {
            "post": {
                "operationId": "exec",
                "parameters": _params(None, *session_path),
                "requestBody": _json_body(ExecRequest),
                "responses": {
                    "200": {
                        "description": (
                            "ndjson: one ExecEvent per line, ending with a result or an error. With "
                            f"`Accept: {EXEC_FRAMES}` the same events as binary frames: 1 byte kind, 3 zero bytes, "
                            "the payload's length (4 bytes, big-endian), the payload; kind 1 raw stdout bytes, kind 2 "
                            "raw stderr bytes, kind 3 one JSON ExecEvent (dropped, approval, result or error; never "
                            "chunk), the last one a result or an error"
                        ),
                        "content": {
                            "application/x-ndjson": {"schema": exec_event},
                            EXEC_FRAMES: {"schema": {"type": "string", "format": "binary"}},
                        },
                    },
                    **_errors(400, 404, 413, 502),
                },
            }
        },
        s + "/write": {
            "post": {
                "operationId": "write",
                "parameters": _params(None, *session_path),
                "requestBody": _json_body(WriteRequest),
                "responses": {"200": _ok("the write's result", _ref(ToolResult)), **_errors(400, 404, 409, 413, 502)},
            }
        },
        s + "/files": {
            "put": {
                "operationId": "upload",
                "parameters": _params(FilesQuery, *session_path),
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/x-tar": {"schema": {"type": "string", "format": "binary"}},
                        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
                    },
                },
                "responses": {"200": _ok("the unpack's result", _ref(ToolResult)), **_errors(400, 404, 413, 502)},
            },
            "get": {
                "operationId": "download",
                "parameters": _params(FilesQuery, *session_path),
                "responses": {
                    "200": _ok("a tar stream", {"type": "string", "format": "binary"}, "application/x-tar"),
                    **_errors(400, 404, 409, 413, 502),
                },
            },
        },
        s + "/artifacts/{artifact}": {
            "get": {
                "operationId": "readOutput",
                "parameters": _params(ReadQuery, "session", "artifact"),
                "responses": {"200": _ok("one page", _ref(ToolResult)), **_errors(400, 404, 502)},
            }
        },
        s + "/artifacts/{artifact}/search": {
            "get": {
                "operationId": "searchOutput",
                "parameters": _params(SearchQuery, "session", "artifact"),
                "responses": {"200": _ok("matches", _ref(ToolResult)), **_errors(400, 404, 502)},
            }
        },
        s + "/tasks": {
            "get": {
                "operationId": "listTasks",
                "parameters": _params(None, *session_path),
                "responses": {"200": _ok("your tasks", list_of(TaskView)), **_errors(404, 502)},
            },
            "post": {
                "operationId": "startTask",
                "parameters": _params(None, *session_path),
                "requestBody": _json_body(TaskStart),
                "responses": {
                    "201": _ok("the task was started: the start's result (data.task_id names it)", _ref(ToolResult)),
                    "200": _ok(
                        "no task was made: the gate stopped it (outcome denied or blocked), as exec and write say",
                        _ref(ToolResult),
                    ),
                    **_errors(400, 404, 413, 502),
                },
            },
        },
        s + "/tasks/{task}": {
            "get": {
                "operationId": "readTask",
                "parameters": _params(TaskReadQuery, "session", "task"),
                "responses": {
                    "200": {
                        "description": "one page (JSON), or with follow=true ndjson TaskEvent lines until the end",
                        "content": {
                            "application/json": {"schema": _ref(ToolResult)},
                            "application/x-ndjson": {"schema": task_event},
                        },
                    },
                    **_errors(400, 404, 502),
                },
            },
            "delete": {
                "operationId": "stopTask",
                "parameters": _params(None, "session", "task"),
                "responses": {"200": _ok("how it ended", _ref(TaskView)), **_errors(404, 502)},
            },
        },
        "/v1/approvals": {
            "get": {
                "operationId": "listApprovals",
                "responses": {"200": _ok("asks waiting for an answer", list_of(ApprovalView)), **_unauthorized()},
            }
        },
        "/v1/approvals/{approval}": {
            "post": {
                "operationId": "answerApproval",
                "parameters": _params(None, "approval"),
                "requestBody": _json_body(ApprovalAnswer),
                "responses": {"204": {"description": "answered"}, **_errors(404, 413)},
            }
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "executor service",
            "version": version,
            "description": (
                "The executor's JSON API (executor serve). Unix socket: no token; TCP: a bearer token, which owns "
                "what it creates. Bytes are base64 strings. Every error is an ErrorResponse, but for one the server "
                "answers before the API sees the request: a request line and headers above 64 KiB get a 431 with "
                "an empty body. A 405 names the path's methods in Allow."
            ),
        },
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}, {}],
        "paths": paths,
    }
