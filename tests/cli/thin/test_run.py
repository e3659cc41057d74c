"""The thin CLI: which command lines it takes, how it falls back or fails when no service answers, and (against a
real service on the real engine) that it loads none of the executor's heavy dependencies."""

from __future__ import annotations

import json
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from executor.cli.thin.run import EXEC_FRAMES, Delegate, Usage, parse
from executor.service.wire import EXEC_FRAMES as WIRE_EXEC_FRAMES
from executor.testing.cli import cli, cli_env, named_session, serving

HEAVY = ("pydantic", "docker", "trio", "typer", "httpx", "httpx2", "anyio")


def test_the_framed_media_type_is_the_services() -> None:
    """The thin client asks for exactly the media type the service answers with."""
    assert EXEC_FRAMES == WIRE_EXEC_FRAMES


def test_parse_takes_session_commands_and_leaves_the_rest_in_process() -> None:
    """Session commands are parsed here (options anywhere, --json hoisted, -- ends options); operator commands,
    --help, --debug and in-process-only options are delegated."""
    parsed = parse(["--json", "exec", "--session", "ci", "--env", "A=1", "--env=B=2", "--view", "--", "ls", "--json"])
    assert (parsed.command, parsed.json, parsed.options, parsed.repeated) == (
        ("exec",),
        True,
        {"--session": "ci"},
        {"--env": ["A=1", "B=2"]},
    )
    assert parsed.flags == {"--view"} and parsed.words == ["ls", "--json"]
    assert parse(["exec", "echo", "hi"]).words == ["echo", "hi"]
    assert parse(["--config", "x.toml", "output", "read", "s-0123456789ab.a1"]).config == "x.toml"
    assert parse(["bg", "read", "t1", "--session", "ci", "--json"]).positionals == ["t1"]
    for argv in (
        ["serve"],
        ["session", "gc"],
        ["image", "ls"],
        ["exec", "--help"],
        ["--debug", "exec", "--", "true"],
        ["session", "ls", "--all"],
        [],
    ):
        with pytest.raises(Delegate):
            parse(argv)
    for argv, message in (
        (["exec", "--bogus", "--", "true"], "no such option: --bogus"),
        (["exec", "--session"], "option --session requires an argument"),
        (["write"], "missing argument"),
        (["session", "ls", "extra"], "unexpected argument 'extra'"),
    ):
        with pytest.raises(Usage, match=re.escape(message)):
            parse(argv)


@pytest.mark.parametrize("value", ["ci", "a.b-c_d", "s-0123456789ab", "x" * 63, "x" * 64, "-x", "x/../etc", "", "ü"])
def test_session_names_are_checked_as_the_executor_checks_them(value: str) -> None:
    """The thin path accepts exactly the ids and names executor.ids accepts."""
    from executor.cli.thin.run import _check_name
    from executor.errors import SessionRejected
    from executor.ids import is_session_id, validate_session_name

    try:
        expected = is_session_id(value) or bool(validate_session_name(value))
    except SessionRejected:
        expected = False
    try:
        _check_name(value)
        accepted = True
    except Usage:
        accepted = False
    assert accepted == expected


@pytest.fixture
def stale_home() -> Iterator[Path]:
    """A home whose service.sock is a leftover nobody listens on (connections are refused)."""
    home = Path(tempfile.mkdtemp(prefix="exs-", dir="/tmp"))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(home / "service.sock"))
    sock.close()
    yield home
    shutil.rmtree(home, ignore_errors=True)


def test_a_stale_default_socket_falls_back_to_in_process(stale_home: Path) -> None:
    """A refused default socket means "no service": the command runs in-process (here: reads the home's store)."""
    ran = cli(stale_home, "output", "read", "s-0123456789ab.a7")
    assert ran.code == 2 and "no artifact 's-0123456789ab.a7'" in ran.stderr


def test_usage_errors_are_one_json_object_under_json(stale_home: Path) -> None:
    """With EXECUTOR_URL the thin parser has the last word: a usage error is exit 2 with one JSON object on stdout
    (one line on stderr without --json), before any connection. Without it the in-process command reports it."""
    url = {"EXECUTOR_URL": f"unix://{stale_home / 'service.sock'}"}
    ran = cli(stale_home, "exec", "--json", "--bogus", "--", "true", env=url)
    assert ran.code == 2 and ran.stderr == ""
    assert ran.json() == {
        "outcome": "error",
        "error": "no such option: --bogus (see `executor exec --help`)",
        "exit_code": 2,
    }
    text = cli(stale_home, "exec", "--bogus", "--", "true", env=url)
    assert (text.code, text.stdout, text.stderr) == (
        2,
        "",
        "error: no such option: --bogus (see `executor exec --help`)\n",
    )
    in_process = cli(stale_home, "exec", "--json", "--bogus", "--", "true")
    assert in_process.code == 2 and "No such option: --bogus" in in_process.json()["error"]


@pytest.mark.parametrize("url", ["http://127.0.0.1:1", "unix:///nonexistent/executor.sock"])
def test_an_executor_url_that_does_not_answer_is_exit_125(stale_home: Path, url: str) -> None:
    """EXECUTOR_URL names a service that must answer: nothing there is an executor failure naming it, never a
    silent in-process run."""
    ran = cli(stale_home, "exec", "--", "true", env={"EXECUTOR_URL": url})
    assert ran.code == 125 and ran.stdout == ""
    assert ran.stderr.startswith(f"error: no executor service answers at EXECUTOR_URL={url} (")
    as_json = cli(stale_home, "--json", "session", "ls", env={"EXECUTOR_URL": url})
    assert as_json.code == 125 and f"EXECUTOR_URL={url}" in as_json.json()["error"]


