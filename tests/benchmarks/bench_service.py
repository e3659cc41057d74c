"""The service through ``executor.client``, beside raw ``docker exec`` on the same containers: a 200 MB stream to
a client's stdout (an exec stream and a folder download), 64 concurrent client execs over 8 sessions, and the
service's RSS (idle and per held session). ``just bench --sections stream,clients,service_rss``, or standalone:
``python -m tests.benchmarks.bench_service``.

It starts a real ``executor serve`` with a private home and stops it at the end. Every client stream runs in a
fresh interpreter (:data:`_CLIENT`) that writes what it receives to its stdout (``/dev/null``) and reports its own
peak RSS (``VmHWM``); an ``idle`` run of the same child (imports, a connection, no stream) is its floor, so "flat"
means the peak of a 200 MB stream stays near the floor and near the peak of a 20 MB one. Numbers, not assertions.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import trio

from executor.client import AsyncClient, Client
from executor.config import load_settings
from tests.benchmarks._rawdocker import RawDocker, socket_path
from tests.benchmarks.bench_exec import _raw_burst, _row
from tests.service.conftest import ServiceProcess, service_env

__all__ = ["SECTIONS", "run", "run_rows"]

SECTIONS: Final = ("stream", "clients", "service_rss")
_REPO: Final = Path(__file__).resolve().parents[2]
_SESSIONS: Final = 8
_CONCURRENCY: Final = 64

_CLIENT: Final = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    from executor.client import Client

    def hwm():
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])

    mode, socket, session, arg = sys.argv[1:5]
    out = sys.stdout.buffer
    got = 0
    with Client(socket=socket) as client:
        client.health()
        ready = hwm()
        began = time.perf_counter()
        if mode == "exec":
            with client.stream_exec(session, arg) as events:
                for event in events:
                    if event.kind == "chunk":
                        out.write(event.data)
                        got += len(event.data)
        elif mode == "download":
            with client.download_stream(session, arg) as chunks:
                for chunk in chunks:
                    out.write(chunk)
                    got += len(chunk)
        out.flush()
        seconds = time.perf_counter() - began
    os.write(2, json.dumps({"seconds": seconds, "bytes": got, "ready_kib": ready, "peak_kib": hwm()}).encode())
    """
)


def _status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1])
    return 0


def _rss_kib(pid: int) -> int:
    return _status_kib(pid, "VmRSS:")


def _client(mode: str, socket: Path, session: str, arg: str) -> dict[str, Any]:
    """One client stream in a fresh interpreter (stdout to /dev/null); its seconds, bytes and RSS."""
    done = subprocess.run(
        [sys.executable, "-c", _CLIENT, mode, str(socket), session, arg],
        cwd=_REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=900,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"client {mode} failed: {done.stderr[-2000:]!r}")
    result: dict[str, Any] = json.loads(done.stderr.strip().splitlines()[-1])
    return result


def _raw(socket: str, container: str, command: str) -> tuple[float, int]:
    raw = RawDocker(socket)
    try:
        with Path(os.devnull).open("wb") as out:
            began = time.perf_counter()
            timing = raw.run(container, command, out=out)
            seconds = time.perf_counter() - began
    finally:
        raw.close()
    if timing.exit_code != 0:
        raise RuntimeError(f"raw exec exited {timing.exit_code}")
    return seconds, timing.nbytes


