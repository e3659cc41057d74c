"""Benchmark of the bash path: the executor side by side with a raw Engine API ``docker exec`` on the same containers.

Not a test (pytest collects ``test_*.py`` only). :func:`run` opens 8 sessions in a private ``$EXECUTOR_HOME`` and
returns rows ``{section, name, unit, executor, raw, ratio, target, met, note}``:

1. round trip of ``true``: the agent client (transport floor) and ``session.bash`` (gate, capture, sanitize,
   journal) against create + start (hijacked stream to EOF) + inspect on the same container, interleaved;
2. output throughput (``head -c N /dev/zero``, base64 text) into a file, each run in a fresh interpreter for its
   peak RSS: agent client, full pipeline (artifact store, default cap) and raw exec;
3. 64 concurrent ``true`` over 8 sessions: trio tasks on agent clients and on pipelines vs 64 raw threads;
4. kill latency: cancelling a running ``sleep`` (CANCEL frame, the agent kills the group) until the whole group is
   gone, against an in-container ``kill`` through a raw exec.

Everything it starts is removed at the end through the backend's ``stop_session`` (the raw variants only exec into
those same containers).
"""

from __future__ import annotations

import json
import math
import os
import random
import secrets
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import trio

from executor.config import Settings, load_settings
from executor.models import RunSpec, StreamName
from executor.sandbox.agent.client import AgentClient, open_agent_client
from executor.sandbox.base import SessionInfo
from executor.session import Executor, Session, open_executor
from executor.tools.bash import build_run_spec
from tests.benchmarks._rawdocker import RawDocker, socket_path

__all__ = ["ExecBenchConfig", "run"]

_SESSIONS: Final = 8
_CONCURRENCY: Final = 64
_MB: Final = 1_000_000
_REPO: Final = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class ExecBenchConfig:
    """How much to measure (defaults keep the whole run within a few minutes on 2 cores)."""

    iters: int = 100
    """Round trips per variant (section 1)."""
    sizes_mb: tuple[int, ...] = (20, 200)
    """Output sizes for the ``/dev/zero`` payload (section 2), in MB (10^6 bytes)."""
    b64_mb: int = 100
    """Size of the base64 text payload (0 skips it)."""
    reps: int = 3
    """Runs per throughput cell (the median is reported)."""
    conc_agent: int = 8
    """Commands per task for the 64 agent-client tasks (section 3)."""
    conc_pipeline: int = 4
    """Commands per task for the 64 pipeline tasks."""
    conc_raw: int = 2
    """Execs per thread for the 64 raw threads."""
    kill_iters: int = 20
    """Kills per variant (section 4)."""
    sections: frozenset[str] = frozenset({"roundtrip", "throughput", "concurrency", "kill"})
    """Which sections to run."""
    seed: int | None = None
    """Seed of the interleaving order."""


# -- small helpers -----------------------------------------------------------------------------------------------


