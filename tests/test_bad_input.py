"""Bad input on every surface: a documented exit code or error, one clear line, nothing lost, nothing left running.

The corpus runs against the CLI as a real subprocess, the Python API, and MCP over stdio as a real subprocess speaking
JSON-RPC; sessions are real containers on the engine. Each input here once printed a traceback and exited 1, hung,
or read until MemoryError.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from executor.artifacts import ArtifactStore
from executor.config import load_settings
from executor.errors import (
    ArtifactError,
    CommandRejected,
    ConfigError,
    ExecutorError,
    SessionNotFound,
    SessionRejected,
)
from executor.gate.policy import load_policy
from executor.journal import read_journal_file
from executor.session import open_executor
from executor.testing.cli import Ran, cli, serving

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

BAD_BYTE = os.fsdecode(b"\xff")
"""An undecodable byte as the CLI's argv sees it (a lone surrogate); subprocess passes it on as the raw byte."""


def _one_error_line(ran: Ran, code: int) -> str:
    """The run exited ``code`` with exactly one ``error: ...`` line on stderr, no traceback, nothing on stdout."""
    assert ran.code == code, (ran.code, ran.stdout, ran.stderr)
    assert "Traceback" not in ran.stderr
    lines = ran.stderr.splitlines()
    assert len(lines) == 1, ran.stderr
    assert lines[0].startswith("error: ") and len(lines[0]) > len("error: ") + 10
    assert ran.stdout == ""
    return lines[0]


def _json_error(ran: Ran, code: int) -> dict[str, Any]:
    """Under --json: one error object on stdout with the same exit code, nothing on stderr."""
    assert ran.code == code, (ran.code, ran.stdout, ran.stderr)
    data = ran.json()
    assert (data["outcome"], data["exit_code"]) == ("error", code)
    assert "Traceback" not in ran.stderr
    return data


def _containers_of(home: Path) -> list[str]:
    """Containers (any state) of the sessions this home opened, found by the executor's session label."""
    found: list[str] = []
    for folder in sorted((home / "sessions").glob("s-*")):
        listed = subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"label=executor.session={folder.name}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        found += listed.stdout.split()
    return found


def _assert_journals_parse(home: Path) -> None:
    """Every journal of the home parses; at most a torn last line (a full disk mid-append) is refused."""
    settings = load_settings(overrides={"home": str(home)})
    for path in (home / "sessions").glob("s-*/journal.ndjson"):
        read = read_journal_file(path, settings=settings.journal, mode="lenient")
        lines = len(path.read_bytes().splitlines())
        assert read.records, path
        assert all(issue.line == lines for issue in read.issues), (path, read.issues)


@pytest.fixture
def toml_files(tmp_path: Path) -> dict[str, Path]:
    """Settings files that once crashed or hung the loader: 100,000 nested arrays, inline tables, dotted keys (tomllib
    took minutes) or a dotted table header, and a symlink to /dev/zero."""
    made = {
        "deep": "a = " + "[" * 100_000 + "\n",
        "inline": "a = " + "{b = " * 100_000 + "1" + "}" * 100_000 + "\n",
        "dotted": "a" + ".a" * 100_000 + " = 1\n",
        "header": "[a" + ".a" * 100_000 + "]\nx = 1\n",
    }
    files = {}
    for name, text in made.items():
        files[name] = tmp_path / f"{name}.toml"
        files[name].write_text(text)
    zero = tmp_path / "zero.toml"
    zero.symlink_to("/dev/zero")
    return {**files, "zero": zero}


# --- the CLI, no session needed ------------------------------------------------------------------------------


