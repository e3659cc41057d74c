"""executor.client raises the executor's own exceptions, never pydantic's or httpx2's: bad arguments before
anything is sent, a private error class of the service by its public parent, and a stream used after its block."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pydantic import ValidationError

from executor.client import Client
from executor.errors import (
    ApprovalNotFound,
    ArtifactNotFound,
    CommandRejected,
    ConfigError,
    ContentRejected,
    ExecutorError,
    OutputRangeError,
    PathRejected,
    SessionRejected,
    TaskNotFound,
)
from tests.service.conftest import ServiceProcess

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

_BAD_CALLS: list[tuple[str, Callable[[Client, str], Any], type[ExecutorError]]] = [
    ("empty command", lambda c, s: c.exec(s, ""), CommandRejected),
    ("bad focus mode", lambda c, s: c.exec(s, "true", focus_mode="loud"), CommandRejected),  # type: ignore[arg-type]
    ("negative timeout", lambda c, s: c.exec(s, "true", timeout_ms=-1), CommandRejected),
    ("bad approvals", lambda c, s: c.exec(s, "true", approvals="maybe"), CommandRejected),  # type: ignore[arg-type]
    ("empty task", lambda c, s: c.start_task(s, ""), CommandRejected),
    ("bad mode", lambda c, s: c.write(s, "f", "x", mode="999x"), ContentRejected),
    ("bad name", lambda c, s: c.create_session(name="-bad name"), SessionRejected),
    ("zero idle", lambda c, s: c.create_session(idle_s=0), ConfigError),
    ("text idle", lambda c, s: c.create_session(idle_s="30"), ConfigError),  # type: ignore[arg-type]
    ("text approve", lambda c, s: c.answer("ap-0000000000000000", approve="yes"), ExecutorError),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("what", "call", "error"), _BAD_CALLS, ids=[case[0] for case in _BAD_CALLS])
def test_bad_arguments_are_the_executors_errors(
    spooling_service: ServiceProcess, what: str, call: Callable[[Client, str], Any], error: type[ExecutorError]
) -> None:
    with spooling_service.client() as client:
        session = client.create_session().id
        try:
            with pytest.raises(ExecutorError) as raised:
                call(client, session)
            assert isinstance(raised.value, error), (what, raised.value)
            assert not isinstance(raised.value.__cause__, ValidationError) or raised.value.__suppress_context__
        finally:
            client.stop_session(session)


def test_ids_are_one_path_segment_and_errors_keep_their_public_type(spooling_service: ServiceProcess) -> None:
    """An id holding ``?``, ``#`` or ``%`` stays in its segment (the service answers for that id, not for a query);
    a read past a line's end raises OutputRangeError (the service's private subclass is sent by its public name)."""
    with spooling_service.client() as client:
        session = client.create_session().id
        try:
            ran = client.exec(session, "echo short")
            assert ran.artifact_id is not None
            for odd in ("x?stream=stdout", "x#y", "x%2Fy"):
                with pytest.raises(ArtifactNotFound):
                    client.read_output(session, odd)
                with pytest.raises(TaskNotFound):
                    client.read_task(session, odd)
            with pytest.raises(PathRejected):
                client.write(session, "", "x")
            with pytest.raises(ApprovalNotFound):
                client.answer("ap-0?x", approve=True)
            with pytest.raises(OutputRangeError, match="past the end of line 1"):
                client.read_output(session, ran.artifact_id, stream="stdout", start_byte_in_line=100)
        finally:
            client.stop_session(session)


def test_a_stream_used_after_its_block_is_an_executor_error(spooling_service: ServiceProcess) -> None:
    with spooling_service.client() as client:
        session = client.create_session().id
        try:
            with client.stream_exec(session, "echo hi") as events:
                pass
            with pytest.raises(ExecutorError, match="inside its `with` block"):
                list(events)
        finally:
            client.stop_session(session)


def test_a_download_refused_in_the_session_is_a_readable_error(spooling_service: ServiceProcess, tmp_path: Any) -> None:
    """A download of a missing path (tar fails in the session: the service answers 409 with the command's result)
    raises the executor's error with tar's own words, not the raw body."""
    with spooling_service.client() as client:
        session = client.create_session().id
        try:
            with pytest.raises(ExecutorError) as raised:
                client.download(session, "nonexist", tmp_path / "dest")
            message = str(raised.value)
            assert message.startswith("the copy failed in the session: tar: nonexist"), message
            assert "b'" not in message and "artifact s-" in message
            with pytest.raises(ExecutorError, match=r"^the copy failed in the session: tar: .*Permission denied"):
                client.download_tar(session, "/proc/1/environ")
        finally:
            client.stop_session(session)


def test_task_pages_carry_their_exact_bytes_and_bad_ranges_are_output_range_errors(
    spooling_service: ServiceProcess,
) -> None:
    """A task read (and each followed page) carries the page's exact bytes next to the view, so a program never
    parses the sanitized text; a read's out-of-range argument is OutputRangeError (a ValueError), as in-process (it
    was a bare ExecutorError from the service's 422)."""
    with spooling_service.client() as client:
        session = client.create_session().id
        try:
            client.write(session, "bytes.bin", b"a\xffb\n")
            started = client.start_task(session, "cat bytes.bin; sleep 1; echo c", approvals="none")
            task_id = str((started.data or {})["task_id"])
            with client.follow_task(session, task_id) as pages:
                followed = b"".join(page.stdout for page in pages)
            assert followed == b"a\xffb\nc\n"
            page = client.read_task(session, task_id, offset=1)
            assert page.stdout == b"\xffb\nc\n" and "\\xff" in page.text, page.text
            ran = client.exec(session, "seq 3")
            artifact_id = str(ran.artifact_id)
            with pytest.raises(OutputRangeError):
                client.read_output(session, artifact_id, start_line=0)
            with pytest.raises(OutputRangeError):
                client.read_output(session, artifact_id, line_count=0)
            with pytest.raises(OutputRangeError):
                client.search_output(session, artifact_id, pattern="1", limit=0)
            with pytest.raises(OutputRangeError):
                client.read_task(session, task_id, offset=-1)
        finally:
            client.stop_session(session)
