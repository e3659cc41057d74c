"""The service's pure parts and its settings: live-stream bounds, raw-stream bounds, metrics text, the OpenAPI
document, the client's import footprint and error mapping, and the ``service`` settings section."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest
import trio
from openapi_spec_validator import validate

from executor.artifacts import tee_captures
from executor.artifacts.store import ArtifactStore
from executor.client import Client, _exception
from executor.config import ServiceSettings, load_settings
from executor.errors import ConfigError, ExecutorError, ServiceUnavailable, SessionNotFound
from executor.models import ToolResult
from executor.service.core import LiveStream, Metrics, RawStreams, owns
from executor.service.openapi import openapi_document
from executor.service.wire import ChunkEvent, DroppedEvent, ErrorEvent, ErrorInfo, ResultEvent
from executor.session.pool import PoolStats


async def test_live_stream_drops_past_its_bounds_and_says_how_much() -> None:
    """Without a spool, a client that does not read loses chunks past service.stream_buffer_bytes; a dropped event
    counts them, and so does the result."""
    live = LiveStream(limit=8)
    live.chunk("stdout", b"12345")
    live.chunk("stdout", b"67890")  # over the bound: dropped
    live.chunk("stderr", b"e")  # each stream has its own bound
    live.chunk("stdout", b"abc")
    live.close(ResultEvent(result=ToolResult(tool="bash", outcome="completed", text="")))
    events = [event async for event in live.events()]
    assert events[0] == ChunkEvent(stream="stdout", data=b"12345")
    assert events[1] == ChunkEvent(stream="stderr", data=b"e")
    assert events[2] == DroppedEvent(stream="stdout", bytes=5)
    assert events[3] == ChunkEvent(stream="stdout", data=b"abc")
    assert isinstance(events[-1], ResultEvent)
    assert (events[-1].result.stdout_dropped, events[-1].result.stderr_dropped) == (5, 0)


def _entries(folder: Path) -> list[Path]:
    return list(folder.iterdir())


async def test_live_stream_spools_what_a_slow_reader_has_not_taken(tmp_path: Path) -> None:
    """Past the memory bound, chunks wait in an unlinked file: a reader that comes late gets every byte in order,
    the file starts again empty once it caught up, and nothing is left under the directory."""
    live = LiveStream(limit=8, spool=1024, directory=tmp_path)
    sent = [("stdout", b"0123456"), ("stdout", b"789ab"), ("stderr", b"E1"), ("stdout", b"cdef"), ("stderr", b"E2")]
    for stream, data in sent:
        live.chunk(stream, data)
    assert live.spilled_bytes == 9 and not _entries(tmp_path)  # 789ab and cdef, on an unlinked file
    got: list[tuple[str, bytes]] = []
    reader = live.items()
    for _ in range(4):
        item = await reader.__anext__()
        assert isinstance(item, tuple)
        got.append(item)
    assert isinstance(reader, AsyncGenerator)  # a generator: closing it is how a reader leaves
    await reader.aclose()
    assert live._file_w == 0  # caught up: the file was emptied
    live.chunk("stdout", b"more")
    live.close(ResultEvent(result=ToolResult(tool="bash", outcome="completed", text="")))
    rest = [item async for item in live.items()]
    assert isinstance(rest[-1], ResultEvent) and rest[-1].result.stdout_dropped == 0
    got += [item for item in rest if isinstance(item, tuple)]
    for name in ("stdout", "stderr"):
        assert b"".join(d for s, d in got if s == name) == b"".join(d for s, d in sent if s == name) + (
            b"more" if name == "stdout" else b""
        )
    assert not any(isinstance(item, DroppedEvent) for item in rest)
    live.detach()
    assert live._file is None


async def test_live_stream_drops_past_its_spool_and_the_result_says_so(tmp_path: Path) -> None:
    """A reader further behind than service.stream_spool_bytes loses chunks, counted by a dropped event and by the
    result's stdout_dropped; what was kept still comes out whole and in order."""
    live = LiveStream(limit=4, spool=6, directory=tmp_path)
    for data in (b"aaaa", b"bbbb", b"cc", b"dddd", b"e"):
        live.chunk("stdout", data)  # aaaa in memory, bbbb+cc spooled, dddd dropped, e too (memory still full)
    live.close(ResultEvent(result=ToolResult(tool="bash", outcome="completed", text="")))
    events = [event async for event in live.events()]
    data = b"".join(e.data for e in events if isinstance(e, ChunkEvent))
    dropped = [e.bytes for e in events if isinstance(e, DroppedEvent)]
    assert (data, dropped) == (b"aaaabbbbcc", [5])
    assert isinstance(events[-1], ResultEvent) and events[-1].result.stdout_dropped == 5


