"""A TCP endpoint in front of the local engine's unix socket: a real remote-style (``tcp://``) engine for tests."""

from __future__ import annotations

import selectors
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

__all__ = ["tcp_to_unix"]


def _pump(client: socket.socket, path: str) -> None:
    with client, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as upstream:
        try:
            upstream.connect(path)
        except OSError:
            return
        pairs = {client: upstream, upstream: client}
        with selectors.DefaultSelector() as selector:
            for end in pairs:
                selector.register(end, selectors.EVENT_READ)
            open_ends = 2
            while open_ends:
                for key, _ in selector.select():
                    source = key.fileobj
                    assert isinstance(source, socket.socket)
                    try:
                        data = source.recv(65536)
                    except OSError:
                        data = b""
                    if data:
                        with suppress(OSError):
                            pairs[source].sendall(data)
                        continue
                    # One side finished sending: pass the half-close on (the exec bridge relies on it).
                    selector.unregister(source)
                    open_ends -= 1
                    with suppress(OSError):
                        pairs[source].shutdown(socket.SHUT_WR)


@contextmanager
def tcp_to_unix(path: str) -> Iterator[str]:
    """Listen on a free loopback port and forward every connection to the unix socket ``path``; yields the
    ``tcp://127.0.0.1:PORT`` address. Connections are closed when they end; the listener when the block ends."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.settimeout(0.2)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            threading.Thread(target=_pump, args=(client, path), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()
