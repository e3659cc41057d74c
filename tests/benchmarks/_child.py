"""One throughput run in a fresh interpreter, so that its ``ru_maxrss`` is its own.

``python -m tests.benchmarks._child VARIANT JSON`` prints one JSON line: ``{seconds, bytes, rss_ready_kib,
rss_peak_kib}``. Every variant imports the same modules first (the executor's pipeline, the raw client), so the
``idle`` variant is the common floor. Variants:

- ``idle``: imports only;
- ``raw``: a raw Engine API exec on the session's container, its stream demultiplexed into a file;
- ``agent``: one :meth:`AgentClient.run` over a new connection to the session's agent, output into a file sink;
- ``pipeline``: ``session.bash`` on the attached session (gate, capture into the artifact store, view, journal).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

import trio

from executor.config import load_settings
from executor.models import StreamName
from executor.sandbox.agent.client import open_agent_client
from executor.sandbox.base import open_backend
from executor.session import open_executor
from executor.tools.bash import build_run_spec
from tests.benchmarks._rawdocker import RawDocker, socket_path


def _rss_kib() -> int:
    """This interpreter's peak RSS (``VmHWM``), in KiB.

    Not ``ru_maxrss``: Linux carries the spawning parent's peak into a child's ``ru_maxrss`` across ``execve`` (the
    benchmark's parent holds 8 sessions), so every child would report at least the parent's peak. ``VmHWM`` is the
    high-water mark of this process's own memory image since its ``execve``.
    """
    for line in Path("/proc/self/status").read_bytes().splitlines():
        if line.startswith(b"VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


class FileSink:
    """A capture sink that appends both streams to one file descriptor, as they arrive."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self.nbytes = 0

    def feed(self, stream: StreamName, data: bytes) -> None:
        """Append ``data`` (either stream) to the file."""
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        self.nbytes += len(data)


def _raw(args: dict[str, Any]) -> dict[str, Any]:
    raw = RawDocker(socket_path(args["base_url"]))
    with Path(args["out"]).open("wb") as out:
        ready = _rss_kib()
        began = time.perf_counter()
        timing = raw.run(args["container"], args["command"], out=out)
        seconds = time.perf_counter() - began
    raw.close()
    if timing.exit_code != 0:
        raise RuntimeError(f"raw exec exited {timing.exit_code}")
    return {"seconds": seconds, "bytes": timing.nbytes, "rss_ready_kib": ready}


async def _agent(args: dict[str, Any]) -> dict[str, Any]:
    settings = load_settings(overrides={"home": args["home"]})
    spec = build_run_spec(args["command"], settings=settings.bash, profile=settings.profile())
    async with open_backend(settings) as backend:
        stream = await backend.connect(args["session"])
        async with open_agent_client(stream, max_frame=settings.agent.max_frame_bytes) as client:
            fd = os.open(args["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                sink = FileSink(fd)
                ready = _rss_kib()
                began = time.perf_counter()
                result = await client.run(spec, sink)
                seconds = time.perf_counter() - began
            finally:
                os.close(fd)
    if result.exit_code != 0:
        raise RuntimeError(f"agent run ended {result.cause} {result.exit_code}")
    return {"seconds": seconds, "bytes": sink.nbytes, "rss_ready_kib": ready}


async def _pipeline(args: dict[str, Any]) -> dict[str, Any]:
    settings = load_settings(overrides={"home": args["home"]})
    async with open_executor(settings) as ex, ex.attach_session(args["session"], owner=args["owner"]) as session:
        ready = _rss_kib()
        began = time.perf_counter()
        result = await session.bash(args["command"])
        seconds = time.perf_counter() - began
    if result.run is None or result.exit_code != 0:
        raise RuntimeError(f"pipeline run ended {result.outcome}: {result.text[:300]}")
    return {
        "seconds": seconds,
        "bytes": sum(result.run.stream_bytes.values()),
        "rss_ready_kib": ready,
        "artifact": result.artifact_id,
    }


def main(argv: list[str]) -> None:
    """Run one variant and print its JSON line."""
    variant, args = argv[0], json.loads(argv[1])
    answer: dict[str, Any]
    if variant == "idle":
        answer = {"seconds": 0.0, "bytes": 0, "rss_ready_kib": _rss_kib()}
    elif variant == "raw":
        answer = _raw(args)
    elif variant == "agent":
        answer = trio.run(_agent, args)
    elif variant == "pipeline":
        answer = trio.run(_pipeline, args)
    else:
        raise SystemExit(f"unknown variant {variant!r}")
    answer["rss_peak_kib"] = _rss_kib()
    answer["ru_maxrss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps(answer))


if __name__ == "__main__":
    main(sys.argv[1:])
