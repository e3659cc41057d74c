"""The service through ``executor.client``: round trip, a 200 MB stream, 64 concurrent execs over 8 sessions, and
the service's RSS (idle and per held session). Standalone: ``python -m tests.benchmarks.bench_service``.

It starts a real ``executor serve`` with a private home, prints one JSON object and stops the service. Numbers,
not assertions: ``just bench`` and this script are where speed is judged, never the tests.
"""

from __future__ import annotations

import json
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from executor.client import AsyncClient
from tests.service.conftest import ServiceProcess, service_env


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(*, iters: int = 100, stream_mb: int = 200, concurrency: int = 64, sessions: int = 8) -> dict[str, Any]:
    """Measure; returns the numbers."""
    home = Path(tempfile.mkdtemp(prefix="exb-", dir="/tmp"))
    service = ServiceProcess(home, service_env(home))
    service.start()
    assert service.proc is not None
    out: dict[str, Any] = {"service_idle_rss_mib": _rss_kib(service.proc.pid) / 1024}
    try:
        with service.client() as client:
            session = client.create_session().id
            client.exec(session, "true")
            times = []
            for _ in range(iters):
                started = time.perf_counter()
                client.exec(session, "true")
                times.append((time.perf_counter() - started) * 1000)
            out["exec_true_ms_median"] = statistics.median(times)
            out["exec_true_ms_p95"] = _percentile(times, 0.95)

            rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            size = stream_mb * 1024 * 1024
            received = 0
            started = time.perf_counter()
            with client.stream_exec(session, f"head -c {size} /dev/zero") as events:
                for event in events:
                    if event.kind == "chunk":
                        received += len(event.data)
            elapsed = time.perf_counter() - started
            out["stream_mb_per_s"] = received / elapsed / 1e6
            out["stream_bytes_live"] = received
            out["client_rss_growth_mib"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024

            ids = [session] + [client.create_session().id for _ in range(sessions - 1)]
            out["service_rss_per_session_mib"] = (
                _rss_kib(service.proc.pid) / 1024 - out["service_idle_rss_mib"]
            ) / sessions

        async def burst() -> float:
            async with AsyncClient(socket=service.socket) as aclient:

                async def one(i: int) -> None:
                    await aclient.exec(ids[i % len(ids)], "true")

                started = time.perf_counter()
                async with trio.open_nursery() as nursery:
                    for i in range(concurrency):
                        nursery.start_soon(one, i)
                return concurrency / (time.perf_counter() - started)

        trio.run(burst)  # warm every session's connection
        out["concurrent_exec_per_s"] = statistics.median(trio.run(burst) for _ in range(3))
    finally:
        service.stop()
        shutil.rmtree(home, ignore_errors=True)
    return out


if __name__ == "__main__":
    json.dump(run(), sys.stdout, indent=2)
    sys.stdout.write("\n")