def _p95(values: Sequence[float]) -> float:
    """Nearest-rank 95th percentile (as in the baseline)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def _row(
    section: str,
    name: str,
    unit: str,
    executor: float | None,
    raw: float | None,
    *,
    target: str | None = None,
    met: bool | None = None,
    ratio: float | None = None,
    note: str = "",
) -> dict[str, Any]:
    if ratio is None and executor is not None and raw:
        ratio = executor / raw
    return {
        "section": section,
        "name": name,
        "unit": unit,
        "executor": None if executor is None else round(executor, 3),
        "raw": None if raw is None else round(raw, 3),
        "ratio": None if ratio is None else round(ratio, 3),
        "target": target,
        "met": met,
        "note": note,
    }


class _NullSink:
    """Counts output and drops it (round trips print nothing anyway)."""

    def __init__(self) -> None:
        self.nbytes = 0

    def feed(self, stream: StreamName, data: bytes) -> None:
        self.nbytes += len(data)


class _WatchSink:
    """Sets an event on the first stdout bytes (the victim says it is ready)."""

    def __init__(self) -> None:
        self.ready = trio.Event()

    def feed(self, stream: StreamName, data: bytes) -> None:
        if stream == "stdout" and data:
            self.ready.set()


@dataclass
class _Bench:
    settings: Settings
    ex: Executor
    infos: list[SessionInfo]
    clients: list[AgentClient]
    socket: str
    owner: str
    rng: random.Random
    rows: list[dict[str, Any]] = field(default_factory=list)

    def spec(self, command: str) -> RunSpec:
        return build_run_spec(command, settings=self.settings.bash, profile=self.settings.profile())

    @asynccontextmanager
    async def attached(self, indices: Sequence[int], ex: Executor | None = None) -> AsyncIterator[list[Session]]:
        """Pipeline sessions on the given containers, detached on exit.

        Attached only for the section that uses them: a session's journal must have one writer at a time, and the
        throughput children attach on their own.
        """
        async with AsyncExitStack() as stack:
            yield [
                await stack.enter_async_context((ex or self.ex).attach_session(self.infos[k].id, owner=self.owner))
                for k in indices
            ]


# -- sessions ----------------------------------------------------------------------------------------------------


@asynccontextmanager
async def _open_bench(settings: Settings, seed: int | None) -> AsyncIterator[_Bench]:
    owner = "bench-" + secrets.token_hex(6)
    async with open_executor(settings) as ex:
        infos: list[SessionInfo] = []

        async def open_one() -> None:
            profile_name = settings.default_profile
            info = await ex.backend.open_session(
                profile=settings.profile(profile_name), profile_name=profile_name, owner=owner
            )
            infos.append(info)

        try:
            # Opened concurrently (each is a container start); removed in `finally` through the backend.
            async with trio.open_nursery() as nursery:
                for _ in range(_SESSIONS):
                    nursery.start_soon(open_one)
            async with AsyncExitStack() as stack:
                clients = []
                for info in infos:
                    stream = await ex.backend.connect(info.id)
                    clients.append(
                        await stack.enter_async_context(
                            open_agent_client(stream, max_frame=settings.agent.max_frame_bytes)
                        )
                    )
                yield _Bench(
                    settings=settings,
                    ex=ex,
                    infos=infos,
                    clients=clients,
                    socket=socket_path(settings.docker.base_url),
                    owner=owner,
                    rng=random.Random(seed),
                )
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(60):
                async with trio.open_nursery() as nursery:
                    for info in infos:
                        nursery.start_soon(ex.backend.stop_session, info.id)
                # A session whose open was cut short after its container existed is caught by its owner label.
                for leftover in await ex.backend.list_sessions(owner=owner):
                    await ex.backend.stop_session(leftover.id)


# -- 1. round trip -----------------------------------------------------------------------------------------------


async def _roundtrip(b: _Bench, iters: int) -> None:
    client = b.clients[0]
    container = b.infos[0].container_id
    spec = b.spec("true")
    raw = RawDocker(b.socket)
    samples: dict[str, list[float]] = {"agent": [], "pipeline": [], "nofsync": [], "raw": []}
    agent_side: list[float] = []
    loop_cpu: list[float] = []  # event-loop thread CPU per pipeline call (what 64 concurrent calls contend for)
    parts: dict[str, list[float]] = {"create": [], "start": [], "eof": [], "inspect": []}
    # Diagnosis: the same pipeline with journal.fsync = "never" (another container: one journal writer each).
    quiet = b.settings.model_copy(update={"journal": b.settings.journal.model_copy(update={"fsync": "never"})})
    async with b.attached([0]) as (session,), open_executor(quiet) as ex2, b.attached([4], ex2) as (nofsync,):

        async def agent() -> float:
            began = time.perf_counter()
            result = await client.run(spec, _NullSink())
            elapsed = time.perf_counter() - began
            if result.exit_code != 0:
                raise RuntimeError(f"agent round trip ended {result.cause}")
            agent_side.append(result.duration_ms)
            return elapsed

        async def bash(on: Session) -> float:
            began, cpu = time.perf_counter(), time.thread_time()
            result = await on.bash("true")
            elapsed = time.perf_counter() - began
            if on is session:
                loop_cpu.append((time.thread_time() - cpu) * 1000)
            if result.outcome != "completed":
                raise RuntimeError(f"pipeline round trip ended {result.outcome}: {result.text[:300]}")
            return elapsed

        async def raw_exec() -> float:
            # Timed inside the worker thread: the trio hand-off is not part of the raw floor.
            timing = await trio.to_thread.run_sync(raw.run, container, "true")
            if timing.exit_code != 0:
                raise RuntimeError(f"raw exec exited {timing.exit_code}")
            parts["create"].append(timing.create)
            parts["start"].append(timing.start - timing.create)
            parts["eof"].append(timing.eof - timing.start)
            parts["inspect"].append(timing.inspect - timing.eof)
            return timing.total

        variants: dict[str, Callable[[], Any]] = {
            "agent": agent,
            "pipeline": lambda: bash(session),
            "nofsync": lambda: bash(nofsync),
            "raw": raw_exec,
        }
        try:
            for fn in variants.values():  # warm up every path (connections, caches, page cache)
                for _ in range(3):
                    await fn()
            for values in (*parts.values(), agent_side, loop_cpu):
                values.clear()
            for _ in range(iters):
                order = list(variants)
                b.rng.shuffle(order)
                for name in order:
                    samples[name].append((await variants[name]()) * 1000)
        finally:
            raw.close()

    raw_med, raw_p95 = statistics.median(samples["raw"]), _p95(samples["raw"])
    for name, label in (("agent", "agent client (AgentClient.run)"), ("pipeline", "full pipeline (session.bash)")):
        med, p95 = statistics.median(samples[name]), _p95(samples[name])
        b.rows.append(
            _row(
                "1 round trip",
                f"true, {label}: median",
                "ms",
                med,
                raw_med,
                target="<= 5 ms, ratio <= 0.1",
                met=med <= 5.0 and med / raw_med <= 0.1,
                note=f"n={iters}, min {min(samples[name]):.2f}, max {max(samples[name]):.2f}",
            )
        )
        b.rows.append(
            _row(
                "1 round trip",
                f"true, {label}: p95",
                "ms",
                p95,
                raw_p95,
                target="ratio <= 0.1",
                met=p95 / raw_p95 <= 0.1,
            )
        )
    agent_med, pipeline_med = statistics.median(samples["agent"]), statistics.median(samples["pipeline"])
    b.rows.append(
        _row(
            "1 round trip",
            "true, full pipeline against the agent client: median",
            "ms",
            pipeline_med,
            agent_med,
            target="<= 5 ms, ratio <= 1.6",
            met=pipeline_med <= 5.0 and pipeline_med / agent_med <= 1.6,
            note="raw column: the agent client's own round trip in the same run",
        )
    )
    b.rows.append(
        _row(
            "1 round trip",
            "  of which event-loop thread CPU per session.bash: median",
            "ms",
            statistics.median(loop_cpu),
            None,
            note="time.thread_time() around each call: the pipeline's own work on the trio thread (the agent "
            "client's part included); disk waits run on the journal's commit thread",
        )
    )
    b.rows.append(
        _row(
            "1 round trip",
            "  of which agent-side spawn -> exit -> drain (RunResult.duration_ms): median",
            "ms",
            statistics.median(agent_side),
            None,
            note="the rest of the agent-client round trip is framing, the unix socket and the trio client",
        )
    )
    b.rows.append(
        _row(
            "1 round trip",
            "  diagnosis: session.bash with journal.fsync=never: median",
            "ms",
            statistics.median(samples["nofsync"]),
            raw_med,
            note=f"p95 {_p95(samples['nofsync']):.2f}; same pipeline, no journal fsync (another container)",
        )
    )
    breakdown = ", ".join(f"{k} {statistics.median(v) * 1000:.2f}" for k, v in parts.items())
    b.rows.append(_row("1 round trip", "raw exec breakdown (medians, ms)", "ms", None, raw_med, note=breakdown))


# -- 2. throughput ------------------------------------------------------------------------------------------------


async def _child(variant: str, args: dict[str, Any]) -> dict[str, Any]:
    done = await trio.run_process(
        [sys.executable, "-m", "tests.benchmarks._child", variant, json.dumps(args)],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        cwd=str(_REPO),
    )
    if done.returncode != 0:
        raise RuntimeError(f"throughput child {variant} failed: {done.stderr.decode(errors='replace')[-2000:]}")
    answer: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return answer


async def _throughput(b: _Bench, cfg: ExecBenchConfig, scratch: Path) -> None:
    info = b.infos[1]
    common = {
        "home": str(b.settings.home),
        "session": info.id,
        "owner": b.owner,
        "container": info.container_id,
        "base_url": b.settings.docker.base_url,
        "out": str(scratch / "out.bin"),
    }
    cells: list[tuple[str, int, str]] = [("zero", mb, f"head -c {mb * _MB} /dev/zero") for mb in cfg.sizes_mb]
    if cfg.b64_mb:
        # 3 input bytes become 4 text bytes (plus a newline every 76): about b64_mb MB of text.
        source = cfg.b64_mb * _MB * 3 // 4
        cells.append(("base64", cfg.b64_mb, f"head -c {source} /dev/urandom | base64"))
    variants = ("agent", "pipeline", "raw")
    results: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    idle = [await _child("idle", {}) for _ in range(2)]
    for _ in range(cfg.reps):
        for cell in cells:
            order = list(variants)
            b.rng.shuffle(order)
            for variant in order:
                payload, mb, command = cell
                answer = await _child(variant, {**common, "command": command})
                results.setdefault((payload, mb, variant), []).append(answer)
                (scratch / "out.bin").unlink(missing_ok=True)
    idle_mib = statistics.median(a["rss_peak_kib"] for a in idle) / 1024
    b.rows.append(
        _row("2 throughput", "idle interpreter peak RSS (same imports)", "MiB", idle_mib, idle_mib, ratio=1.0)
    )

    def rate(answers: list[dict[str, Any]]) -> float:
        return float(statistics.median(a["bytes"] / a["seconds"] / _MB for a in answers))

    def ready(answers: list[dict[str, Any]]) -> float:
        return float(max(a["rss_ready_kib"] for a in answers)) / 1024

    def peak(answers: list[dict[str, Any]]) -> float:
        return float(max(a["rss_peak_kib"] for a in answers)) / 1024

    for payload, mb, _command in cells:
        raw = results[(payload, mb, "raw")]
        raw_rate = rate(raw)
        for variant, label in (("agent", "agent client -> file"), ("pipeline", "session.bash -> artifact store")):
            answers = results[(payload, mb, variant)]
            got = {a["bytes"] for a in answers}
            executor_rate = rate(answers)
            b.rows.append(
                _row(
                    "2 throughput",
                    f"{payload} {mb} MB, {label}",
                    "MB/s",
                    executor_rate,
                    raw_rate,
                    target=">= raw",
                    met=executor_rate >= raw_rate,
                    note=f"median of {len(answers)}; bytes {sorted(got)}; raw -> file",
                )
            )
    for variant, label in (("agent", "agent client"), ("pipeline", "session.bash")):
        peaks = {mb: peak(results[("zero", mb, variant)]) for mb in cfg.sizes_mb}
        raw_peaks = {mb: peak(results[("zero", mb, "raw")]) for mb in cfg.sizes_mb}
        small, large = min(cfg.sizes_mb), max(cfg.sizes_mb)
        for mb in sorted(peaks):
            b.rows.append(
                _row(
                    "2 throughput",
                    f"peak RSS, zero {mb} MB, {label}",
                    "MiB",
                    peaks[mb],
                    raw_peaks[mb],
                    target=f"<= idle + 8 ({idle_mib + 8:.1f})",
                    met=peaks[mb] <= idle_mib + 8,
                    note=f"VmHWM of a fresh interpreter; {label} RSS once set up, before the run: "
                    f"{ready(results[('zero', mb, variant)]):.1f} MiB (raw {ready(results[('zero', mb, 'raw')]):.1f})",
                )
            )
        b.rows.append(
            _row(
                "2 throughput",
                f"peak RSS growth {small} -> {large} MB, {label}",
                "MiB",
                peaks[large] - peaks[small],
                raw_peaks[large] - raw_peaks[small],
                target="<= 2 (flat)",
                met=peaks[large] - peaks[small] <= 2,
                ratio=float("nan"),
            )
        )


# -- 3. concurrency ------------------------------------------------------------------------------------------------


def _raw_burst(path: str, containers: list[str], per_thread: int) -> tuple[float, int, int]:
    """64 threads, thread k on container k % 8, each running ``per_thread`` raw execs; (seconds, done, errors)."""
    barrier = threading.Barrier(_CONCURRENCY + 1)
    done = [0] * _CONCURRENCY
    errors = [0] * _CONCURRENCY

    def worker(k: int) -> None:
        raw = RawDocker(path)
        try:
            barrier.wait()
            for _ in range(per_thread):
                try:
                    if raw.run(containers[k % len(containers)], "true").exit_code == 0:
                        done[k] += 1
                    else:
                        errors[k] += 1
                except (OSError, RuntimeError):
                    errors[k] += 1
        finally:
            raw.close()

    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(_CONCURRENCY)]
    for thread in threads:
        thread.start()
    barrier.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    return time.perf_counter() - began, sum(done), sum(errors)


async def _concurrency(b: _Bench, cfg: ExecBenchConfig) -> None:
    containers = [info.container_id for info in b.infos]

    async def burst(per_task: int, one: Callable[[int], Any]) -> tuple[float, int, int]:
        done = errors = 0

        async def task(k: int) -> None:
            nonlocal done, errors
            for _ in range(per_task):
                if await one(k):
                    done += 1
                else:
                    errors += 1

        began = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for k in range(_CONCURRENCY):
                nursery.start_soon(task, k)
        return time.perf_counter() - began, done, errors

    spec = b.spec("true")
    sessions: list[Session] = []

    async def via_agent(k: int) -> bool:
        result = await b.clients[k % _SESSIONS].run(spec, _NullSink())
        return result.exit_code == 0

    async def via_pipeline(k: int) -> bool:
        result = await sessions[k % _SESSIONS].bash("true")
        return result.outcome == "completed"

    measured: dict[str, tuple[float, int, int]] = {}
    order = ["agent", "pipeline", "raw"]
    b.rng.shuffle(order)
    for name in order:
        if name == "agent":
            measured[name] = await burst(cfg.conc_agent, via_agent)
        elif name == "pipeline":
            async with b.attached(range(_SESSIONS)) as attached:
                sessions[:] = attached
                for k in range(_SESSIONS):  # warm every session (attaching reads its journal head, its first
                    await via_pipeline(k)  # command fills the gate's and the index's caches): steady state only
                measured[name] = await burst(cfg.conc_pipeline, via_pipeline)
        else:
            measured[name] = await trio.to_thread.run_sync(_raw_burst, b.socket, containers, cfg.conc_raw)
    raw_s, raw_done, raw_err = measured["raw"]
    raw_rate = raw_done / raw_s
    for name, label in (("agent", "agent clients"), ("pipeline", "session.bash")):
        seconds, done, errors = measured[name]
        rate = done / seconds
        b.rows.append(
            _row(
                "3 concurrency",
                f"64 concurrent true over 8 sessions, {label}",
                "cmd/s",
                rate,
                raw_rate,
                target=">= 10x raw, 0 errors",
                met=rate >= 10 * raw_rate and errors == 0,
                note=f"{done} ok / {errors} errors in {seconds:.2f}s; raw {raw_done} ok / {raw_err} errors "
                f"in {raw_s:.2f}s (64 threads)",
            )
        )


# -- 4. kill latency ----------------------------------------------------------------------------------------------


def _procs_with(marker: bytes) -> dict[int, bytes]:
    """Host pids whose command line contains ``marker``, with their argv[0] (live ones: not zombies)."""
    found: dict[int, bytes] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes()
        except OSError:
            continue
        if marker in cmdline:
            found[int(entry.name)] = cmdline.split(b"\0", 1)[0]
    return found


def _alive(pids: list[int]) -> list[int]:
    """Of ``pids``, the ones that still exist and are not zombies."""
    left = []
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            continue
        if stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] not in (b"Z", b"X"):
            left.append(pid)
    return left


def _wait_group(marker: bytes, timeout: float = 10.0) -> list[int]:
    """Wait until the victim's two ``sleep`` children have exec'd; every pid of the group (bash included)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = _procs_with(marker)
        if sum(1 for argv0 in found.values() if argv0.endswith(b"sleep")) >= 2:
            return list(found)
        time.sleep(0.002)
    raise RuntimeError(f"the kill victim {marker!r} did not start")


