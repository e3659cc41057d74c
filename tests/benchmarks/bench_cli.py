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


def _timed(argv: Sequence[str], env: dict[str, str]) -> float:
    """Wall milliseconds of one process (stdout to /dev/null)."""
    started = time.perf_counter()
    done = subprocess.run(
        argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False
    )
    elapsed = (time.perf_counter() - started) * 1000
    if done.returncode != 0:
        raise RuntimeError(f"{argv} exited {done.returncode}")
    return elapsed


def _peak_rss_kib(argv: Sequence[str], env: dict[str, str]) -> int | None:
    """The peak RSS of one run of ``argv`` as GNU time reports it (``wait4`` on our own child would count the
    pages it shared with this process before exec); None without /usr/bin/time."""
    if not Path("/usr/bin/time").exists():
        return None
    with tempfile.NamedTemporaryFile("r") as out:
        subprocess.run(
            ["/usr/bin/time", "-f", "%M", "-o", out.name, *argv],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=True,
        )
        return int(out.read().split()[-1])


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


def _client_row(home: Path, session: str, size: int, stream_mb: int, framed_rate: float) -> dict[str, Any]:
    """The same stream read by ``executor.client`` (the framed stream too since the client switched from ndjson, but
    an event model per chunk and httpx underneath), beside the thin CLI's rate."""
    from executor.client import Client

    with Client(socket=home / "service.sock", timeout_s=_TIMEOUT_S) as client:
        started = time.perf_counter()
        received = 0
        with client.stream_exec(session, f"head -c {size} /dev/zero", approvals="none") as events:
            for event in events:
                if event.kind == "chunk":
                    received += len(event.data)
        rate = received / (time.perf_counter() - started) / 1e6
    return _row(
        f"{stream_mb} MB stream through executor.client (framed, an event per chunk)",
        "MB/s",
        rate,
        framed_rate,
        "-",
        None,
        "raw: the framed stream the CLI reads (same service, same session)",
    )


def _as_installed(env: dict[str, str], home: Path) -> dict[str, str]:
    """``env`` with Python's bytecode cache on, as an installed CLI has it (``pip install`` compiles the package):
    a host that sets ``PYTHONDONTWRITEBYTECODE`` (CI images do) would otherwise make every measured call compile
    each module from source. The cache goes under ``home`` (``PYTHONPYCACHEPREFIX``), never into the checkout; the
    warm-up runs fill it."""
    installed = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    installed["PYTHONPYCACHEPREFIX"] = str(home / "pycache")
    return installed


def run(*, iters: int = 30, stream_mb: int = 200) -> list[dict[str, Any]]:
    """Measure; the rows in ``just bench``'s format."""
    home = Path(tempfile.mkdtemp(prefix="exb-", dir="/tmp"))
    rows: list[dict[str, Any]] = []
    env = _as_installed(cli_env(home), home)
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
            # The in-process CLI takes seconds a call: fewer of those, interleaved all the same.
            counts = {"thin": iters, "docker": iters, "inprocess": max(5, iters // 3)}
            order = [key for key in variants for _ in range(counts[key])]
            random.Random(7).shuffle(order)  # interleaved: a noisy neighbour hits every variant alike
            for key in order:
                times[key].append(_timed(variants[key], env))
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
                    f"p95 {p95['thin']:.1f} ms vs docker exec {p95['docker']:.1f} ms; {iters} each, interleaved; "
                    "bytecode cached, as installed",
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
                    f"p95 {p95['inprocess']:.1f} ms; {counts['inprocess']} calls",
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
            for _ in range(3):
                for key, argv in stream.items():
                    rates[key].append(size / (_timed(argv, env) / 1000) / 1e6)
            thin_rate, docker_rate = statistics.median(rates["thin"]), statistics.median(rates["docker"])
            small = [*stream["thin"][:-1], f"head -c {size // 10} /dev/zero"]
            rss = (_peak_rss_kib(small, env), _peak_rss_kib(stream["thin"], env))
            rss_note = (
                f"CLI peak RSS {rss[0] / 1024:.1f} MiB at {stream_mb // 10} MB, "
                f"{rss[1] / 1024:.1f} MiB at {stream_mb} MB"
                if rss[0] is not None and rss[1] is not None
                else "no /usr/bin/time: RSS not measured"
            )
            rows.append(
                _row(
                    f"{stream_mb} MB stream to the CLI's stdout via the service",
                    "MB/s",
                    thin_rate,
                    docker_rate,
                    ">= 1x docker exec",
                    thin_rate >= docker_rate,
                    rss_note,
                )
            )
            rows.append(_client_row(home, name, size, stream_mb, thin_rate))
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
