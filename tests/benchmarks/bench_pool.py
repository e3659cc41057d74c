"""The warm pool, side by side with cold opens in the same run (``python -m tests.benchmarks --sections pool``).

Rows:

- claim to the first ``true`` result, warm (a ready pooled session) against cold (a profile identical but for its
  pool, so it opens cold), interleaved, median and p95;
- 50 concurrent opens against a pool of 8: how many succeeded, the most creations seen at once, the wall time, and
  the containers left after the executor closed (counted by label on the engine);
- a pool emptied by ``docker rm -f``: seconds until it holds 8 ready sessions again, by itself;
- memory of an idle pooled session (the engine's cgroup figure for its container, median of 3).
"""

from __future__ import annotations

import secrets
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import trio

from executor.config import Settings, load_settings
from executor.sandbox.docker import DockerBackend
from executor.session import Executor, open_executor
from tests.benchmarks.bench_exec import _p95, _row

_SECTION = "7 pool"
_POOL = 8
_OPENS = 50


async def _until(check: Any, within: float) -> float:
    began = time.perf_counter()
    with trio.fail_after(within):
        while True:
            if check():
                return time.perf_counter() - began
            await trio.sleep(0.02)


def _stats(executor: Executor, profile: str) -> Any:
    return next(item for item in executor.pool_stats() if item.profile == profile)


async def _containers(executor: Executor, profile: str) -> list[dict[str, Any]]:
    backend = executor.backend
    assert isinstance(backend, DockerBackend)
    api = backend.engine.client.api
    rows: list[dict[str, Any]] = await trio.to_thread.run_sync(
        lambda: api.containers(all=True, filters={"label": f"executor.profile={profile}"})
    )
    return rows


def _settings(home: Path, warm: str, cold: str, size: int) -> Settings:
    return load_settings(
        overrides={
            "home": str(home),
            "default_profile": warm,
            "profiles": {warm: {"pool": {"size": size}}, cold: {}},
        }
    )


async def _claim_vs_cold(home: Path, iters: int, rows: list[dict[str, Any]]) -> None:
    warm, cold = "bench-warm-" + secrets.token_hex(3), "bench-cold-" + secrets.token_hex(3)
    warm_ms: list[float] = []
    cold_ms: list[float] = []
    steady_ms: list[float] = []
    async with open_executor(_settings(home, warm, cold, 1)) as executor:
        for warmup in (warm, cold):  # first-use costs of the process (regex compiles, policy parse)
            async with executor.open_session(profile=warmup) as session:
                await session.bash("true")
        for _ in range(iters):
            # A quiet pool: one ready, nothing being created, so the claim measures the claim.
            await _until(lambda: _stats(executor, warm).ready == 1 and _stats(executor, warm).creating == 0, 120)
            for profile, sink in ((warm, warm_ms), (cold, cold_ms)):
                began = time.perf_counter()
                async with executor.open_session(profile=profile) as session:
                    result = await session.bash("true")
                    sink.append((time.perf_counter() - began) * 1000)
                    assert result.outcome == "completed"
                    assert session.info.pooled == (profile == warm)
                    if profile == warm:
                        began = time.perf_counter()
                        await session.bash("true")
                        steady_ms.append((time.perf_counter() - began) * 1000)
    warm_median, cold_median = statistics.median(warm_ms), statistics.median(cold_ms)
    rows.append(
        _row(
            _SECTION,
            f"claim -> first `true`, warm vs cold open, median ({iters} each, interleaved)",
            "ms",
            warm_median,
            cold_median,
            target="<= 50",
            met=warm_median <= 50,
        )
    )
    rows.append(_row(_SECTION, "claim -> first `true`, warm vs cold open, p95", "ms", _p95(warm_ms), _p95(cold_ms)))
    rows.append(
        _row(
            _SECTION,
            "the claimed session's second `true`, median (the pipeline's floor under this run's load)",
            "ms",
            statistics.median(steady_ms),
            None,
        )
    )