def _until_gone(pids: list[int], since: float, timeout: float = 10.0) -> float:
    """Seconds from ``since`` until none of ``pids`` lives (polled every 0.2 ms; at once if already gone)."""
    deadline = time.monotonic() + timeout
    while _alive(pids):
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {_alive(pids)} survived the kill")
        time.sleep(0.0002)
    return time.perf_counter() - since


def _victim(marker: str) -> str:
    return f"sleep {marker} & sleep {marker} & echo $$; wait"


async def _kill_executor(b: _Bench, marker: str) -> tuple[float, float]:
    client = b.clients[2]
    spec = b.spec(_victim(marker))
    sink = _WatchSink()
    state: dict[str, Any] = {}
    async with trio.open_nursery() as nursery:
        scope = trio.CancelScope()

        async def victim() -> None:
            with scope:
                await client.run(spec, sink)
            state["returned"] = time.perf_counter()

        nursery.start_soon(victim)
        await sink.ready.wait()
        pids = await trio.to_thread.run_sync(_wait_group, marker.encode())
        began = time.perf_counter()
        scope.cancel()  # the kill decision
    result_s = state["returned"] - began
    gone_s = _until_gone(pids, began)
    return result_s, gone_s


def _kill_raw(path: str, container: str, marker: str) -> tuple[float, float]:
    victim_api, killer = RawDocker(path), RawDocker(path)
    try:
        exec_id = victim_api.exec_create(container, ["bash", "-c", _victim(marker)])
        sock, rest = victim_api.exec_start_socket(exec_id)
        try:
            buf = rest
            while b"\n" not in buf[8:]:
                chunk = sock.recv(4096)
                if not chunk:
                    raise RuntimeError("the raw kill victim closed its stream early")
                buf += chunk
            pgid = int(buf[8:].split(b"\n", 1)[0])
            pids = _wait_group(marker.encode())
            began = time.perf_counter()  # the kill decision
            timing = killer.run(container, f"kill -TERM -- -{pgid}")
            while sock.recv(65536):
                pass
            eof_s = time.perf_counter() - began
        finally:
            sock.close()
        if timing.exit_code != 0:
            raise RuntimeError(f"raw kill exited {timing.exit_code}")
        return eof_s, _until_gone(pids, began)
    finally:
        victim_api.close()
        killer.close()


