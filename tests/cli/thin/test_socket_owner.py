"""A socket another user may have put at the service's path never receives a request: not from the thin CLI, not
from the clients. Each case has a real listening socket that records whether anything connected."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio

from executor.client import AsyncClient, Client
from executor.errors import ConfigError
from executor.testing.cli import cli

NOBODY = 65534


@contextmanager
def listening(path: Path) -> Iterator[Callable[[], bool]]:
    """A unix socket listening at ``path``; yields a probe: whether anything connected (found in the backlog)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    path.chmod(0o600)
    sock.listen(8)

    def connected() -> bool:
        sock.setblocking(False)
        try:
            conn, _ = sock.accept()
        except BlockingIOError:
            return False
        conn.close()
        return True

    try:
        yield connected
    finally:
        sock.close()


def _needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a socket to another uid needs root")


def _unsafe(home: Path, case: str) -> Path:
    """Make ``home``'s socket unsafe in the way ``case`` names; return the path that is to blame."""
    sock = home / "service.sock"
    if case == "home-0777":
        home.chmod(0o777)
        return home
    if case == "home-0770":
        home.chmod(0o770)
        return home
    if case == "socket-other-uid":
        os.chown(sock, NOBODY, NOBODY)
        return sock
    if case == "socket-0666":
        sock.chmod(0o666)
        return sock
    if case == "home-other-uid":
        os.chown(home, NOBODY, NOBODY)
        return home
    if case == "parent-0777-no-sticky":
        home.parent.chmod(0o777)
        return home.parent
    raise AssertionError(case)


CASES = ["home-0777", "home-0770", "socket-other-uid", "socket-0666", "home-other-uid", "parent-0777-no-sticky"]


@pytest.mark.parametrize("case", CASES)
def test_the_thin_cli_refuses_with_exit_2_and_sends_nothing(tmp_path: Path, case: str) -> None:
    """exec, --json exec and session ls against an unsafe socket or home exit 2 with one line naming the path,
    and nothing ever connects to the socket."""
    _needs_root()
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    with listening(home / "service.sock") as connected:
        blamed = _unsafe(home, case)
        ran = cli(home, "exec", "--session", "hd-x", "--", "echo", "secret-command")
        assert ran.code == 2, (ran.code, ran.stdout, ran.stderr)
        lines = ran.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and str(blamed) in lines[0], ran.stderr
        assert "nothing was sent" in lines[0] and "Traceback" not in ran.stderr
        as_json = cli(home, "--json", "exec", "--", "echo", "secret-command")
        assert as_json.code == 2 and as_json.json()["exit_code"] == 2
        assert cli(home, "session", "ls").code == 2
        assert not connected()
    assert not (home / "sessions").exists()  # not run in-process either


@pytest.mark.parametrize("case", CASES)
def test_the_clients_raise_config_error_and_send_nothing(tmp_path: Path, case: str) -> None:
    """Client and AsyncClient raise a ConfigError naming the path before connecting."""
    _needs_root()
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    with listening(home / "service.sock") as connected:
        blamed = _unsafe(home, case)
        with Client(socket=home / "service.sock") as client, pytest.raises(ConfigError, match="nothing was sent"):
            client.exec("s-000000000000", "echo secret-command")

        async def main() -> None:
            async with AsyncClient(socket=home / "service.sock") as client:
                with pytest.raises(ConfigError, match=str(blamed)):
                    await client.health()

        trio.run(main)
        assert not connected()


def test_a_safe_home_is_connected_to(tmp_path: Path) -> None:
    """The control: with the caller's own 0700 home and 0600 socket, the client does connect (the probe works)."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    tmp_path.chmod(0o755)
    with listening(home / "service.sock") as connected, Client(socket=home / "service.sock", timeout_s=2) as client:
        with pytest.raises(Exception):  # noqa: B017 - the probe never answers; only the connect matters here
            client.health()
        assert connected()


def test_a_sticky_world_writable_folder_above_is_allowed(tmp_path: Path) -> None:
    """/tmp-like folders above the home (world-writable with the sticky bit) are fine: others cannot move the home."""
    _needs_root()
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    tmp_path.chmod(0o1777)
    with listening(home / "service.sock") as connected, Client(socket=home / "service.sock", timeout_s=2) as client:
        with pytest.raises(Exception):  # noqa: B017 - the probe never answers
            client.health()
        assert connected()
