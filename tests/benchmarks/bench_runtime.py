"""The price of the second wall: the same measurements under runc and under gVisor (runsc), side by side.

Not a test. :func:`run` opens one session per variant in a private ``$EXECUTOR_HOME`` and returns rows
``{section, name, unit, executor, raw, ratio, target, met, note}`` for each of ``runc/socket`` (the default),
``runc/exec`` (the transport runsc needs, under runc: separates the transport's cost from the runtime's) and
``runsc/exec``:

- open: ``open_session`` (container create + start + the agent's first answer) then ``stop_session``;
- round trip of ``true`` through the agent client, beside a raw Engine API exec of ``true`` in the same container;
- throughput of ``head -c N /dev/zero`` through the agent client into a counting sink.

runsc rows are left out (with a note) where the engine has no runsc runtime.
"""

from __future__ import annotations

import secrets
import statistics
import time
from pathlib import Path
from typing import Any, Final

import trio

from executor.config import Settings, load_settings
from executor.sandbox.agent.client import open_agent_client
from executor.sandbox.docker import DockerBackend
from executor.session import open_executor
from executor.tools.bash import build_run_spec
from tests.benchmarks._rawdocker import RawDocker, socket_path
from tests.benchmarks.bench_exec import _NullSink, _p95, _row

__all__ = ["run"]

_SECTION: Final = "6 runtimes"
_VARIANTS: Final = (("runc", "socket"), ("runc", "exec"), ("runsc", "exec"))
_MB: Final = 1_000_000


def _settings(home: Path, runtime: str, transport: str) -> Settings:
    return load_settings(
        overrides={
            "home": str(home),
            "agent": {"transport": "auto" if runtime == "runsc" else transport},
            "profiles": {"default": {"runtime": runtime}},
        }
    )


async def _variant(
    home: Path, runtime: str, transport: str, *, iters: int, opens: int, mb: int
) -> list[dict[str, Any]]:
    label = f"{runtime}/{transport}"
    settings = _settings(home, runtime, transport)
    owner = "bench-rt-" + secrets.token_hex(4)
    rows: list[dict[str, Any]] = []
    async with open_executor(settings) as ex:
        backend = ex.backend
        assert isinstance(backend, DockerBackend)
        profile = settings.profile()
        open_ms: list[float] = []
        for _ in range(opens + 1):  # the first one warms the image and agent caches
            began = time.perf_counter()
            info = await backend.open_session(profile=profile, profile_name="default", owner=owner)
            elapsed = (time.perf_counter() - began) * 1000
            await backend.stop_session(info.id)
            open_ms.append(elapsed)
        open_ms = open_ms[1:]
        rows.append(
            _row(_SECTION, f"open_session, {label}: median", "ms", statistics.median(open_ms), None, note=f"n={opens}")
        )
        info = await backend.open_session(profile=profile, profile_name="default", owner=owner)
        raw = RawDocker(socket_path(settings.docker.base_url))
        try:
            async with open_agent_client(await backend.connect(info.id)) as client:
                spec = build_run_spec("true", settings=settings.bash, profile=profile)
                agent_ms: list[float] = []
                raw_ms: list[float] = []
                for i in range(iters + 3):
                    began = time.perf_counter()
                    result = await client.run(spec, _NullSink())
                    elapsed = (time.perf_counter() - began) * 1000
                    if result.exit_code != 0:
                        raise RuntimeError(f"{label}: true ended {result.cause}")
                    timing = await trio.to_thread.run_sync(raw.run, info.container_id, "true")
                    if i >= 3:
                        agent_ms.append(elapsed)
                        raw_ms.append(timing.total * 1000)
                med, raw_med = statistics.median(agent_ms), statistics.median(raw_ms)
                rows.append(
                    _row(
                        _SECTION,
                        f"true round trip, {label}: median",
                        "ms",
                        med,
                        raw_med,
                        note=f"n={iters}; p95 {_p95(agent_ms):.2f} (raw exec {_p95(raw_ms):.2f})",
                    )
                )
                sink = _NullSink()
                spec = build_run_spec(f"head -c {mb * _MB} /dev/zero", settings=settings.bash, profile=profile)
                began = time.perf_counter()
                result = await client.run(spec, sink)
                seconds = time.perf_counter() - began
                if result.exit_code != 0 or sink.nbytes != mb * _MB:
                    raise RuntimeError(f"{label}: throughput run ended {result.cause} with {sink.nbytes} bytes")
                rows.append(_row(_SECTION, f"{mb} MB /dev/zero, {label}: throughput", "MB/s", mb / seconds, None))
        finally:
            raw.close()
            with trio.CancelScope(shield=True), trio.move_on_after(60):
                await backend.stop_session(info.id)
    return rows


async def _main(iters: int, opens: int, mb: int, home: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    async with open_executor(load_settings(overrides={"home": str(home)})) as ex:
        assert isinstance(ex.backend, DockerBackend)
        registered = await ex.backend.runtimes()
    for runtime, transport in _VARIANTS:
        if runtime not in registered:
            rows.append(_row(_SECTION, f"{runtime}/{transport}", "", None, None, note="the engine has no such runtime"))
            continue
        rows += await _variant(home, runtime, transport, iters=iters, opens=opens, mb=mb)
    return rows


def run(*, iters: int = 50, opens: int = 5, mb: int = 100, home: Path) -> list[dict[str, Any]]:
    """Run the comparison (its own trio loop) in ``home`` and return its rows."""
    return trio.run(_main, iters, opens, mb, home)