async def _kill(b: _Bench, iters: int) -> None:
    container = b.infos[2].container_id
    samples: dict[str, list[tuple[float, float]]] = {"executor": [], "raw": []}
    for i in range(iters + 1):
        order = ["executor", "raw"]
        b.rng.shuffle(order)
        for name in order:
            marker = f"1000.{i:03d}{secrets.randbelow(10**6):06d}"
            if name == "executor":
                sample = await _kill_executor(b, marker)
            else:
                sample = await trio.to_thread.run_sync(_kill_raw, b.socket, container, marker)
            if i:  # the first round warms both paths up
                samples[name].append(sample)
    ex_result = [s[0] * 1000 for s in samples["executor"]]
    ex_gone = [max(s) * 1000 for s in samples["executor"]]
    raw_eof = [s[0] * 1000 for s in samples["raw"]]
    raw_gone = [max(s) * 1000 for s in samples["raw"]]
    b.rows.append(
        _row(
            "4 kill",
            "kill decision -> whole group gone: median",
            "ms",
            statistics.median(ex_gone),
            statistics.median(raw_gone),
            target="<= 10 ms",
            met=statistics.median(ex_gone) <= 10,
            note=f"n={iters}; executor: trio cancel -> CANCEL -> agent kills group; raw: `kill -TERM -- -PGID` exec",
        )
    )
    b.rows.append(
        _row(
            "4 kill",
            "kill decision -> whole group gone: p95",
            "ms",
            _p95(ex_gone),
            _p95(raw_gone),
            target="<= 10 ms",
            met=_p95(ex_gone) <= 10,
        )
    )
    b.rows.append(
        _row(
            "4 kill",
            "kill decision -> run result / stream EOF: median",
            "ms",
            statistics.median(ex_result),
            statistics.median(raw_eof),
            note="executor: the cancelled run() returns; raw: the victim's stream reaches EOF",
        )
    )


# -- entry point --------------------------------------------------------------------------------------------------


async def _main(cfg: ExecBenchConfig) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="executor-bench-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir(mode=0o700)
        scratch = Path(tmp) / "scratch"
        scratch.mkdir()
        settings = load_settings(overrides={"home": str(home)})
        began = time.perf_counter()
        async with _open_bench(settings, cfg.seed) as bench:
            print(f"  {_SESSIONS} sessions ready in {time.perf_counter() - began:.1f}s", file=sys.stderr)
            steps: list[tuple[str, Callable[[], Any]]] = [
                ("roundtrip", lambda: _roundtrip(bench, cfg.iters)),
                ("throughput", lambda: _throughput(bench, cfg, scratch)),
                ("concurrency", lambda: _concurrency(bench, cfg)),
                ("kill", lambda: _kill(bench, cfg.kill_iters)),
            ]
            for name, step in steps:
                if name in cfg.sections:
                    t0 = time.perf_counter()
                    await step()
                    print(f"  {name} done in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
            return bench.rows


def run(cfg: ExecBenchConfig | None = None) -> list[dict[str, Any]]:
    """Run the benchmark (its own trio loop) and return its rows."""
    return trio.run(_main, cfg or ExecBenchConfig())
