"""``just bench``: the executor's numbers side by side with the raw Docker floor, measured in the same run.

``python -m tests.benchmarks [--iters N] [--sizes 20,200] [--sections roundtrip,...,pure,runtimes,pool,cli]``
prints one table (name | executor | raw | ratio | target | met) and writes every row as JSON to
``.bench/<date>.json`` (gitignored). See ``bench_exec``, ``bench_artifacts``, ``bench_pure``, ``bench_runtime``
(runc beside gVisor's runsc), ``bench_pool`` and ``bench_cli`` (the CLI through a service beside ``docker exec``)
for what each row measures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.benchmarks.bench_cli import run as run_cli
from tests.benchmarks.bench_exec import ExecBenchConfig
from tests.benchmarks.bench_exec import run as run_exec
from tests.benchmarks.bench_pool import run as run_pool
from tests.benchmarks.bench_pure import run as run_pure
from tests.benchmarks.bench_runtime import run as run_runtimes
from tests.benchmarks.bench_service import SECTIONS as SERVICE_SECTIONS
from tests.benchmarks.bench_service import run_rows as run_service

_REPO = Path(__file__).resolve().parents[2]
_SECTIONS = (
    "roundtrip",
    "throughput",
    "concurrency",
    "kill",
    "artifacts",
    "pure",
    "runtimes",
    "pool",
    "cli",
    *SERVICE_SECTIONS,
)


def _parse(argv: list[str]) -> argparse.Namespace:
    defaults = ExecBenchConfig()
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=defaults.iters, help="round trips per variant (section 1)")
    parser.add_argument(
        "--sizes", default=",".join(map(str, defaults.sizes_mb)), help="/dev/zero output sizes in MB (section 2)"
    )
    parser.add_argument("--b64-mb", type=int, default=defaults.b64_mb, help="base64 text size in MB (0: skip)")
    parser.add_argument("--reps", type=int, default=defaults.reps, help="runs per throughput cell")
    parser.add_argument("--conc-agent", type=int, default=defaults.conc_agent, help="commands per agent task (x64)")
    parser.add_argument("--conc-pipeline", type=int, default=defaults.conc_pipeline, help="commands per pipeline task")
    parser.add_argument("--conc-raw", type=int, default=defaults.conc_raw, help="raw execs per thread (x64)")
    parser.add_argument("--kill-iters", type=int, default=defaults.kill_iters, help="kills per variant (section 4)")
    parser.add_argument(
        "--sections", default=",".join(_SECTIONS), help="comma-separated subset of " + ",".join(_SECTIONS)
    )
    parser.add_argument("--pool-iters", type=int, default=12, help="warm claims and cold opens each (section 7)")
    parser.add_argument("--cli-iters", type=int, default=30, help="CLI calls per variant (section 8)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the interleaving order")
    parser.add_argument("--json", type=Path, default=None, help="where to write the rows (default .bench/<date>.json)")
    args = parser.parse_args(argv)
    unknown = set(args.sections.split(",")) - set(_SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; choose from {','.join(_SECTIONS)}")
    return args


def _artifact_rows() -> list[dict[str, Any]]:
    """``bench_artifacts.run()`` in a fresh interpreter, so that its RSS growth is its own."""
    code = "import json; from tests.benchmarks.bench_artifacts import run; print(json.dumps(run()))"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=_REPO, capture_output=True, text=True, check=False, timeout=600
    )
    if done.returncode != 0:
        raise RuntimeError(f"bench_artifacts failed: {done.stderr[-2000:]}")
    rows: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    out = []
    for row in rows:
        value, target = row["value"], row["target"]
        met: bool | None = None
        if target == "< 5":
            met = value < 5
        elif target == "flat (~0)":
            met = value <= 2
        elif isinstance(target, str) and target.startswith("< 100 per 1,000,000 chars"):
            scanned = re.search(r"\((\d+) chars scanned\)", row["name"])
            if scanned:
                met = value < 100 * max(1, int(scanned.group(1))) / 1_000_000
        out.append(
            {
                "section": "5 artifacts",
                "name": row["name"],
                "unit": row["unit"],
                "executor": value,
                "raw": None,
                "ratio": None,
                "target": target,
                "met": met,
                "note": "",
            }
        )
    return out


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def _table(rows: list[dict[str, Any]]) -> str:
    header = ("name", "executor", "raw", "ratio", "target", "met")
    body = []
    for row in rows:
        unit = f" {row['unit']}" if row["unit"] else ""
        met = {True: "yes", False: "NO", None: "-"}[row["met"]]
        body.append(
            (
                f"[{row['section']}] {row['name']}",
                _fmt(row["executor"]) + (unit if row["executor"] is not None else ""),
                _fmt(row["raw"]) + (unit if row["raw"] is not None else ""),
                _fmt(row["ratio"]),
                row["target"] or "-",
                met,
            )
        )
    widths = [max(len(str(r[i])) for r in [header, *body]) for i in range(len(header))]
    lines = [" | ".join(str(c).ljust(w) for c, w in zip(header, widths, strict=True))]
    lines.append("-|-".join("-" * w for w in widths))
    lines += [" | ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in body]
    notes = [f"  [{row['section']}] {row['name']}: {row['note']}" for row in rows if row.get("note")]
    return "\n".join(lines) + ("\n\nnotes:\n" + "\n".join(notes) if notes else "")


def _load() -> dict[str, float]:
    one, five, fifteen = os.getloadavg()
    return {"load1": one, "load5": five, "load15": fifteen}


def main(argv: list[str] | None = None) -> int:
    """Run the chosen sections, print the table, write the JSON; 0 whether or not targets are met."""
    args = _parse(sys.argv[1:] if argv is None else argv)
    sections = frozenset(args.sections.split(","))
    cfg = ExecBenchConfig(
        iters=args.iters,
        sizes_mb=tuple(int(s) for s in args.sizes.split(",") if s),
        b64_mb=args.b64_mb,
        reps=args.reps,
        conc_agent=args.conc_agent,
        conc_pipeline=args.conc_pipeline,
        conc_raw=args.conc_raw,
        kill_iters=args.kill_iters,
        sections=sections - {"artifacts", "pure", "runtimes", "pool", "cli", *SERVICE_SECTIONS},
        seed=args.seed,
    )
    started = datetime.now(UTC)
    load_before = _load()
    began = time.perf_counter()
    rows: list[dict[str, Any]] = []
    if cfg.sections:
        print("==> bash path (8 sessions; raw docker exec on the same containers)", file=sys.stderr)
        rows += run_exec(cfg)
    if "artifacts" in sections:
        print("==> artifacts (bench_artifacts.run in a fresh interpreter)", file=sys.stderr)
        rows += _artifact_rows()
    if "pure" in sections:
        print("==> pure logic on hostile input (bench_pure.run)", file=sys.stderr)
        rows += run_pure()
    if "runtimes" in sections:
        print("==> runtimes (runc/socket, runc/exec, runsc/exec: open, round trip, throughput)", file=sys.stderr)
        with tempfile.TemporaryDirectory(prefix="executor-bench-rt-") as tmp:
            rows += run_runtimes(home=Path(tmp))
    if "pool" in sections:
        print("==> warm pool (claim vs cold open, 50 opens against 8, rm -f refill, idle memory)", file=sys.stderr)
        rows += run_pool(args.pool_iters)
    if "cli" in sections:
        print(
            "==> cli (exec through a service vs docker exec vs in-process; 200 MB to stdout; import)", file=sys.stderr
        )
        rows += run_cli(iters=args.cli_iters)
    if sections & set(SERVICE_SECTIONS):
        print("==> service through executor.client (200 MB streams, 64 client execs, RSS)", file=sys.stderr)
        rows += run_service(sorted(sections & set(SERVICE_SECTIONS)))
    elapsed = time.perf_counter() - began
    print(_table(rows))
    missed = [row for row in rows if row["met"] is False]
    print(f"\n{len(rows)} rows, {len(missed)} targets missed, {elapsed:.0f}s; load {load_before} -> {_load()}")
    path = args.json or _REPO / ".bench" / f"{started:%Y-%m-%d}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "started": started.isoformat(timespec="seconds"),
        "seconds": round(elapsed, 1),
        "host": {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()},
        "load": {"before": load_before, "after": _load()},
        "config": {**cfg.__dict__, "sections": sorted(sections)},
        "rows": rows,
    }
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")
    print(f"rows written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