async def _burst(home: Path, rows: list[dict[str, Any]]) -> None:
    warm, cold = "bench-burst-" + secrets.token_hex(3), "bench-unused-" + secrets.token_hex(3)
    settings = _settings(home, warm, cold, _POOL)
    done: list[str] = []
    failed: list[str] = []
    async with open_executor(settings) as executor:
        filled = await _until(lambda: _stats(executor, warm).ready == _POOL, 300)
        print(f"  pool of {_POOL} filled in {filled:.1f}s", file=sys.stderr)

        async def one() -> None:
            try:
                async with executor.open_session() as session:
                    done.append((await session.bash("true")).outcome)
            except Exception as exc:  # counted, not raised: the row says how many failed
                failed.append(type(exc).__name__)

        began = time.perf_counter()
        with trio.fail_after(900):
            async with trio.open_nursery() as nursery:
                for _ in range(_OPENS):
                    nursery.start_soon(one)
        wall = time.perf_counter() - began
        stats = _stats(executor, warm)
        rows.append(
            _row(
                _SECTION,
                f"{_OPENS} concurrent opens against a pool of {_POOL}: succeeded",
                "",
                float(done.count("completed")),
                None,
                target=f"= {_OPENS}",
                met=done.count("completed") == _OPENS,
                note=f"failures: {failed or 'none'}; wall {wall:.1f}s",
            )
        )
        limit = settings.profile().pool.max_creating
        rows.append(
            _row(
                _SECTION,
                f"{_OPENS} concurrent opens: most creations at once (pool.max_creating={limit})",
                "",
                float(stats.max_creating_seen),
                None,
                target=f"<= {limit}",
                met=stats.max_creating_seen <= limit,
            )
        )
        await _until(lambda: _stats(executor, warm).ready == _POOL, 300)
        # Memory of an idle pooled session, while the pool is full and quiet.
        backend = executor.backend
        assert isinstance(backend, DockerBackend)
        api = backend.engine.client.api
        ready = [row["Id"] for row in await _containers(executor, warm) if row["State"] == "running"][:3]
        usages: list[float] = []
        for container in ready:
            sample: dict[str, Any] = await trio.to_thread.run_sync(partial(api.stats, container, stream=False))
            memory = sample.get("memory_stats") or {}
            cache = (memory.get("stats") or {}).get("inactive_file", 0)
            usages.append((memory.get("usage", 0) - cache) / 1024**2)
        if usages:
            rows.append(
                _row(
                    _SECTION,
                    "memory of an idle pooled session (cgroup usage less inactive file cache, median of 3)",
                    "MiB",
                    statistics.median(usages),
                    None,
                    note=f"samples {[round(u, 2) for u in usages]} MiB",
                )
            )
        # A pool emptied behind its back refills by itself.
        emptied = await _containers(executor, warm)
        retired = _stats(executor, warm).retired
        began = time.perf_counter()
        for row in emptied:
            await trio.to_thread.run_sync(partial(api.remove_container, row["Id"], force=True))
        await _until(
            lambda: _stats(executor, warm).retired >= retired + len(emptied) and _stats(executor, warm).ready == _POOL,
            300,
        )
        rows.append(
            _row(
                _SECTION,
                f"pool of {_POOL} emptied by `docker rm -f`: refilled by itself in",
                "s",
                time.perf_counter() - began,
                None,
                met=True,
            )
        )
    async with open_executor(load_settings(overrides={"home": str(home)}), pool="off") as after:
        left = await _containers(after, warm)
    rows.append(
        _row(
            _SECTION,
            "containers left by label after every session closed and the executor exited",
            "",
            float(len(left)),
            None,
            target="= 0",
            met=not left,
        )
    )


async def _main(iters: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="executor-bench-pool-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir(mode=0o700)
        began = time.perf_counter()
        await _claim_vs_cold(home, iters, rows)
        print(f"  claim vs cold done in {time.perf_counter() - began:.1f}s", file=sys.stderr)
        began = time.perf_counter()
        await _burst(home, rows)
        print(f"  burst, memory and refill done in {time.perf_counter() - began:.1f}s", file=sys.stderr)
    return rows


def run(iters: int = 12) -> list[dict[str, Any]]:
    """Run the pool benchmark (its own trio loop) and return its rows."""
    return trio.run(_main, iters)
