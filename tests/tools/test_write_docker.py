"""The write tool through the whole path: host -> agent client -> agent (PID 1) -> fs-write in a real container.

Each test opens one hardened session (read-only root, /workspace volume owned by uid 1000, /tmp tmpfs) and runs
several scenarios in it, to keep the suite to seconds.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest

from executor.config import Settings
from executor.errors import ActionConsumed, ChangedSinceReview, ContentRejected, UnsafeTarget, WriteFailed
from executor.models import RunSpec
from executor.tools.write import AgentRunner, WriteTool

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(180)]

client_module = pytest.importorskip("executor.sandbox.agent.client", reason="the agent client is not built yet")
base_module = pytest.importorskip("executor.sandbox.base")


class _Sink:
    def __init__(self) -> None:
        self.data: dict[str, bytearray] = {}

    def feed(self, stream: str, data: bytes) -> None:
        self.data.setdefault(stream, bytearray()).extend(data)


@dataclass
class Session:
    """A live session: its write tools and a way to run bash in it."""

    tool: WriteTool
    outside: WriteTool
    client: AgentRunner

    async def sh(self, command: str) -> str:
        """Run ``command`` as the session user; return stdout; fail the test on a nonzero exit."""
        sink = _Sink()
        spec = RunSpec(command=command, cwd="/workspace", timeout_ms=20_000, grace_ms=500, drain_ms=500)
        result = await self.client.run(spec, sink)
        out = bytes(sink.data.get("stdout", b"")).decode(errors="replace")
        err = bytes(sink.data.get("stderr", b"")).decode(errors="replace")
        assert result.exit_code == 0, f"{command!r} failed: {err}"
        return out


@asynccontextmanager
async def open_session(settings: Settings) -> AsyncIterator[Session]:
    profile = settings.profile()
    async with base_module.open_backend(settings) as backend:
        info = await backend.open_session(profile=profile, profile_name="default")
        try:
            stream = await backend.connect(info.id)
            async with client_module.open_agent_client(stream) as client:
                yield Session(
                    tool=WriteTool(client, profile, settings.write),
                    outside=WriteTool(client, profile, settings.write, allow_outside_workspace=True),
                    client=client,
                )
        finally:
            await backend.stop_session(info.id)


async def test_writes_land_exactly_in_a_real_container(settings: Settings) -> None:
    """In a real session, writes are byte-exact, keep modes, spare hard links, reach the cap and land on tmpfs."""
    async with open_session(settings) as s:
        # new file with NUL and 0xff, owned by the session user
        content = b"\x00\xffbinary\x00" * 100
        result = await s.tool.execute(await s.tool.prepare("data.bin", content), content)
        assert result.created and result.state.uid == 1000
        assert (await s.sh("sha256sum data.bin")).split()[0] == hashlib.sha256(content).hexdigest()

        # a 0755 script stays 0755; a hard-linked copy keeps the old content
        await s.sh("printf 'echo old\\n' > run.sh && chmod 0755 run.sh && ln run.sh run-copy.sh")
        prepared = await s.tool.prepare("run.sh", b"echo new\n")
        assert "-echo old\n+echo new\n" in prepared.diff
        await s.tool.execute(prepared, b"echo new\n")
        assert await s.sh("stat -c %a run.sh; bash run.sh; bash run-copy.sh") == "755\nnew\nold\n"

        # exactly the cap goes through; one byte more is refused before the container
        cap = settings.write.max_bytes
        big = os.urandom(cap)
        await s.tool.execute(await s.tool.prepare("big.bin", big), big)
        assert (await s.sh("sha256sum big.bin")).split()[0] == hashlib.sha256(big).hexdigest()
        with pytest.raises(ContentRejected):
            await s.tool.prepare("bigger.bin", big + b"!")

        # a tmpfs path (outside the workspace, allowed by the switch) is really written
        await s.outside.execute(await s.outside.prepare("/tmp/note.txt", b"on tmpfs"), b"on tmpfs")
        assert await s.sh("cat /tmp/note.txt") == "on tmpfs"
        assert await s.sh("ls -A /workspace /tmp | grep -c executor- || true") == "0\n"


async def test_unsafe_and_stale_writes_are_refused_in_a_real_container(settings: Settings) -> None:
    """In a real session, the read-only root, symlinks, special files, stale reviews and replays are refused."""
    async with open_session(settings) as s:
        # the image's root is read-only: an explicit error, never a silent success
        prepared = await s.outside.prepare("/etc/executor-test", b"x")
        with pytest.raises(WriteFailed, match=r"Read-only file system .*mounted read-only"):
            await s.outside.execute(prepared, b"x")
        assert await s.sh("test ! -e /etc/executor-test && echo absent") == "absent\n"

        # a symlinked parent (A15) and a final symlink are refused, naming the component
        await s.sh("ln -s /etc escape && ln -s /etc/hostname final-link && mkfifo pipe && mkdir adir")
        with pytest.raises(UnsafeTarget, match=r"^/workspace/escape is a symbolic link"):
            await s.tool.prepare("escape/passwd", b"root::0:0::/:/bin/sh\n")
        with pytest.raises(UnsafeTarget, match=r"^/workspace/final-link is a symbolic link"):
            await s.tool.prepare("final-link", b"x")
        for name, kind in (("pipe", "fifo"), ("adir", "directory")):
            with pytest.raises(UnsafeTarget, match=f"is a {kind}, not a regular file"):
                await s.tool.prepare(name, b"x")
        with pytest.raises(UnsafeTarget, match="/dev/null is a char, not a regular file"):
            await s.outside.prepare("/dev/null", b"x")

        # a command changes the file between prepare and execute: refused, the command's content stays
        await s.sh("echo v1 > notes.txt")
        prepared = await s.tool.prepare("notes.txt", b"mine\n")
        await s.sh("echo v2 > notes.txt")
        with pytest.raises(ChangedSinceReview, match="changed since it was reviewed"):
            await s.tool.execute(prepared, b"mine\n")
        assert await s.sh("cat notes.txt") == "v2\n"

        # a prepared write executes once
        prepared = await s.tool.prepare("once.txt", b"1")
        await s.tool.execute(prepared, b"1")
        with pytest.raises(ActionConsumed):
            await s.tool.execute(prepared, b"1")
        assert await s.sh("ls -A | grep -c executor- || true") == "0\n"


async def test_a_write_result_states_what_is_on_disk(settings: Settings) -> None:
    """A write refused before its rename says it changed nothing; one whose staging file a racing process of the
    session wrote to (after the content was hashed) says the rename happened and exactly what the target now
    holds, and that is what a reader finds there."""
    async with open_session(settings) as s:
        await s.sh("echo v1 > notes.txt")
        prepared = await s.tool.prepare("notes.txt", b"mine\n")
        await s.sh("echo v2 > notes.txt")
        with pytest.raises(ChangedSinceReview, match=r"this write changed nothing on disk$") as refused:
            await s.tool.execute(prepared, b"mine\n")
        assert refused.value.committed is False
        assert await s.sh("cat notes.txt") == "v2\n"

        # the racer overwrites the first byte of every staging file of big.bin while the agent copies and renames it
        racer = (
            "(timeout 60 bash -c 'while [ ! -e stop-racer ]; do for f in .big.bin.executor-*; do "
            '[ -f "$f" ] && printf X 1<>"$f"; done; done\' >/dev/null 2>&1 &)'
        )
        spec = RunSpec(command=racer, cwd="/workspace", timeout_ms=20_000, grace_ms=500, drain_ms=500)
        spec = spec.model_copy(update={"kill_orphans": False})
        assert (await s.client.run(spec, _Sink())).exit_code == 0
        content = b"\0" + os.urandom(12 * 1024 * 1024)  # the racer writes an X over the first byte
        try:
            prepared = await s.tool.prepare("big.bin", content)
            with pytest.raises(WriteFailed, match=r"the rename happened: /workspace/big\.bin now holds") as raced:
                await s.tool.execute(prepared, content)
        finally:
            await s.sh("touch stop-racer")
        assert raced.value.committed is True
        assert "not the content prepared" in str(raced.value) and "nothing was written" not in str(raced.value)
        size, digest = (await s.sh("stat -c %s big.bin; sha256sum big.bin | cut -c1-16")).split()
        assert f"now holds {size} bytes with sha256 {digest}…" in str(raced.value)
