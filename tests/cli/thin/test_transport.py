"""Where the thin CLI finds the service: the default home as platformdirs computes it, the settings' socket, the
URL forms; and the raw HTTP client against a real listener (pure: no engine)."""

from __future__ import annotations

import base64
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import platformdirs
import pytest

from executor.cli.thin.transport import (
    ServiceError,
    Unreachable,
    decode_bytes,
    default_home,
    find_service,
    open_connection,
    segment,
)


def test_decode_bytes_reads_both_alphabets_and_refuses_anything_else() -> None:
    """The service's base64 comes back exactly, in the standard alphabet or the URL-safe one (never with characters
    silently dropped); text that is not base64 is the service failing (exit 125), not wrong bytes."""
    data = bytes(range(256)) * 3
    assert decode_bytes(base64.b64encode(data).decode(), "x") == data
    assert decode_bytes(base64.urlsafe_b64encode(data).decode(), "x") == data
    assert decode_bytes(None, "x") == decode_bytes("", "x") == b""
    for bad in ("Pz8", "P z8/", "Pz8/!", "é"):
        with pytest.raises(ServiceError, match="not base64") as caught:
            decode_bytes(bad, "a page")
        assert caught.value.code == 125


@pytest.mark.parametrize(
    "environ",
    [
        {"HOME": "/home/someone"},
        {"HOME": "/home/someone/", "XDG_STATE_HOME": "/var/state"},
        {"HOME": "/home/someone", "XDG_STATE_HOME": "relative/state"},
        {"HOME": "relative-home"},
        {},
    ],
)
def test_default_home_is_platformdirs_user_state_dir(monkeypatch: pytest.MonkeyPatch, environ: dict[str, str]) -> None:
    """The thin path's default home is exactly the one executor.config gets from platformdirs."""
    for key in ("HOME", "XDG_STATE_HOME"):
        monkeypatch.delenv(key, raising=False)
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    assert default_home(dict(os.environ)) == platformdirs.user_state_dir("executor")


def test_socket_follows_the_settings_precedence(tmp_path: Path) -> None:
    """EXECUTOR_SERVICE__SOCKET, then the file's service.socket, then EXECUTOR_HOME, then the file's home."""
    config = tmp_path / "s.toml"
    config.write_text('home = "/srv/exec"\n')
    assert find_service(str(config), {}).unix_path == "/srv/exec/service.sock"  # type: ignore[union-attr]
    env = {"EXECUTOR_HOME": "/h"}
    assert find_service(str(config), env).unix_path == "/h/service.sock"  # type: ignore[union-attr]
    config.write_text('home = "/srv/exec"\n[service]\nsocket = "/run/x.sock"\n')
    assert find_service(None, {"EXECUTOR_CONFIG": str(config)}).unix_path == "/run/x.sock"  # type: ignore[union-attr]
    env = {"EXECUTOR_SERVICE__SOCKET": "/run/y.sock", "EXECUTOR_CONFIG": str(config)}
    assert find_service(None, env).unix_path == "/run/y.sock"  # type: ignore[union-attr]
    config.write_text("not [ toml")
    assert find_service(str(config), {"EXECUTOR_HOME": "/h"}) is None  # in-process reports the bad file


def test_a_settings_file_that_is_not_plain_toml_is_left_to_the_in_process_path(tmp_path: Path) -> None:
    """A device, a FIFO, a huge or too deeply nested file is not read here (never a hang): the in-process path
    reports it. The read bound is the settings' own."""
    import executor.cli.thin.transport as transport
    from executor.config import TOML_MAX_BYTES

    assert transport._TOML_MAX_BYTES == TOML_MAX_BYTES
    zero = tmp_path / "zero.toml"
    zero.symlink_to("/dev/zero")
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    deep = tmp_path / "deep.toml"
    deep.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    huge = tmp_path / "huge.toml"
    huge.write_text("# " + "x" * TOML_MAX_BYTES + "\n")
    for path in (zero, fifo, deep, huge, tmp_path / "missing.toml"):
        assert find_service(str(path), {"EXECUTOR_HOME": "/h"}) is None, path