def _stream_rows(service: ServiceProcess, client: Client, session: str, engine: str, mb: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    container = f"executor-{session}"
    size = mb * 1024 * 1024
    small = max(1, mb // 10) * 1024 * 1024
    made = client.exec(
        session,
        f"mkdir -p big small && head -c {size} /dev/urandom > big/data && head -c {small} /dev/urandom > small/data",
    )
    if made.outcome != "completed":
        raise RuntimeError(f"could not make the folders: {made.text}")
    workspace = client.exec(session, "pwd").stdout.decode().strip()
    idle = _client("idle", service.socket, session, "")
    variants = (
        ("exec stream (framed events)", "exec", f"head -c {size} /dev/zero", f"head -c {small} /dev/zero"),
        ("folder download (tar)", "download", "big", "small"),
    )
    for label, mode, arg, small_arg in variants:
        raw_command = f"head -c {size} /dev/zero" if mode == "exec" else "tar -c -C . -f - -- big"
        client_runs, raw_runs = [], []
        for _ in range(3):
            client_runs.append(_client(mode, service.socket, session, arg))
            raw_runs.append(_raw(engine, container, f"cd {workspace} && {raw_command}"))
        best = min(client_runs, key=lambda r: r["seconds"])
        mbps = best["bytes"] / best["seconds"] / 1e6
        raw_s, raw_bytes = min(raw_runs)
        raw_mbps = raw_bytes / raw_s / 1e6
        rows.append(
            _row(
                "8 service",
                f"{mb} MB {label} to a client's stdout",
                "MB/s",
                mbps,
                raw_mbps,
                target=">= 1x raw",
                met=mbps >= raw_mbps,
                note=f"best of 3 each; client {best['bytes']} B, raw docker exec {raw_bytes} B (same container)",
            )
        )
        little = _client(mode, service.socket, session, small_arg)
        growth = (best["peak_kib"] - idle["peak_kib"]) / 1024
        growth_small = (little["peak_kib"] - idle["peak_kib"]) / 1024
        rows.append(
            _row(
                "8 service",
                f"client peak RSS over its idle floor, {mb} MB {label} (vs {small // 2**20} MB)",
                "MiB",
                growth,
                growth_small,
                target="flat (grows < 16 MiB with 10x the bytes)",
                met=growth - growth_small < 16,
                ratio=None,
                note=f"idle floor {idle['peak_kib'] / 1024:.1f} MiB; raw column = the {small // 2**20} MB run",
            )
        )
    rows.append(_cp_row(service, session, engine, mb, workspace))
    return rows


def _cp_row(service: ServiceProcess, session: str, engine: str, mb: int, workspace: str) -> dict[str, Any]:
    """``executor cp SESSION:big DIR`` through the thin CLI (streamed download, spooled, checked, unpacked) beside a
    raw ``docker exec tar -c`` of the same folder to /dev/null, and the CLI's own peak RSS (``VmHWM``, sampled)."""
    env = service_env(service.home)
    runs = []
    for _ in range(3):
        with tempfile.TemporaryDirectory(prefix="exb-cp-") as dest:
            began = time.perf_counter()
            proc = subprocess.Popen(
                [sys.executable, "-m", "executor.cli", "cp", f"{session}:big", dest],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            # VmHWM sampled while it runs: wait4's ru_maxrss would carry this (large) parent's peak across execve.
            peak_kib = 0
            while proc.poll() is None:
                with contextlib.suppress(OSError):
                    peak_kib = max(peak_kib, _status_kib(proc.pid, "VmHWM:"))
                time.sleep(0.01)
            seconds = time.perf_counter() - began
            if proc.returncode != 0:
                raise RuntimeError(f"executor cp exited {proc.returncode}")
            runs.append((seconds, peak_kib))
    seconds, peak_kib = min(runs)
    raw_s, raw_bytes = min(
        _raw(engine, f"executor-{session}", f"cd {workspace} && tar -c -C . -f - -- big") for _ in range(3)
    )
    size = mb * 1024 * 1024
    return _row(
        "8 service",
        f"executor cp of a {mb} MB folder out of a session (thin CLI, unpacked to disk)",
        "MB/s",
        size / seconds / 1e6,
        raw_bytes / raw_s / 1e6,
        target=">= 1x raw",
        met=size / seconds >= raw_bytes / raw_s,
        note=f"best of 3; CLI peak RSS (VmHWM) {peak_kib / 1024:.1f} MiB for {mb} MB; raw: docker exec tar -c",
    )


def _burst(socket: Path, ids: Sequence[str], per_task: int) -> tuple[float, int, int]:
    async def burst() -> tuple[float, int, int]:
        done = errors = 0
        async with AsyncClient(socket=socket) as aclient:

            async def one(k: int) -> None:
                nonlocal done, errors
                for _ in range(per_task):
                    result = await aclient.exec(ids[k % len(ids)], "true")
                    if result.outcome == "completed":
                        done += 1
                    else:
                        errors += 1

            began = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for k in range(_CONCURRENCY):
                    nursery.start_soon(one, k)
            return time.perf_counter() - began, done, errors

    return trio.run(burst)


def run_rows(sections: Sequence[str] = SECTIONS, *, stream_mb: int = 200, per_task: int = 4) -> list[dict[str, Any]]:
    """Measure the chosen sections against one fresh service; the rows of ``just bench``."""
    home = Path(tempfile.mkdtemp(prefix="exb-", dir="/tmp"))
    service = ServiceProcess(home, service_env(home))
    service.start()
    assert service.proc is not None
    engine = socket_path(load_settings().docker.base_url)
    rows: list[dict[str, Any]] = []
    try:
        idle_mib = _rss_kib(service.proc.pid) / 1024
        with service.client() as client:
            ids = [client.create_session().id for _ in range(_SESSIONS)]
            for session in ids:
                client.exec(session, "true")
            held_mib = _rss_kib(service.proc.pid) / 1024
            if "service_rss" in sections:
                rows.append(_row("8 service", "service idle RSS (no session)", "MiB", idle_mib, None))
                rows.append(
                    _row(
                        "8 service",
                        f"service RSS per held session ({_SESSIONS} held, one command each)",
                        "MiB",
                        (held_mib - idle_mib) / _SESSIONS,
                        None,
                        note=f"{held_mib:.1f} MiB with {_SESSIONS} sessions held",
                    )
                )
            if "stream" in sections:
                rows += _stream_rows(service, client, ids[0], engine, stream_mb)
        if "clients" in sections:
            _burst(service.socket, ids, 1)  # warm every session's connection
            seconds, done, errors = min(_burst(service.socket, ids, per_task) for _ in range(3))
            raw_s, raw_done, raw_err = _raw_burst(engine, [f"executor-{sid}" for sid in ids], 2)
            rate, raw_rate = done / seconds, raw_done / raw_s
            rows.append(
                _row(
                    "8 service",
                    "64 concurrent executor.client execs (true) over 8 sessions",
                    "cmd/s",
                    rate,
                    raw_rate,
                    target=">= 10x raw, 0 errors",
                    met=rate >= 10 * raw_rate and errors == 0,
                    note=f"one AsyncClient on trio, {done} ok / {errors} errors in {seconds:.2f}s (best of 3); raw "
                    f"{raw_done} ok / {raw_err} errors in {raw_s:.2f}s (64 threads)",
                )
            )
    finally:
        service.stop()
        subprocess.run(
            [sys.executable, "-m", "executor.cli", "session", "gc"],
            env=service_env(home),
            capture_output=True,
            timeout=120,
            check=False,
        )
        shutil.rmtree(home, ignore_errors=True)
    return rows


def run(**kwargs: Any) -> dict[str, Any]:
    """Every section; the rows as one JSON-able object."""
    return {"rows": run_rows(**kwargs)}


if __name__ == "__main__":
    json.dump(run(), sys.stdout, indent=2)
    sys.stdout.write("\n")
