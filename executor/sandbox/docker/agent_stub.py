#!/usr/bin/python3
"""A stand-in for the in-container agent, used only until ``executor.sandbox.agent.build`` exists.

It speaks the agent's command line (``init`` and ``bridge``) but no protocol: every connection is an echo.
It needs python3 in the image (the ``base`` image has it). The real agent is a static C binary.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
from pathlib import Path


def _opt(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def _echo(conn: socket.socket) -> None:
    with conn:
        while data := conn.recv(65536):
            conn.sendall(data)


def _init(args: list[str]) -> int:
    path = _opt(args, "--listen")
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    signal.signal(signal.SIGCHLD, lambda *_: _reap())
    Path(path).unlink(missing_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    Path(path).chmod(0o600)
    server.listen(64)
    while True:
        try:
            conn, _ = server.accept()
        except InterruptedError:
            continue
        threading.Thread(target=_echo, args=(conn,), daemon=True).start()


def _reap() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def _bridge(args: list[str]) -> int:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(_opt(args, "--connect"))
    except OSError as exc:
        sys.stderr.write(f"bridge: {exc}\n")
        return 1
    if "--check" in args:
        conn.close()
        return 0

    def pump_in() -> None:
        while data := os.read(0, 65536):
            conn.sendall(data)
        conn.shutdown(socket.SHUT_WR)

    threading.Thread(target=pump_in, daemon=True).start()
    while data := conn.recv(65536):
        os.write(1, data)
    return 0


def main() -> int:
    """Dispatch ``init`` or ``bridge``."""
    args = sys.argv[1:]
    if args[:1] == ["init"]:
        return _init(args)
    if args[:1] == ["bridge"]:
        return _bridge(args)
    sys.stderr.write("usage: agent init --listen SOCK ... | agent bridge --connect SOCK [--check]\n")
    return 2


if __name__ == "__main__":
    sys.exit(main())