def test_executor_url_forms() -> None:
    """http://HOST:PORT and unix:///PATH name a service that must answer; anything else is refused."""
    tcp = find_service(None, {"EXECUTOR_URL": "http://127.0.0.1:8766", "EXECUTOR_TOKEN": "t"})
    assert tcp is not None and (tcp.host, tcp.port, tcp.token, tcp.explicit) == ("127.0.0.1", 8766, "t", True)
    v6 = find_service(None, {"EXECUTOR_URL": "http://[::1]:9/"})
    assert v6 is not None and (v6.host, v6.port) == ("::1", 9)
    unix = find_service(None, {"EXECUTOR_URL": "unix:///run/s.sock"})
    assert unix is not None and unix.unix_path == "/run/s.sock" and unix.explicit
    for bad in ("ftp://x", "http://:80", "http://h:99999", "unix://relative"):
        with pytest.raises(Unreachable, match="is not http://HOST:PORT or unix:///PATH"):
            find_service(None, {"EXECUTOR_URL": bad})


@pytest.fixture
def one_shot_server(tmp_path: Path) -> Iterator[tuple[Path, list[bytes]]]:
    """A unix socket that answers canned HTTP responses, one per request, and records what it got."""
    path = tmp_path / "s.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)
    got: list[bytes] = []
    answers = [
        b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{"a": [1]}\n',
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        b'HTTP/1.1 404 Not Found\r\ncontent-length: 55\r\n\r\n{"error": {"type": "SessionNotFound", "message": "no"}}',
    ]

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            for answer in answers:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(4096)
                got.append(data)
                conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield path, got
    thread.join(timeout=10)
    listener.close()


def test_keep_alive_requests_read_lengths_chunks_and_errors(one_shot_server: tuple[Path, list[bytes]]) -> None:
    """One connection carries several requests; a chunked body is reassembled; an error status raises its type."""
    path, got = one_shot_server
    target = find_service(None, {"EXECUTOR_URL": f"unix://{path}", "EXECUTOR_TOKEN": "tok"})
    assert target is not None
    conn = open_connection(target, timeout=10)
    try:
        assert conn.call("GET", f"/v1/sessions/{segment('a b')}", query={"x": "1/2", "y": True}) == {"a": [1]}
        assert conn.send("GET", "/v1/two").read() == b"abcde"
        with pytest.raises(ServiceError, match=r"^no$") as caught:
            conn.call("DELETE", "/v1/three")
        assert (caught.value.type, caught.value.code) == ("SessionNotFound", 2)
    finally:
        conn.close()
    assert got[0].startswith(b"GET /v1/sessions/a%20b?x=1%2F2&y=true HTTP/1.1\r\n")
    assert b"authorization: Bearer tok\r\n" in got[0]


def test_nothing_listening_is_unreachable(tmp_path: Path) -> None:
    """A socket file nobody listens on (a killed service's leftover) refuses the connection."""
    path = tmp_path / "service.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()
    target = find_service(None, {"EXECUTOR_HOME": str(tmp_path)})
    assert target is not None and not target.explicit
    with pytest.raises(Unreachable, match=f"no executor service answers at {path}"):
        open_connection(target)


def test_an_idle_connection_the_service_closed_is_not_reused(tmp_path: Path) -> None:
    """A service closes an idle keep-alive connection (hypercorn after 5 s; a client busy reading a large stdin
    meanwhile): the next request goes on a new connection instead of failing with 'no HTTP response'."""
    path = tmp_path / "s.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(2)
    closed = threading.Event()
    answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"

    def serve() -> None:
        for index in range(2):
            conn, _ = listener.accept()
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(4096)
                conn.sendall(answer)
            if index == 0:
                closed.set()  # the first connection is closed idle, right after its one answer

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    target = find_service(None, {"EXECUTOR_URL": f"unix://{path}"})
    assert target is not None
    conn = open_connection(target, timeout=10)
    try:
        assert conn.call("GET", "/v1/one") == {}
        assert closed.wait(10)
        assert conn.call("POST", "/v1/two", {"stdin": "x" * 100_000}) == {}
    finally:
        conn.close()
        thread.join(timeout=10)
        listener.close()