async def test_live_stream_delivers_as_it_arrives_and_a_detached_one_keeps_nothing() -> None:
    """A waiting reader wakes for each chunk; after detach nothing is queued."""
    live = LiveStream(limit=1024)
    got: list[bytes] = []

    async def read() -> None:
        async for event in live.events():
            if isinstance(event, ChunkEvent):
                got.append(event.data)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        await trio.testing.wait_all_tasks_blocked()
        live.chunk("stdout", b"one")
        await trio.testing.wait_all_tasks_blocked()
        assert got == [b"one"]
        live.close(ErrorEvent(error=ErrorInfo(type="ExecutorError", message="end")))
    other = LiveStream(limit=1024)
    other.detach()
    other.chunk("stdout", b"x")
    assert other.detached and not other._events


def test_raw_streams_keep_the_head_and_say_whether_whole() -> None:
    """service.result_stream_max_bytes bounds the raw streams from their first byte."""
    raw = RawStreams(limit=4)
    raw.add("stdout", b"ab")
    raw.add("stdout", b"cdef")
    raw.add("stderr", b"x")
    raw.add("other", b"ignored")
    assert raw.get("stdout") == (b"abcd", False)
    assert raw.get("stderr") == (b"x", True)


def test_metrics_text_counts_outcomes_and_buckets() -> None:
    """Commands by outcome and a cumulative latency histogram, in the Prometheus text format."""
    metrics = Metrics()
    metrics.command("completed", 0.02)
    metrics.command("failed", 3.0)
    pool = PoolStats(
        profile="default",
        size=2,
        ready=1,
        creating=1,
        waiting=0,
        max_creating_seen=1,
        created=2,
        claimed=1,
        retired=0,
        failures=0,
    )
    text = metrics.render(sessions=2, running=1, approvals=0, draining=False, pools=[pool])
    assert 'executor_commands_total{outcome="completed"} 1' in text
    assert 'executor_command_seconds_bucket{le="0.025"} 1' in text
    assert 'executor_command_seconds_bucket{le="+Inf"} 2' in text
    assert "executor_sessions 2" in text and 'executor_pool_warm_sessions{profile="default"} 1' in text
    assert 'executor_pool_creating_sessions{profile="default"} 1' in text


def test_owner_rules() -> None:
    """The unix socket's caller owns everything; a token owns only its own (an unowned session is not a token's)."""
    assert owns("mcp-a", None) and owns(None, None)
    assert owns("mcp-a", "mcp-a")
    assert not owns("mcp-a", "mcp-b") and not owns(None, "mcp-a")


def test_openapi_document_is_valid() -> None:
    """The generated document passes the OpenAPI 3.1 validator and names every route."""
    document = openapi_document("0")
    validate(document)
    assert {"/v1/sessions", "/v1/approvals", "/v1/metrics", "/v1/sessions/{session}/files"} <= set(document["paths"])


def test_openapi_document_lists_the_statuses_the_service_answers() -> None:
    """Every route may answer 401 over TCP without a token (health and metrics too), every route with a body 413
    past service.max_request_bytes, and creating a session 409 for a taken name: the document says so (a client
    generated from it treated them as undocumented)."""
    document = openapi_document("0")
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            responses = operation["responses"]
            assert "401" in responses, (method, path)
            if "requestBody" in operation:
                assert "413" in responses, (method, path)
    assert "409" in document["paths"]["/v1/sessions"]["post"]["responses"]


