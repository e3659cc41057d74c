"""Files in and out of a session through the service: the download spool (pure) and the real service streaming
folders both ways."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.lowlevel

from executor.errors import ContentRejected, ExecutorError, SessionNotFound, UnsafeTarget
from executor.service.files import Spool
from executor.testing.files import listing, make_tree
from tests.service.conftest import ServiceProcess


async def test_spool_keeps_every_byte_in_order_with_bounded_memory(tmp_path: Path) -> None:
    """A reader far behind the producer gets every byte in order; memory never holds more than its bound and
    the rest went through the temporary file."""
    spool = Spool(limit=10**9, memory=64 * 1024, directory=tmp_path)
    sent = [os.urandom(1000 + i) for i in range(600)]
    for part in sent[:300]:
        spool.add("stdout", part)
    spool.add("stderr", b"not this stream")
    got = bytearray()
    async with trio.open_nursery() as nursery:

        async def produce() -> None:
            for part in sent[300:]:
                spool.add("stdout", part)
                await trio.lowlevel.checkpoint()
            spool.close()

        nursery.start_soon(produce)
        async for chunk in spool.chunks():
            got += chunk
    assert bytes(got) == b"".join(sent)
    assert spool.peak_held <= 64 * 1024
    assert spool.spilled >= sum(len(part) for part in sent[:300]) - 64 * 1024
    assert not any(tmp_path.iterdir())  # noqa: ASYNC240 (a test check: the file was unlinked at once)


async def test_spool_over_its_limit_says_so_once(tmp_path: Path) -> None:
    """At the limit the spool keeps exactly ``limit`` bytes (the part of a chunk that fits; a reader can tell a cut
    at the bound), nothing more, and calls on_overflow once."""
    calls: list[int] = []
    spool = Spool(limit=2500, memory=1024, directory=tmp_path, on_overflow=lambda: calls.append(1))
    for _ in range(5):
        spool.add("stdout", bytes([65 + _]) * 1000)
    assert spool.overflow and spool.total == 2500 and calls == [1]
    await spool.wait_for(10**6)  # returns at once: the stream is over its limit
    read = b"".join([chunk async for chunk in spool.chunks()])
    assert read == b"A" * 1000 + b"B" * 1000 + b"C" * 500


# -- the real service --------------------------------------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_folder_round_trip_is_exact(shared_service: ServiceProcess, tmp_path: Path) -> None:
    """A folder with nested files, modes and a symlink goes in and comes back byte for byte, modes and link kept."""
    src = make_tree(tmp_path)
    with shared_service.client() as client:
        session = client.create_session().id
        put = client.upload(session, src, "in", contents=False)
        assert put.outcome == "completed", put.text
        seen = client.exec(session, "stat -c '%a %F %N' in/src/run.sh in/src/secret in/src/link")
        assert seen.stdout.decode().splitlines() == [
            "750 regular file 'in/src/run.sh'",
            "600 regular file 'in/src/secret'",
            "777 symbolic link 'in/src/link' -> 'sub/deep/data.bin'",
        ]
        stats = client.download(session, "in/src", tmp_path / "back")
        assert listing(tmp_path / "back" / "src") == listing(src)
        assert (stats.files, stats.bytes) == (3, 256 * 3000 + 8 + 2)


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_an_archive_leaving_the_destination_is_refused(shared_service: ServiceProcess, tmp_path: Path) -> None:
    """A folder in the session holding a link out of it comes back refused, and nothing is written on the host."""
    with shared_service.client() as client:
        session = client.create_session().id
        client.exec(session, "mkdir -p evil && echo x > evil/ok && ln -s ../../../../etc evil/up")
        with pytest.raises(UnsafeTarget, match="refused the archive"):
            client.download(session, "evil", tmp_path / "dest")
        assert not (tmp_path / "dest").exists()


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_bounds_cut_both_ways(service_factory: Any, tmp_path: Path) -> None:
    """An upload above service.max_request_bytes is refused naming the setting; a download that grows past
    service.download_max_bytes after it started streaming is cut short (one warning line in the service's log), and
    nothing is unpacked."""
    service: ServiceProcess = service_factory(service__max_request_bytes="65536", service__download_max_bytes="1MiB")
    service.start()
    big = tmp_path / "big"
    big.mkdir()
    (big / "noise").write_bytes(os.urandom(3 * 1024 * 1024))
    with service.client() as client:
        session = client.create_session().id
        with pytest.raises(ExecutorError, match=r"service\.max_request_bytes"):
            client.upload(session, big, "big")
        made = client.exec(session, "mkdir -p out && head -c 3000000 /dev/urandom > out/noise")
        assert made.outcome == "completed"
        with pytest.raises(ContentRejected, match=r"above 1048576 bytes \(service\.download_max_bytes\)"):
            client.download(session, "out", tmp_path / "dest")
        assert not (tmp_path / "dest").exists()
        # The session is fine afterwards.
        assert client.exec(session, "echo still").stdout == b"still\n"
    # The cut is one warning line in the service's log, not a traceback.
    log = "".join(service.stderr)
    assert "download of out cut short: it grew past service.download_max_bytes" in log
    assert "Traceback" not in log, log


_CHILD = textwrap.dedent(
    """
    import sys
    from executor.client import Client
    def hwm():  # this process's own peak (ru_maxrss would carry the forking parent's pages across exec)
        line = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
        return int(line.split()[1]) * 1024
    before = hwm()
    with Client(socket=sys.argv[1]) as client:
        got = 0
        with client.download_stream(sys.argv[2], sys.argv[3]) as chunks:
            for chunk in chunks:
                got += len(chunk)
    print(got, hwm() - before)
    """
)


def _hwm(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_a_large_download_streams_with_flat_memory(shared_service: ServiceProcess) -> None:
    """A 160 MB download reaches a client whose peak memory, and the service's, grow far less than its size."""
    size = 160 * 1024 * 1024
    with shared_service.client() as client:
        session = client.create_session().id
        made = client.exec(session, f"mkdir -p big && head -c {size} /dev/zero > big/zeros")
        assert made.outcome == "completed", made.text
        assert shared_service.proc is not None
        before = _hwm(shared_service.proc.pid)
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, str(shared_service.socket), session, "big"],
            capture_output=True,
            timeout=240,
            check=True,
        )
        got, child_peak = (int(word) for word in done.stdout.split())
        grown = _hwm(shared_service.proc.pid) - before
    assert got > size
    assert child_peak < size // 4, child_peak  # growth past the imports' peak
    assert grown < size // 4, grown