def test_cli_bad_settings_files_exit_2_with_one_line(home: Path, toml_files: dict[str, Path]) -> None:
    """A TOML file nested 100,000 deep or a symlink to /dev/zero is a bad-input error, never a traceback or a hang."""
    deep = _one_error_line(cli(home, "--config", str(toml_files["deep"]), "config", "show"), 2)
    assert "nested too deeply" in deep
    zero = _one_error_line(cli(home, "--config", str(toml_files["zero"]), "config", "show"), 2)
    assert "not a regular file" in zero
    assert "nested too deeply" in _one_error_line(cli(home, "config", "check", str(toml_files["deep"])), 2)
    for name in ("inline", "dotted", "header"):
        path = str(toml_files[name])
        assert "nested too deeply" in _one_error_line(cli(home, "--config", path, "config", "show"), 2)
    _json_error(cli(home, "--json", "--config", str(toml_files["zero"]), "exec", "--", "true"), 2)


def test_cli_endless_inputs_stop_at_their_cap(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`write --from /dev/zero` and `exec --stdin /dev/zero` stop reading at the cap and name the setting."""
    monkeypatch.setenv("EXECUTOR_WRITE__MAX_BYTES", "64k")
    monkeypatch.setenv("EXECUTOR_BASH__MAX_STDIN_BYTES", "64k")
    write = _one_error_line(cli(home, "write", "x.bin", "--from", "/dev/zero"), 2)
    stdin = _one_error_line(cli(home, "exec", "--stdin", "/dev/zero", "--", "cat"), 2)
    piped = cli(home, "--json", "exec", "--stdin", "-", "--", "cat", stdin=b"y" * (65536 + 1))
    assert "write.max_bytes" in write and "bash.max_stdin_bytes" in stdin
    assert "bash.max_stdin_bytes" in _json_error(piped, 2)["error"]
    assert _containers_of(home) == []


# --- the CLI with sessions on the engine ------------------------------------------------------------------------


def test_cli_bad_session_names_and_undecodable_text_exit_2(base_image: str, home: Path) -> None:
    """A traversal-shaped session name and invalid UTF-8 in the command or --env are refused with one line, and the
    throwaway sessions they started are gone."""
    traversal = _one_error_line(cli(home, "exec", "--session", "x/../../etc", "--", "true"), 2)
    assert "session name 'x/../../etc'" in traversal
    _one_error_line(cli(home, "session", "stop", "x/../../etc"), 2)
    unknown = _one_error_line(cli(home, "exec", "--image", "no-such-image", "--", "true"), 2)
    assert _json_error(cli(home, "--json", "image", "build", "no-such-image"), 2)["error"] == unknown[len("error: ") :]
    assert "not valid UTF-8" in _one_error_line(cli(home, "exec", "--", f"echo {BAD_BYTE}"), 2)
    env = _json_error(cli(home, "--json", "exec", "--env", f"A={BAD_BYTE}", "--", "true"), 2)
    assert "environment value of 'A' is not valid UTF-8" in env["error"]
    assert not (home / "etc").exists() and not Path("/etc/journal.ndjson").exists()
    assert _containers_of(home) == []
    _assert_journals_parse(home)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("exec", "--cwd", "/nonexistent", "--", "true"), "cwd '/nonexistent' cannot be entered in the session"),
        (("exec", "--cwd", "/etc/hostname", "--", "true"), "cwd '/etc/hostname' cannot be entered"),
        (("exec", "--image", "no-such-image", "--", "true"), "no image named 'no-such-image'"),
        (("exec", "--profile", "nope", "--", "true"), "no profile named 'nope'; known profiles: ci, default"),
        (("exec", "--session", "s-000000000000", "--", "true"), "no session 's-000000000000'; `executor session ls`"),
        (("bg", "ls", "--session", "s-000000000000"), "no session 's-000000000000'"),
        (("session", "stop", "s-000000000000"), "no session 's-000000000000'; `executor session ls` lists them"),
        (("session", "start", "--image", "no-such-image"), "known image folders: "),
        (("exec", "--image", "../containers/json", "--", "true"), "'../containers/json' is not an image reference"),
        (("session", "start", "--image", "a/../../b:1"), "'a/../../b:1' is not an image reference"),
        (("image", "rm", "Bad Name"), "'Bad Name' is not an image reference"),
        (("session", "start", "--name", "x", "--idle", "soon"), "--idle: 'soon' is not an idle limit"),
        (("output", "read", "s-000000000000.a1"), "no artifact 's-000000000000.a1'"),
    ],
)
def test_cli_what_does_not_exist_exits_2_naming_it(
    base_image: str, home: Path, args: tuple[str, ...], needle: str
) -> None:
    """A cwd, image, profile, session or artifact that does not exist is one error line naming it and exit 2 (the
    same under --json), never 125 or a traceback, and no session is left behind."""
    ran = cli(home, *args)
    narration = "".join(line + "\n" for line in ran.stderr.splitlines() if not line.startswith("==> "))
    line = _one_error_line(Ran(ran.code, ran.stdout, narration), 2)
    assert needle in line
    assert needle in _json_error(cli(home, "--json", *args), 2)["error"]
    assert _containers_of(home) == []


@pytest.fixture(scope="module")
def stored_home(tmp_path_factory: pytest.TempPathFactory, base_image: str) -> tuple[Path, str]:
    """A home holding one finished artifact of 20,000 lines (its throwaway session is gone); its id."""
    home = tmp_path_factory.mktemp("stored") / "home"
    home.mkdir()
    ran = cli(home, "--json", "exec", "--", "seq 1 20000")
    assert ran.code == 0, ran.stderr
    return home, ran.json()["artifact_id"]


def _damaged_copy(stored: tuple[Path, str], tmp_path: Path) -> tuple[Path, str, Path]:
    home, artifact_id = stored
    copy = tmp_path / "damaged"
    shutil.copytree(home, copy, symlinks=True)
    session_id = artifact_id.split(".")[0]
    return copy, artifact_id, copy / "sessions" / session_id / "artifacts" / artifact_id


def _sql(home: Path, statement: str) -> None:
    with sqlite3.connect(home / "artifacts.sqlite3") as conn:
        conn.execute(statement)


@pytest.mark.parametrize(
    "damage",
    ["truncated stream", "missing stream", "missing stream rows", "bad stream row", "corrupt index"],
)
def test_cli_damaged_store_exits_125_with_one_line(stored_home: tuple[Path, str], tmp_path: Path, damage: str) -> None:
    """A stream file truncated or removed, index rows removed or garbled, a corrupted SQLite file: reading and
    searching answer with one line and 125 (the executor's own state), never a traceback, a wrong page or a hang."""
    home, artifact_id, folder = _damaged_copy(stored_home, tmp_path)
    if damage == "truncated stream":
        os.truncate(folder / "stdout", 1000)
    elif damage == "missing stream":
        (folder / "stdout").unlink()
    elif damage == "missing stream rows":
        _sql(home, "DELETE FROM streams")
    elif damage == "bad stream row":
        _sql(home, "UPDATE streams SET state = '{not json'")
    else:
        with (home / "artifacts.sqlite3").open("r+b") as index:
            index.seek(8192)
            index.write(os.urandom(8192))
    read = _one_error_line(cli(home, "output", "read", artifact_id, "--start-line", "19990"), 125)
    search = _json_error(cli(home, "--json", "output", "search", artifact_id, "--pattern", "19999"), 125)
    assert artifact_id in read or "artifact index" in read
    assert search["error"] == read.removeprefix("error: ")


def test_cli_traceback_only_under_debug(stored_home: tuple[Path, str], tmp_path: Path) -> None:
    """--debug adds the traceback of an executor failure; the last line is still the one error line."""
    home, artifact_id, folder = _damaged_copy(stored_home, tmp_path)
    (folder / "stdout").unlink()
    ran = cli(home, "--debug", "output", "read", artifact_id)
    assert ran.code == 125
    assert "Traceback" in ran.stderr and ran.stderr.splitlines()[-1].startswith("error: artifact ")


# --- a home on a full file system ----------------------------------------------------------------------------


@pytest.fixture
def small_home(tmp_path: Path) -> Iterator[Path]:
    """A home on its own 16 MiB tmpfs (root only), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mount = tmp_path / "mnt"
    mount.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)], capture_output=True, timeout=30, check=False
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        home = mount / "home"
        home.mkdir()
        yield home
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, timeout=30, check=False)


def test_cli_full_disk_mid_capture_exits_125_and_keeps_what_was_written(base_image: str, small_home: Path) -> None:
    """ENOSPC while a command's output is captured: one line and 125; the command is killed, not left running
    unobserved; the bytes written are kept; the journal parses; the session stops cleanly."""
    name = "bad-input-full-disk"
    try:
        warm = cli(
            small_home, "exec", "--session", name, "--create", "--", "true"
        )  # the agent, the index and its WAL first
        assert warm.code == 0, warm.stderr
        filler = small_home.parent / "filler"
        stats = os.statvfs(small_home)
        filler.write_bytes(b"\0" * max(0, stats.f_bavail * stats.f_frsize - 96 * 1024))
        ran = cli(small_home, "exec", "--session", name, "--view", "--", "seq 1 200000; exec sleep 300")
        filler.unlink()
        line = _one_error_line(ran, 125)
        assert "space" in line, line
        alive = cli(small_home, "exec", "--session", name, "--", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
        assert alive.code == 0, alive.stderr
        assert "sleep 300" not in alive.stdout
    finally:
        cli(small_home, "session", "stop", name)
    assert _containers_of(small_home) == []
    _assert_journals_parse(small_home)
    # Nothing lost: the captured prefix is on disk, whole from its first line.
    kept = [p for p in small_home.glob("sessions/*/artifacts/*/stdout*") if not p.name.endswith(".idx")]
    data = max((p.read_bytes() for p in kept), key=len)
    expected = b"".join(b"%d\n" % n for n in range(1, 200_001))
    assert len(data) > 1000 and expected.startswith(data[:128_000])  # the head part of a capture file is a prefix


def test_api_full_disk_mid_capture_kills_the_command(base_image: str, small_home: Path) -> None:
    """Through the Python API (the connection stays open): a capture the disk refuses is an ArtifactError, the
    command is killed at once rather than left running unobserved, and the session keeps working."""
    settings = load_settings(overrides={"home": str(small_home)})
    filler = small_home.parent / "filler"

    async def main() -> None:
        async with open_executor(settings) as ex, ex.open_session() as session:
            assert (await session.bash("true")).exit_code == 0
            stats = os.statvfs(small_home)
            filler.write_bytes(b"\0" * max(0, stats.f_bavail * stats.f_frsize - 96 * 1024))
            try:
                # The capture's own refusal, or the index's when the finish could not be recorded either.
                with pytest.raises(ArtifactError, match=r"No space left on device|database or disk is full"):
                    await session.bash("seq 1 200000; exec sleep 300")
            finally:
                filler.unlink()
            alive = await session.bash("cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
            assert alive.exit_code == 0 and alive.run is not None
            assert "sleep 300" not in alive.text

    try:
        trio.run(main)
    except BaseExceptionGroup as group:  # pragma: no cover - a failed assertion inside a nursery
        raise group.exceptions[0] from group
    assert _containers_of(small_home) == []
    _assert_journals_parse(small_home)


_KEPT_RE = re.compile(r"artifact s-[0-9a-f]+\.a[0-9]+ keeps|artifact keeps|kept in artifact|nothing was kept|is kept\)")
"""How a full-disk failure names what was kept (a run that did not start: nothing)."""
_CAPTURE_CAP = 256_000
"""``artifacts.capture_max_bytes``'s default: a longer stream keeps its head and tail."""


def _fill(home: Path, filler: Path, left: int) -> None:
    """Fill ``home``'s file system until about ``left`` bytes are free."""
    stats = os.statvfs(home)
    with filler.open("ab") as out, contextlib.suppress(OSError):
        out.write(b"\0" * max(0, stats.f_bavail * stats.f_frsize - left))


@pytest.mark.parametrize("serve", [False, True], ids=["in-process", "service"])
def test_full_disk_at_any_capture_step_never_reports_unkept_output_whole(
    base_image: str, small_home: Path, serve: bool
) -> None:
    """Whichever step of a capture a full disk stops (the stream's writes, its finalisation, the index commit, the
    journal), a run either fails with 125 and one line naming what was kept, or its artifact is finished in the
    index holding every byte the result calls whole; the next run on a freed disk works."""
    name = "dk-full-disk-steps"
    filler = small_home.parent / "filler"
    seen: set[str] = set()
    with serving(small_home) if serve else contextlib.nullcontext():
        try:
            warm = cli(small_home, "exec", "--session", name, "--create", "--", "true")
            assert warm.code == 0, warm.stderr
            # 40 KB fits under the capture cap (a linear stream renamed into place); 400 KB wraps its ring, so
            # finishing copies it out (more space again).
            # The space each step needs moves with the index's and the journal's own growth: a fine sweep.
            small = (16, 48, 96, 104, *range(112, 152, 2), 192, 256)
            for size, lefts in ((30_000, small), (300_000, (96, 256, 384, 512, 640))):
                for left_kb in lefts:
                    _fill(small_home, filler, left_kb * 1024)
                    try:
                        ran = cli(
                            small_home, "exec", "--session", name, "--json", "--",
                            f"head -c {size} /dev/urandom | base64 -w 100",
                        )  # fmt: skip
                    finally:
                        filler.unlink()
                    assert "Traceback" not in ran.stderr, ran.stderr
                    data = ran.json()
                    where = (size, left_kb, data)
                    if ran.code == 0:
                        assert data["outcome"] == "completed", where
                        index = sqlite3.connect(small_home / "artifacts.sqlite3")
                        try:
                            row = index.execute(
                                "SELECT status, bytes_stored FROM artifacts WHERE id = ?", (data["artifact_id"],)
                            ).fetchone()
                        finally:
                            index.close()
                        assert row is not None and row[0] == "ok", (row, where)
                        if data["stdout_whole"]:  # the artifact keeps it all too, up to the capture cap
                            assert row[1] == min(len(data["stdout"].encode()), _CAPTURE_CAP), (row, where)
                        seen.add("completed")
                    else:
                        assert (ran.code, data["outcome"]) == (125, "error"), where
                        message = data["error"]
                        assert "\n" not in message and ("space" in message or "I/O" in message), where
                        if "cannot open the artifact index" not in message:  # nothing started at all
                            assert _KEPT_RE.search(message), where
                        seen.add(
                            "stream" if "cannot store more output" in message
                            else "finalise" if "cannot finalise" in message
                            else "journal" if "journal" in message
                            else "index"
                        )  # fmt: skip
                    after = cli(small_home, "exec", "--session", name, "--", "echo ok")
                    assert (after.code, after.stdout) == (0, "ok\n"), (after.stderr, where)
        finally:
            cli(small_home, "session", "stop", name)
    # Every step was reached at least once (the sweep is not vacuous); the service's own log shifts the journal's
    # narrow window, so only the in-process sweep must have met it.
    assert {"stream", "index", "completed", *(() if serve else ("journal",))} <= seen, seen
    _assert_journals_parse(small_home)


# --- the Python API ------------------------------------------------------------------------------------------


def test_api_raises_the_executors_own_errors(
    base_image: str, home: Path, toml_files: dict[str, Path], stored_home: tuple[Path, str], tmp_path: Path
) -> None:
    """The same corpus through the Python API: each input is one of the executor's exceptions, with a clear message."""
    for path in toml_files.values():
        with pytest.raises(ConfigError, match=r"nested too deeply|not a regular file"):
            load_settings(path)
        with pytest.raises(ConfigError, match=r"nested too deeply|not a regular file"):
            load_policy(path)

    damaged, artifact_id, folder = _damaged_copy(stored_home, tmp_path)
    os.truncate(folder / "stdout", 1000)
    settings = load_settings(overrides={"home": str(damaged)})
    with ArtifactStore.open(damaged, settings.artifacts) as store:
        artifacts = store.session(artifact_id.split(".")[0])
        with pytest.raises(ArtifactError, match=r"fewer bytes than the index records"):
            artifacts.read_output(artifact_id, start_line=19_990)
        with pytest.raises(ArtifactError, match=r"fewer bytes than the index records"):
            trio.run(lambda: artifacts.search_output(artifact_id, pattern="19999", limit=5))

    async def main() -> None:
        async with open_executor(load_settings(overrides={"home": str(home)})) as ex:
            with pytest.raises(SessionRejected, match=r"session name 'x/../../etc'"):
                async with ex.attach_session("x/../../etc", create=True):
                    pass
            async with ex.open_session() as session:
                with pytest.raises(CommandRejected, match=r"the command is not valid UTF-8"):
                    await session.bash("echo \udcff")
                with pytest.raises(CommandRejected, match=r"environment value of 'A' is not valid UTF-8"):
                    await session.bash("true", env={"A": "\udcff"})
                with pytest.raises(CommandRejected, match=r"^cwd '/nonexistent' cannot be entered in the session"):
                    await session.bash("true", cwd="/nonexistent")
                with pytest.raises(CommandRejected, match=r"^cwd '/nonexistent' cannot be entered in the session"):
                    await session.exec(["true"], cwd="/nonexistent")
                with pytest.raises(CommandRejected, match=r"^cwd '/workspace/gone' cannot be entered in the session"):
                    await session.start_task("sleep 1", cwd="gone")
                with pytest.raises(SessionNotFound, match=r"^no session s-000000000000; `executor session ls`"):
                    async with ex.attach_session("s-000000000000", create=True):
                        pass
                assert (await session.bash("echo still fine")).exit_code == 0

    try:
        trio.run(main)
    except BaseExceptionGroup as group:  # pragma: no cover - a failed assertion inside a nursery
        raise group.exceptions[0] from group
    assert _containers_of(home) == []
    _assert_journals_parse(home)
    assert issubclass(SessionRejected, ExecutorError) and issubclass(SessionRejected, ValueError)


# --- MCP over stdio ------------------------------------------------------------------------------------------


class _Stdio:
    """``executor mcp --transport stdio`` as a subprocess, spoken to line by line."""

    def __init__(self, home: Path, **settings: str) -> None:
        env = {**os.environ, "EXECUTOR_HOME": str(home), **settings}
        env.pop("EXECUTOR_CONFIG", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "executor.cli", "mcp", "--transport", "stdio"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )

    def send(self, line: str | dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((line if isinstance(line, str) else json.dumps(line)).encode() + b"\n")
        self.proc.stdin.flush()

    def receive(self, timeout_s: float = 60.0) -> dict[str, Any]:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        assert ready, "the server did not answer"
        data = json.loads(self.proc.stdout.readline())
        assert isinstance(data, dict)
        return data


def test_mcp_stdio_answers_invalid_messages(base_image: str, home: Path) -> None:
    """A request whose params is a string, or a line that is not JSON, gets a JSON-RPC error with the request's id
    (the client never hangs); the server keeps serving, exits 0 when stdin closes and leaves nothing running."""
    server = _Stdio(home)
    try:
        server.send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            }
        )
        assert "result" in server.receive()
        server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        server.send({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": "oops"})
        assert server.receive() == {
            "jsonrpc": "2.0",
            "id": 2,
            "error": {"code": -32602, "message": "Invalid params: params must be an object, not str"},
        }
        server.send("not json {")
        parse = server.receive()
        assert (parse["id"], parse["error"]["code"]) == (None, -32700)
        server.send({"jsonrpc": "2.0", "id": "three", "method": 3})
        invalid = server.receive()
        assert (invalid["id"], invalid["error"]["code"]) == ("three", -32600)
        server.send({"jsonrpc": "2.0", "method": "notifications/bogus", "params": "x"})  # no reply, by JSON-RPC
        server.send(
            {
                "jsonrpc": "2.0",
                "id": 4,
                "method": "tools/call",
                "params": {"name": "bash", "arguments": {"command": "echo hi"}},
            }
        )
        called = server.receive()
        assert called["id"] == 4 and "hi" in json.dumps(called["result"])
        server.send(
            {
                "jsonrpc": "2.0",
                "id": 5,
                "method": "tools/call",
                "params": {"name": "bash", "arguments": {"command": "echo \udcff"}},
            }
        )
        assert server.receive() == {
            "jsonrpc": "2.0",
            "id": 5,
            "error": {
                "code": -32602,
                "message": "Invalid params: a string holds an unpaired surrogate escape, which is not Unicode text; "
                "send UTF-8",
            },
        }
    finally:
        assert server.proc.stdin is not None
        server.proc.stdin.close()
        code = server.proc.wait(timeout=120)
        assert server.proc.stderr is not None
        stderr = server.proc.stderr.read().decode("utf-8", "replace")
        server.proc.stderr.close()
        if server.proc.stdout is not None:
            server.proc.stdout.close()
    assert code == 0, stderr
    assert "Traceback" not in stderr
    assert _containers_of(home) == []
    _assert_journals_parse(home)


def test_mcp_stdio_answers_a_line_nested_200000_deep_or_endless_and_keeps_serving(base_image: str, home: Path) -> None:
    """A line nested 200,000 levels deep, or just past service.max_json_depth, and a line longer than a message may
    be each get a -32700 error naming the bound, without the parser recursing or the line being held whole; the
    next request is answered."""
    server = _Stdio(home, EXECUTOR_WRITE__MAX_BYTES="1k", EXECUTOR_BASH__MAX_COMMAND_BYTES="1024")
    try:
        server.send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            }
        )
        assert "result" in server.receive()
        server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        for depth in (200_000, 63):
            server.send('{"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"x": ' + "[" * depth)
            refused = server.receive()
            assert (refused["id"], refused["error"]["code"]) == (None, -32700), refused
            assert f"nested {depth + 2} levels deep; at most 64 (service.max_json_depth)" in refused["error"]["message"]
        server.send("[" * (3 * 1024 * 1024))  # past 4/3 of write.max_bytes + 6 x bash.max_command_bytes + 1 MiB
        endless = server.receive()
        assert endless["error"]["code"] == -32700 and "longer than" in endless["error"]["message"], endless
        server.send({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
        listed = server.receive()
        assert listed["id"] == 3 and "bash" in json.dumps(listed["result"])
    finally:
        assert server.proc.stdin is not None
        server.proc.stdin.close()
        code = server.proc.wait(timeout=120)
        assert server.proc.stderr is not None
        stderr = server.proc.stderr.read().decode("utf-8", "replace")
        server.proc.stderr.close()
        if server.proc.stdout is not None:
            server.proc.stdout.close()
    assert code == 0, stderr
    assert "Traceback" not in stderr and "RecursionError" not in stderr


def test_cli_a_cwd_out_of_the_workspace_exits_2_like_every_bad_flag(base_image: str, home: Path) -> None:
    """`--cwd ../../..` (and an absolute path into the workspace that climbs out) is bad input: exit 2, one line,
    before anything runs; under --json the same code."""
    for escaping in ("../../..", "/workspace/../etc"):
        line = _one_error_line(cli(home, "exec", "--cwd", escaping, "--", "pwd"), 2)
        assert "leads out of the workspace" in line, line
        assert (
            "leads out of the workspace"
            in _json_error(cli(home, "--json", "exec", "--cwd", escaping, "--", "pwd"), 2)["error"]
        )
    assert _containers_of(home) == []