def test_every_bytes_field_is_standard_base64_in_json() -> None:
    """Bytes on the wire (and in the artifact and session models) are RFC 4648 section 4 base64, what ``base64 -d``
    and a curl user's decoder read, and the document says so; they are read back from either alphabet."""
    import base64

    from pydantic import BaseModel

    from executor.artifacts.models import ReadPage
    from executor.service import wire
    from executor.session.api import ArtifactBytes, FileContent

    data = b">>>???\xfb\xff\xbf"
    standard = base64.b64encode(data).decode()
    assert "+" in standard and "/" in standard
    models = [m for m in vars(wire).values() if isinstance(m, type) and issubclass(m, BaseModel) and m is not BaseModel]
    models += [ReadPage, ArtifactBytes, FileContent]
    seen: set[tuple[str, str]] = set()
    for model in models:
        schema = model.model_json_schema(mode="serialization")
        for name, field in model.model_fields.items():
            if "bytes" not in str(field.annotation):
                continue
            seen.add((model.__name__, name))
            prop = schema["properties"][name]
            formats = [option.get("format") for option in prop.get("anyOf", [prop]) if option.get("type") == "string"]
            assert formats == ["byte"], (model.__name__, name)
            values: dict[str, Any] = {name: data}
            holding = model.model_construct(**values)
            assert holding.model_dump(mode="json", include={name}) == {name: standard}
            dumped = holding.model_dump_json(include={name})
            assert dumped == f'{{"{name}":"{standard}"}}', (model.__name__, name)
    assert {
        ("ToolResult", "stdout"),
        ("ToolResult", "stderr"),
        ("ChunkEvent", "data"),
        ("ExecRequest", "stdin"),
    } <= seen
    assert {
        ("WriteRequest", "content"),
        ("ArtifactBytes", "data"),
        ("FileContent", "data"),
        ("ReadPage", "data"),
    } <= seen
    for text in (standard, base64.urlsafe_b64encode(data).decode()):
        page = wire.PageEvent.model_validate_json(
            f'{{"result": {{"tool": "task_read", "outcome": "completed", "text": "", "stdout": "{text}"}}}}'
        )
        assert page.result.stdout == data


def test_a_task_offset_past_the_agent_protocol_is_refused_as_input() -> None:
    """An offset the agent protocol cannot carry (a signed 64-bit field) is a 422 at the request, not a 500 later."""
    from pydantic import ValidationError

    from executor.service.wire import TaskReadQuery

    assert TaskReadQuery(offset=2**63 - 1).offset == 2**63 - 1
    with pytest.raises(ValidationError, match="less than or equal"):
        TaskReadQuery(offset=2**63)


def test_tee_sees_every_chunk_and_the_artifact_id(tmp_path: object) -> None:
    """A tee registered for a kind sees the chunks of that kind's captures after they are stored, and its id."""
    from pathlib import Path

    settings = load_settings(overrides={"home": str(tmp_path)})
    store = ArtifactStore.open(Path(str(tmp_path)), settings.artifacts)
    try:
        session = store.session("s-0123456789ab")
        seen: list[tuple[str, bytes]] = []
        ids: list[str] = []
        with tee_captures(lambda s, d: seen.append((s, d)), kind="bash", on_begin=ids.append):
            capture = session.begin(kind="bash", streams=("stdout", "stderr"))
            other = session.begin(kind="task", streams=("stdout",))
            capture.feed("stdout", b"hi")
            other.feed("stdout", b"not teed")
        capture.finish(status="ok")
        other.finish(status="ok")
        assert seen == [("stdout", b"hi")] and ids == [capture.artifact_id]
    finally:
        store.close()


def test_client_imports_neither_trio_nor_docker() -> None:
    """Importing executor.client loads no trio, docker or engine-side module."""
    code = (
        "import sys, executor.client; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('trio', 'docker') "
        "or m.startswith(('executor.session', 'executor.sandbox', 'executor.mcp'))]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_client_maps_errors_to_the_executors_tree() -> None:
    """A named error becomes that class; an unknown name the root; a closed socket ServiceUnavailable."""
    assert type(_exception("SessionNotFound", "x")) is SessionNotFound
    assert type(_exception("NoSuchThing", "x")) is ExecutorError
    assert type(_exception("Exception", "x")) is ExecutorError
    with (
        Client(socket="/nonexistent/service.sock") as client,
        pytest.raises(ServiceUnavailable, match="executor serve"),
    ):
        client.health()


def test_service_settings_defaults() -> None:
    """Defaults: socket under the home, no TCP, loopback, bounded bodies and streams, a grace period."""
    section = load_settings().service
    assert section.socket is None and section.tcp is False and section.host == "127.0.0.1"
    assert section.tokens == () and section.max_request_bytes == 64 * 1024**2
    assert section.stream_buffer_bytes == 4 * 1024**2 and section.result_stream_max_bytes == 1024**2
    assert section.stream_spool_bytes == 1024**3
    assert section.approval_timeout_s == 600.0
    assert section.shutdown_grace_s == 30.0
    assert section.max_json_depth == 64


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"tokens": ["short"]}, "at least 16 characters"),
        ({"port": 70000}, "port"),
        ({"max_request_bytes": 10}, "max_request_bytes"),
        ({"stream_spool_bytes": -1}, "stream_spool_bytes"),
        ({"stream_spool_bytes": 65 * 1024**3}, "stream_spool_bytes"),
        ({"approval_timeout_s": 0}, "approval_timeout_s"),
        ({"shutdown_grace_s": 100000}, "shutdown_grace_s"),
        ({"max_json_depth": 1}, "max_json_depth"),
        ({"max_json_depth": 501}, "max_json_depth"),
        ({"unknown": 1}, "unknown"),
    ],
)
def test_service_settings_rejected_at_load(overrides: dict[str, object], needle: str) -> None:
    """Bad service settings fail at load, naming the field."""
    with pytest.raises(ConfigError, match=needle):
        load_settings(overrides={"service": overrides})