def _garbled_service(path: Path, answers: dict[bytes, bytes]) -> threading.Thread:
    """A unix socket that answers each request whose line starts with a key with that canned response (keep-alive,
    one connection at a time); it runs until the socket file is removed."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(4)
    listener.settimeout(0.2)

    def serve() -> None:
        with listener:
            while path.exists():
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    continue
                with conn:
                    conn.settimeout(10)
                    data = b""
                    while True:  # keep-alive: requests until the client closes (bodies are small: one recv)
                        while b"\r\n\r\n" not in data:
                            got = conn.recv(65536)
                            if not got:
                                break
                            data += got
                        if not data:
                            break
                        answer = next((a for key, a in answers.items() if data.startswith(key)), b"")
                        conn.sendall(answer or b"HTTP/1.1 500 Oops\r\ncontent-length: 0\r\n\r\n")
                        data = b""

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_an_answer_the_cli_cannot_read_is_one_line_and_exit_125(stale_home: Path) -> None:
    """A service that answers something this client cannot read (not JSON, an event frame that is not JSON, a
    result whose bytes are not base64) makes the thin CLI fail in one line, exit 125, never a traceback."""
    path = stale_home / "garbled.sock"
    result = json.dumps({"kind": "result", "result": {"outcome": "completed", "exit_code": 0, "stdout": "Pz8"}})

    def frames(payload: bytes) -> bytes:
        frame = struct.pack(">B3xI", 3, len(payload)) + payload
        head = f"HTTP/1.1 200 OK\r\ncontent-type: {EXEC_FRAMES}\r\ncontent-length: {len(frame)}\r\n\r\n"
        return head.encode() + frame

    answers = {
        b"GET /v1/sessions ": b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 5\r\n\r\n{oops",
        b"POST /v1/sessions/bad/exec ": frames(b"{not json"),
        b"POST /v1/sessions/b64/exec ": frames(result.encode()),
        b"GET /v1/sessions/b64 ": b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
    }
    thread = _garbled_service(path, answers)
    env = {"EXECUTOR_URL": f"unix://{path}"}
    try:
        for words in (
            ("session", "ls"),
            ("exec", "--session", "bad", "--", "true"),
            ("--json", "exec", "--session", "b64", "--", "true"),
        ):
            ran = cli(stale_home, *words, env=env)
            said = ran.json()["error"] if "--json" in words else ran.stderr
            assert ran.code == 125 and "Traceback" not in ran.stdout + ran.stderr, (words, ran.stderr)
            assert ("not base64" if "--json" in words else f"unix://{path}") in said, (words, said)
            if "--json" not in words:
                assert ran.stderr.count("\n") == 1 and ran.stderr.startswith("error: "), ran.stderr
    finally:
        path.unlink()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def service_home(base_image: str) -> Iterator[Path]:
    """One running service in a private home for this module's engine tests."""
    home = Path(tempfile.mkdtemp(prefix="exs-", dir="/tmp"))
    try:
        with serving(home):
            yield home
    finally:
        cli(home, "session", "gc")
        shutil.rmtree(home, ignore_errors=True)


def _imported(importtime_stderr: str) -> set[str]:
    names = set()
    for line in importtime_stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names


@pytest.mark.docker
@pytest.mark.timeout(240)
def test_exec_over_the_service_loads_none_of_the_heavy_modules(service_home: Path) -> None:
    """`executor exec` against a running service imports none of pydantic, docker, trio, typer, httpx, anyio."""
    with named_session(service_home) as name:
        assert cli(service_home, "session", "start", "--name", name).code == 0
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "executor.cli", "exec", "--session", name, "--", "echo hi"],
            capture_output=True,
            env=cli_env(service_home),
            timeout=120,
            check=False,
        )
        assert (done.returncode, done.stdout) == (0, b"hi\n"), done.stderr[-2000:]
        loaded = _imported(done.stderr.decode())
        assert "executor" in loaded and "socket" in loaded  # the measurement itself works
        assert loaded.isdisjoint(HEAVY), loaded & set(HEAVY)


@pytest.mark.docker
@pytest.mark.timeout(240)
def test_json_objects_over_the_service_have_the_in_process_shapes(service_home: Path) -> None:
    """The thin commands print the shapes executor.cli.shapes defines (the in-process tests check the same)."""
    with named_session(service_home) as name:
        started = cli(service_home, "--json", "session", "start", "--name", name).json()
        keys = set(started["session"])
        assert keys == {"id", "name", "image", "profile", "state", "created_at", "owner", "idle_limit_s", "idle_s"}
        ran = cli(service_home, "--json", "exec", "--session", name, "--", "echo out").json()
        assert set(ran["session"]) == keys and ran["session"]["idle_limit_s"] is not None
        listed = cli(service_home, "--json", "bg", "ls", "--session", name).json()
        assert (listed["outcome"], listed["exit_code"], listed["tasks"], set(listed["session"])) == (
            "completed",
            0,
            [],
            keys,
        )
        lines = json.dumps(ran)
        assert '"ok"' not in lines