_UPLOADER = textwrap.dedent(
    """
    import sys
    from executor.client import Client
    def hwm():  # this process's own peak (ru_maxrss would carry the forking parent's pages across exec)
        line = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
        return int(line.split()[1]) * 1024
    before = hwm()
    with Client(socket=sys.argv[1], timeout_s=240) as client:
        result = client.upload(sys.argv[2], sys.argv[3], "up")
    print(result.outcome, hwm() - before)
    """
)


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_a_large_upload_streams_with_flat_memory(service_factory: Any, tmp_path: Path) -> None:
    """A 60 MB folder goes in whole while the client's peak memory, and the service's, grow far less than its size
    (the body is spooled to a file and streamed to tar's stdin). 60 MB: the agent queues at most 64 MiB of stdin
    ahead of a command, with no flow control back to the host."""
    size = 60 * 1024 * 1024
    service: ServiceProcess = service_factory(service__max_request_bytes="256MiB", bash__timeout_ms="240000")
    service.start()
    big = tmp_path / "big"
    big.mkdir()
    with (big / "zeros").open("wb") as handle:
        handle.truncate(size)
    with service.client() as client:
        session = client.create_session().id
        assert service.proc is not None
        before = _hwm(service.proc.pid)
        done = subprocess.run(
            [sys.executable, "-c", _UPLOADER, str(service.socket), session, str(big)],
            capture_output=True,
            timeout=280,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        outcome, child_peak = done.stdout.split()
        grown = _hwm(service.proc.pid) - before
        assert outcome == b"completed", done.stdout + done.stderr
        assert client.exec(session, "stat -c %s up/zeros").stdout == f"{size}\n".encode()
    assert int(child_peak) < size // 4, child_peak  # growth past the imports' peak
    assert grown < size // 4, grown
    assert not list((service.home / "tmp").glob("upload-*"))  # the spooled body is gone


@pytest.mark.docker
@pytest.mark.timeout(180)
def test_a_large_upload_refused_before_its_body_is_answered_not_hung(
    shared_service: ServiceProcess, tmp_path: Path
) -> None:
    """An upload the service refuses before reading its body (no such session) is answered, whatever its size: the
    service reads and drops the body before it answers, and the thin CLI stops sending once an answer came. Both
    clients used to send into a service that no longer read, forever."""
    folder = tmp_path / "big"
    folder.mkdir()
    (folder / "big.bin").write_bytes(os.urandom(3_000_000))
    done = subprocess.run(
        [sys.executable, "-m", "executor.cli", "cp", str(folder / "big.bin"), "no-such-session:x"],
        env=shared_service.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "no session" in done.stderr, done.stderr
    with shared_service.client() as client, pytest.raises(SessionNotFound):
        client.upload("no-such-session", folder, "x")