def test_service_settings_accept_sizes() -> None:
    """Sizes take units."""
    section = ServiceSettings(max_request_bytes="1m", stream_spool_bytes="2g")
    assert section.max_request_bytes == 1024**2 and section.stream_spool_bytes == 2 * 1024**3
    assert ServiceSettings(stream_spool_bytes=0).stream_spool_bytes == 0  # no spool: the old drop-past-memory


async def test_live_stream_merges_chunks_a_slow_reader_has_not_taken() -> None:
    """Chunks of one stream queued behind a reader come out as one event, in order, with nothing lost."""
    live = LiveStream(limit=1024)
    for part in (b"a", b"b", b"c"):
        live.chunk("stdout", part)
    live.chunk("stderr", b"x")
    live.chunk("stdout", b"d")
    live.close(ErrorEvent(error=ErrorInfo(type="ExecutorError", message="end")))
    chunks = [(e.stream, e.data) async for e in live.events() if isinstance(e, ChunkEvent)]
    assert chunks == [("stdout", b"abc"), ("stderr", b"x"), ("stdout", b"d")]


def test_the_hand_written_chunk_line_is_a_chunk_event() -> None:
    """The exec stream's fast path writes chunk lines without the model: each is exactly ChunkEvent's JSON."""
    from executor.service.app import _chunk_line
    from executor.service.wire import ChunkEvent

    for stream in ("stdout", "stderr"):
        for data in (b"", b">>>???\xfb\xff\xbf", bytes(range(256))):
            line = _chunk_line(stream, data)
            assert line.endswith(b"\n") and line.count(b"\n") == 1
            event = ChunkEvent.model_validate_json(line)
            assert (event.stream, event.data) == (stream, data)
            assert line == ChunkEvent(stream=stream, data=data).model_dump_json().encode() + b"\n"


@pytest.mark.parametrize(
    ("model", "body"),
    [
        ("ExecRequest", '{"command": "true", "timeout_ms": true}'),
        ("ExecRequest", '{"command": "true", "timeout_ms": "500"}'),
        ("ExecRequest", '{"command": "true", "result_streams": 1}'),
        ("WriteRequest", '{"path": "f", "content": "aGk=", "parents": "yes"}'),
    ],
)
def test_request_bodies_take_json_types_as_they_are(model: str, body: str) -> None:
    """A JSON body's numbers and booleans are taken as such: `true` is no 1 ms deadline, nor "500" a number (both
    were coerced), as `approve` and `idle_s` already were."""
    from pydantic import ValidationError

    from executor.service import wire

    with pytest.raises(ValidationError):
        getattr(wire, model).model_validate_json(body)
    assert wire.ExecRequest.model_validate_json('{"command": "true", "timeout_ms": 500}').timeout_ms == 500


def test_every_surface_returns_the_in_process_result_class() -> None:
    """The client, the wire events and the OpenAPI document use the in-process ToolResult itself (no copy to drift):
    raw streams are bytes, base64 in JSON."""
    import executor.client
    import executor.session
    from executor.service.wire import PageEvent

    assert executor.client.ToolResult is ToolResult is executor.session.ToolResult
    assert ResultEvent.model_fields["result"].annotation in (ToolResult, "ToolResult")
    assert PageEvent.model_fields["result"].annotation in (ToolResult, "ToolResult")
    schema = openapi_document("test")["components"]["schemas"]["ToolResult"]["properties"]
    assert schema["stdout"]["contentEncoding"] == "base64" and "stdout_whole" in schema
    result = ToolResult(tool="bash", outcome="completed", text="", stdout=b"\xff\n")
    assert result.model_dump(mode="json")["stdout"] == "/wo="
    assert ToolResult.model_validate_json(result.model_dump_json()) == result
