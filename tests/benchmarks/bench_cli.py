"""The CLI as a CI step calls it: ``executor exec --session NAME -- true`` through a running service (the thin
path), the ``docker exec`` CLI on the same container, and the in-process CLI on the same session; a 200 MB stream
to the CLI's stdout beside ``docker exec``'s; and the thin path's import time.

Standalone: ``python -m tests.benchmarks.bench_cli [--iters N] [--stream-mb M]`` prints the rows as JSON; ``just
bench`` runs it as section "8 cli". It starts a real ``executor serve`` in a private home (no warm pool: the
session is named) and stops it. Numbers, not assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from executor.testing.cli import cli, cli_env, serving

_SECTION = "8 cli"
_TIMEOUT_S = 300.0


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _timed(argv: Sequence[str], env: dict[str, str], *, stdout: Any = subprocess.DEVNULL) -> tuple[float, int]:
    """Wall milliseconds of one process and its peak RSS (KiB), which ``wait4`` reports for that child alone."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=stdout, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = (time.perf_counter() - started) * 1000
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv} exited {proc.returncode}")
    return elapsed, usage.ru_maxrss


def _row(
    name: str, unit: str, executor: float | None, raw: float | None, target: str, met: bool | None, note: str = ""
) -> dict[str, Any]:
    ratio = executor / raw if executor is not None and raw else None
    return {
        "section": _SECTION,
        "name": name,
        "unit": unit,
        "executor": executor,
        "raw": raw,
        "ratio": ratio,
        "target": target,
        "met": met,
        "note": note,
    }


def _import_ms(env: dict[str, str], runs: int = 15) -> tuple[float, float]:
    """The thin path's import: ``-X importtime`` cumulative of what ``executor.cli.main`` and the thin client load
    beyond the interpreter's own start-up (median, ms), and the interpreter start-up itself (median, ms)."""

    def top_level(code: str) -> dict[str, int]:
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", code], env=env, capture_output=True, text=True, check=True
        )
        out: dict[str, int] = {}
        for line in done.stderr.splitlines():
            if not line.startswith("import time:") or "|" not in line:
                continue
            _, cumulative, name = line.split("|")
            if not name.startswith("  ") and cumulative.strip().isdigit():  # a top-level import
                out[name.strip()] = int(cumulative)
        return out

    thin, startup = [], []
    for _ in range(runs):
        base = top_level("pass")
        loaded = top_level("import executor.cli.main, executor.cli.thin.run")
        thin.append(sum(us for name, us in loaded.items() if name not in base) / 1000)
        startup.append(sum(base.values()) / 1000)
    return statistics.median(thin), statistics.median(startup)


def run(*, iters: int = 30, stream_mb: int = 200) -> list[dict[str, Any]]:
    """Measure; the rows in ``just bench``'s format."""
    home = Path(tempfile.mkdtemp(prefix="exb-", dir="/tmp"))
    rows: list[dict[str, Any]] = []
    env = cli_env(home)
    name = "bench-cli"
    try:
        with serving(home, profiles__default__pool__service_size="0"):
            started = cli(home, "--json", "session", "start", "--name", name)
            if started.code != 0:
                raise RuntimeError(f"session start failed: {started.stdout}{started.stderr}")
            container = f"executor-{started.json()['session']['id']}"
            thin = [sys.executable, "-m", "executor.cli", "exec", "--session", name, "--", "true"]
            docker = ["docker", "exec", container, "true"]
            inproc = [
                sys.executable,
                "-c",
                "import sys; from executor.cli.app import main; main(sys.argv[1:])",
                "exec",
                "--session",
                name,
                "--",
                "true",
            ]
            variants = {"thin": thin, "docker": docker, "inprocess": inproc}
            for argv in variants.values():  # warm: the agent's connection, caches, the page cache
                _timed(argv, env)
            times: dict[str, list[float]] = {key: [] for key in variants}
            order = [key for key in variants for _ in range(iters)]
            random.Random(7).shuffle(order)  # interleaved: a noisy neighbour hits every variant alike
            for key in order:
                times[key].append(_timed(variants[key], env)[0])
            med = {key: statistics.median(values) for key, values in times.items()}
            p95 = {key: _percentile(values, 0.95) for key, values in times.items()}
            rows.append(
                _row(
                    "exec --session NAME -- true via the service (median)",
                    "ms",
                    med["thin"],
                    med["docker"],
                    "<= 1.0x docker exec",
                    med["thin"] <= med["docker"],
                    f"p95 {p95['thin']:.1f} ms vs docker exec {p95['docker']:.1f} ms; {iters} each, interleaved",
                )
            )
            rows.append(
                _row(
                    "exec --session NAME -- true in-process, no service (median)",
                    "ms",
                    med["inprocess"],
                    med["docker"],
                    "-",
                    None,
                    f"p95 {p95['inprocess']:.1f} ms",
                )
            )
            thin_import, startup = _import_ms(env)
            rows.append(
                _row(
                    "thin path import (executor.cli.main + thin client, -X importtime)",
                    "ms",
                    thin_import,
                    None,
                    "<= 60 ms",
                    thin_import <= 60,
                    f"beyond the interpreter's own start-up ({startup:.1f} ms of imports)",
                )
            )
            size = stream_mb * 1024 * 1024
            command = f"head -c {size} /dev/zero"
            stream = {
                "thin": [sys.executable, "-m", "executor.cli", "exec", "--session", name, "--", command],
                "docker": ["docker", "exec", container, "sh", "-c", command],
            }
            rates: dict[str, list[float]] = {"thin": [], "docker": []}
            rss: list[int] = []
            for _ in range(3):
                for key, argv in stream.items():
                    ms, peak = _timed(argv, env)
                    rates[key].append(size / (ms / 1000) / 1e6)
                    if key == "thin":
                        rss.append(peak)
            thin_rate, docker_rate = statistics.median(rates["thin"]), statistics.median(rates["docker"])
            rows.append(
                _row(
                    f"{stream_mb} MB stream to the CLI's stdout via the service",
                    "MB/s",
                    thin_rate,
                    docker_rate,
                    ">= 1x docker exec",
                    thin_rate >= docker_rate,
                    f"CLI peak RSS {max(rss) / 1024:.1f} MiB (flat: independent of the stream's size)",
                )
            )
            cli(home, "session", "stop", name)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.bench_cli")
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--stream-mb", type=int, default=200)
    args = parser.parse_args()
    json.dump(run(iters=args.iters, stream_mb=args.stream_mb), sys.stdout, indent=2)
    sys.stdout.write("\n")
