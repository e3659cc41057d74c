"""Benchmark of the artifact store: a read_output page and a full search_output scan, latency and peak RSS.

Not a test (pytest collects ``test_*.py`` only). ``run()`` returns rows ``{name, value, unit, target}`` over a
256 KB artifact (the default cap) and a 100 MB one (cap raised), written chunk by chunk as a command would.
"""

from __future__ import annotations

import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from executor.artifacts import ArtifactStore, SessionArtifacts
from executor.config import load_settings
from executor.ids import new_session_id

__all__ = ["run"]

_MIB = 1024 * 1024
_CHUNK_LINES = 1024


def _rss_mib() -> float:
    # ru_maxrss is in KiB on Linux: the peak so far, so a later value above an earlier one means growth.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _capture(session: SessionArtifacts, size: int) -> tuple[str, int]:
    capture = session.begin(kind="bench", streams=("stdout",))
    written = 0
    line = 0
    while written < size:
        chunk = b"".join(
            b"%08d build step ok: compiled module_%d.o in %d ms\n" % (line + i, (line + i) % 997, (line + i) % 89)
            for i in range(_CHUNK_LINES)
        )
        line += _CHUNK_LINES
        chunk = chunk[: size - written]
        capture.feed("stdout", chunk)
        written += len(chunk)
    record = capture.finish(status="ok")
    return record.id, record.streams["stdout"].lines


def _time_ms(fn: Any, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        began = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - began) * 1000)
    return statistics.median(samples)


def _bench(label: str, size: int, cap: int, rows: list[dict[str, Any]]) -> None:
    settings = load_settings(
        overrides={"artifacts": {"capture_max_bytes": cap, "session_max_bytes": max(4 * cap, 4 * _MIB)}}
    )
    with tempfile.TemporaryDirectory() as tmp, ArtifactStore.open(Path(tmp), settings.artifacts) as store:
        session = store.session(new_session_id())
        rss_before = _rss_mib()
        began = time.perf_counter()
        artifact_id, lines = _capture(session, size)
        capture_s = time.perf_counter() - began
        rows.append(
            {
                "name": f"{label} capture throughput",
                "value": round(size / _MIB / capture_s, 1),
                "unit": "MiB/s",
                "target": None,
            }
        )
        middle = max(1, lines // 2)
        page_ms = _time_ms(lambda: session.read_output(artifact_id, start_line=middle), 50)
        last_ms = _time_ms(lambda: session.read_output(artifact_id, start_line=max(1, lines - 10)), 50)
        rows.append(
            {"name": f"{label} read_output page (middle)", "value": round(page_ms, 3), "unit": "ms", "target": "< 5"}
        )
        rows.append(
            {"name": f"{label} read_output page (end)", "value": round(last_ms, 3), "unit": "ms", "target": "< 5"}
        )

        async def scan_one() -> tuple[float, int]:
            started = time.perf_counter()
            page = await session.search_output(artifact_id, pattern=r"module_9999\.o", limit=10)
            return (time.perf_counter() - started) * 1000, page.scanned_chars

        async def scan_all() -> tuple[float, int]:
            started = time.perf_counter()
            start: int | None = 1
            calls = 0
            while start is not None:
                page = await session.search_output(artifact_id, pattern=r"in 88 ms$", limit=10_000, start_line=start)
                start = page.next_start_line
                calls += 1
            return (time.perf_counter() - started) * 1000, calls

        scans = [trio.run(scan_one) for _ in range(5)]
        scan_ms = statistics.median(s[0] for s in scans)
        rows.append(
            {
                "name": f"{label} search_output one call ({scans[0][1]} chars scanned)",
                "value": round(scan_ms, 2),
                "unit": "ms",
                "target": "< 100 per 1,000,000 chars",
            }
        )
        full_ms, calls = trio.run(scan_all)
        rows.append(
            {
                "name": f"{label} search_output whole stream ({calls} resumed calls)",
                "value": round(full_ms, 1),
                "unit": "ms",
                "target": None,
            }
        )
        rows.append(
            {
                "name": f"{label} peak RSS growth",
                "value": round(_rss_mib() - rss_before, 1),
                "unit": "MiB",
                "target": "flat (~0)",
            }
        )


def run() -> list[dict[str, Any]]:
    """Run the benchmark and return its rows."""
    rows: list[dict[str, Any]] = [
        {"name": "baseline peak RSS", "value": round(_rss_mib(), 1), "unit": "MiB", "target": None}
    ]
    _bench("256 KB artifact", 256_000, 256_000, rows)
    _bench("100 MB artifact", 100 * _MIB, 128 * _MIB, rows)
    return rows


if __name__ == "__main__":
    for row in run():
        print(f"{row['name']:<60} {row['value']:>10} {row['unit']:<6} target {row['target']}")
