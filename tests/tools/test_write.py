"""The write tool (executor/tools/write.py): prepare, review, execute once.

Most tests drive the real fileops code: the agent's C source compiled with a standalone main and run as a local
process on real files, through a client that speaks the same ``run(spec, sink, argv=...)`` as the agent client.
Path rejections use a client that only records calls, to prove nothing reached the agent.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

import executor.tools.write as write_module
from executor.config import Profile, WriteSettings, load_settings
from executor.errors import (
    ActionConsumed,
    AgentProtocolError,
    ChangedSinceReview,
    ConfigError,
    ContentRejected,
    PathRejected,
    UnsafeTarget,
    WriteFailed,
)
from executor.models import CaptureSink, RunResult, RunSpec
from executor.testing.agent import build_fileops_standalone
from executor.tools.write import AGENT_PATH, AgentRunner, PreparedWrite, WriteTool, render_diff


class RecordingClient:
    """Records every call; answers like an agent that is not built (no JSON, exit 2)."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    async def run(self, spec: RunSpec, sink: CaptureSink, *, argv: list[str] | None = None) -> RunResult:
        self.calls.append(list(argv or []))
        sink.feed("stderr", b"executor-agent: fs-stat: not built\n")
        return _result(2, 0.0, 0, 36)


class LocalAgentClient:
    """Runs the standalone fileops binary as a local process for each ``/.executor/agent fs-...`` argv."""

    def __init__(self, binary: Path) -> None:
        self.binary = binary
        self.calls: list[list[str]] = []
        self.specs: list[RunSpec] = []

    async def run(self, spec: RunSpec, sink: CaptureSink, *, argv: list[str] | None = None) -> RunResult:
        assert argv is not None and argv[0] == AGENT_PATH
        self.calls.append(list(argv))
        self.specs.append(spec)
        start = time.monotonic()
        with trio.fail_after(spec.timeout_ms / 1000 if spec.timeout_ms else 30):
            proc = await trio.run_process(
                [str(self.binary), *argv[1:]],
                stdin=spec.stdin if isinstance(spec.stdin, bytes) else b"",
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
        sink.feed("stdout", proc.stdout)
        sink.feed("stderr", proc.stderr)
        return _result(proc.returncode, (time.monotonic() - start) * 1000, len(proc.stdout), len(proc.stderr))


def _result(code: int, ms: float, out: int, err: int) -> RunResult:
    return RunResult(
        cause="exited",
        exit_code=code,
        signal=None,
        duration_ms=ms,
        cpu_ms=0.0,
        max_rss_kb=0,
        stream_bytes={"stdout": out, "stderr": err},
    )


@pytest.fixture(scope="module")
def binary() -> Iterator[Path]:
    """The fileops standalone binary, built once for this module."""
    out = Path(tempfile.mkdtemp(prefix="write-tool-"))
    try:
        yield build_fileops_standalone(out)
    finally:
        shutil.rmtree(out, ignore_errors=True)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture
def client(binary: Path) -> LocalAgentClient:
    return LocalAgentClient(binary)


def make_tool(
    client: AgentRunner,
    ws: Path,
    *,
    allow_outside_workspace: bool = False,
    builtin_denials: bool = True,
    **settings: int,
) -> WriteTool:
    profile = Profile(workspace=str(ws), home=str(ws.parent / "home"))
    return WriteTool(
        client,
        profile,
        WriteSettings.model_validate(settings),
        allow_outside_workspace=allow_outside_workspace,
        builtin_denials=builtin_denials,
    )


@pytest.fixture
def tool(client: LocalAgentClient, ws: Path) -> WriteTool:
    return make_tool(client, ws)


# ---------------------------------------------------------------- before any container call


@pytest.mark.parametrize(
    "path",
    ["a\0b", "a\nb", "a\rb", "../escape", "x/../../escape", "p" * 5000, "/etc/passwd", ".git/hooks/pre-commit", ""],
)
async def test_rejected_paths_never_reach_the_agent(path: str, ws: Path) -> None:
    """NUL, newline, CR, '..' escapes, a 5,000-character path, outside paths and denials never reach the agent."""
    recorder = RecordingClient()
    tool = make_tool(recorder, ws)
    with pytest.raises(PathRejected):
        await tool.prepare(path, b"content")
    assert recorder.calls == []


async def test_oversized_content_never_reaches_the_agent(ws: Path) -> None:
    """Content above write.max_bytes is refused before any agent call, naming the setting."""
    recorder = RecordingClient()
    tool = make_tool(recorder, ws, max_bytes=10)
    with pytest.raises(ContentRejected, match=r"^the content is 11 bytes, above the 10-byte cap \(write.max_bytes\)"):
        await tool.prepare("f", b"x" * 11)
    assert recorder.calls == []


async def test_agent_without_json_is_a_protocol_error(ws: Path) -> None:
    """An agent that answers without JSON (an unbuilt stub) raises AgentProtocolError quoting its stderr."""
    tool = make_tool(RecordingClient(), ws)
    with pytest.raises(AgentProtocolError, match="no JSON \\(exit 2\\): 'executor-agent: fs-stat: not built'"):
        await tool.prepare("f", b"x")


# ---------------------------------------------------------------- prepare and execute


async def test_create_new_file(tool: WriteTool, client: LocalAgentClient, ws: Path) -> None:
    """A new file is reviewed as missing, shown as an all-added diff, then written byte-exact with the new mode."""
    content = b"line one\nline two\n"
    prepared = await tool.prepare("new.txt", content)
    assert prepared.path == f"{ws}/new.txt"
    assert prepared.creates
    assert prepared.reviewed.kind == "missing"
    assert prepared.content_sha256 == hashlib.sha256(content).hexdigest()
    assert prepared.diff.splitlines()[:3] == ["--- /dev/null", f"+++ b{ws}/new.txt", "@@ -0,0 +1,2 @@"]
    result = await tool.execute(prepared, content)
    assert (ws / "new.txt").read_bytes() == content
    assert stat.S_IMODE((ws / "new.txt").stat().st_mode) == 0o644
    assert result.created and result.verified == "name"
    assert result.state.sha256 == prepared.content_sha256
    assert [c[1] for c in client.calls] == ["fs-stat", "fs-write"]
    assert content not in b"".join(a.encode() for a in client.calls[-1])  # content travels on stdin
    assert client.specs[-1].stdin == content


async def test_replace_keeps_mode_and_shows_diff(tool: WriteTool, ws: Path) -> None:
    """Replacing a 0755 script shows the change as a diff and keeps 0755."""
    script = ws / "run.sh"
    script.write_bytes(b"#!/bin/sh\necho old\n")
    script.chmod(0o755)
    prepared = await tool.prepare("run.sh", b"#!/bin/sh\necho new\n")
    assert "-echo old\n+echo new\n" in prepared.diff
    assert prepared.reviewed.kind == "regular" and prepared.reviewed.mode == 0o755
    result = await tool.execute(prepared, b"#!/bin/sh\necho new\n")
    assert script.read_bytes() == b"#!/bin/sh\necho new\n"
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    assert result.mode_kept and not result.created


async def test_binary_content_is_byte_exact_and_summarised(tool: WriteTool, ws: Path) -> None:
    """Content with NUL and 0xff bytes is written exactly; the review summarises it instead of dumping it."""
    content = b"\x00\xff\xfe" * 1000 + b"\x00"
    prepared = await tool.prepare("blob.bin", content)
    assert prepared.binary
    assert "\x00" not in prepared.diff and "3001 bytes" in prepared.diff
    await tool.execute(prepared, content)
    assert (ws / "blob.bin").read_bytes() == content


async def test_large_file_up_to_the_cap(client: LocalAgentClient, ws: Path) -> None:
    """A file of exactly write.max_bytes goes through and reads back exactly."""
    tool = make_tool(client, ws, max_bytes=4 << 20)
    content = os.urandom(4 << 20)
    prepared = await tool.prepare("big.bin", content)
    result = await tool.execute(prepared, content)
    assert (ws / "big.bin").read_bytes() == content
    assert result.state.size == 4 << 20


async def test_diff_is_bounded(client: LocalAgentClient, ws: Path) -> None:
    """A long diff is cut at write.diff_max_lines with a note saying how much was left out."""
    tool = make_tool(client, ws, diff_max_lines=10)
    prepared = await tool.prepare("long.txt", b"".join(b"line %d\n" % i for i in range(100)))
    lines = prepared.diff.splitlines()
    assert len(lines) == 11
    assert lines[-1] == "[... 93 more diff lines not shown (write.diff_max_lines = 10)]"
    assert prepared.diff_truncated


async def test_executing_twice_is_refused(tool: WriteTool, ws: Path) -> None:
    """A prepared write executes once; the second attempt raises ActionConsumed and writes nothing."""
    prepared = await tool.prepare("f.txt", b"first")
    await tool.execute(prepared, b"first")
    (ws / "f.txt").write_bytes(b"edited later")
    with pytest.raises(ActionConsumed, match=r"already executed; prepare it again"):
        await tool.execute(prepared, b"first")
    assert (ws / "f.txt").read_bytes() == b"edited later"


async def test_different_content_is_refused(tool: WriteTool, client: LocalAgentClient, ws: Path) -> None:
    """Content whose hash is not the prepared hash is refused before the agent runs, without consuming the action."""
    prepared = await tool.prepare("f.txt", b"reviewed content")
    with pytest.raises(ChangedSinceReview, match=r"is not the content prepared for"):
        await tool.execute(prepared, b"other content")
    assert [c[1] for c in client.calls] == ["fs-stat"]
    await tool.execute(prepared, b"reviewed content")
    assert (ws / "f.txt").read_bytes() == b"reviewed content"


async def test_altered_or_foreign_prepared_write_is_refused(
    tool: WriteTool, client: LocalAgentClient, ws: Path
) -> None:
    """A prepared write altered after prepare, or issued by another tool, does not execute."""
    prepared = await tool.prepare("f.txt", b"x")
    altered = prepared.model_copy(update={"path": f"{ws}/other.txt"})
    with pytest.raises(ActionConsumed, match="not prepared by this session's write tool, or was altered"):
        await tool.execute(altered, b"x")
    other_tool = make_tool(client, ws)
    with pytest.raises(ActionConsumed, match="not prepared by this session's write tool"):
        await other_tool.execute(prepared, b"x")
    assert not (ws / "other.txt").exists() and not (ws / "f.txt").exists()


async def test_file_changed_between_prepare_and_execute_is_refused(tool: WriteTool, ws: Path) -> None:
    """A change by someone else after review refuses the write; their content stays and no staging file is left."""
    target = ws / "f.txt"
    target.write_bytes(b"version 1\n")
    prepared = await tool.prepare("f.txt", b"mine\n")
    target.write_bytes(b"version 2\n")
    with pytest.raises(ChangedSinceReview, match=r"changed since it was reviewed .*nothing was written"):
        await tool.execute(prepared, b"mine\n")
    assert target.read_bytes() == b"version 2\n"
    assert [p.name for p in await trio.Path(ws).iterdir()] == ["f.txt"]
    with pytest.raises(ActionConsumed):
        await tool.execute(prepared, b"mine\n")


async def test_file_created_after_review_is_refused(tool: WriteTool, ws: Path) -> None:
    """A file reviewed as missing that someone creates before execute is kept, not overwritten."""
    prepared = await tool.prepare("f.txt", b"mine")
    (ws / "f.txt").write_bytes(b"theirs")
    with pytest.raises(ChangedSinceReview):
        await tool.execute(prepared, b"mine")
    assert (ws / "f.txt").read_bytes() == b"theirs"


async def test_symlink_target_refused_at_prepare(tool: WriteTool, ws: Path, tmp_path: Path) -> None:
    """A symlink as the target is refused at prepare; what it points to is untouched."""
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"keep")
    (ws / "link").symlink_to(outside)
    with pytest.raises(UnsafeTarget, match=r"link is a symbolic link; writes never follow symlinks"):
        await tool.prepare("link", b"pwned")
    assert outside.read_bytes() == b"keep"


async def test_symlinked_parent_refused_naming_component(tool: WriteTool, ws: Path, tmp_path: Path) -> None:
    """A symlinked parent directory is refused, naming that component."""
    (tmp_path / "elsewhere").mkdir()
    (ws / "sub").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafeTarget, match=rf"^{ws}/sub is a symbolic link"):
        await tool.prepare("sub/f.txt", b"x")
    assert list((tmp_path / "elsewhere").iterdir()) == []


async def test_symlink_swapped_in_after_review_is_refused(tool: WriteTool, ws: Path, tmp_path: Path) -> None:
    """A parent directory replaced by a symlink between prepare and execute is refused at execute."""
    (ws / "sub").mkdir()
    prepared = await tool.prepare("sub/f.txt", b"x")
    (tmp_path / "elsewhere").mkdir()
    (ws / "sub").rmdir()
    (ws / "sub").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafeTarget, match=rf"^{ws}/sub is a symbolic link"):
        await tool.execute(prepared, b"x")
    assert list((tmp_path / "elsewhere").iterdir()) == []


@pytest.mark.parametrize("kind", ["fifo", "directory"])
async def test_non_regular_target_refused(tool: WriteTool, ws: Path, kind: str) -> None:
    """A fifo or a directory as the target is an UnsafeTarget."""
    if kind == "fifo":
        os.mkfifo(ws / "t")
    else:
        (ws / "t").mkdir()
    with pytest.raises(UnsafeTarget, match=f"t is a {kind}, not a regular file"):
        await tool.prepare("t", b"x")


async def test_missing_parent_directory_is_a_write_failure(tool: WriteTool) -> None:
    """A parent directory that does not exist fails with WriteFailed telling to create it."""
    with pytest.raises(WriteFailed, match=r"does not exist; create it first"):
        await tool.prepare("no/such/dir/f.txt", b"x")


async def test_outside_workspace_allowed_when_switched_on(client: LocalAgentClient, ws: Path, tmp_path: Path) -> None:
    """With allow_outside_workspace, a path outside the workspace is prepared and written."""
    tool = make_tool(client, ws, allow_outside_workspace=True)
    target = tmp_path / "outside.txt"
    prepared = await tool.prepare(str(target), b"ok")
    await tool.execute(prepared, b"ok")
    assert target.read_bytes() == b"ok"


async def test_deadline_grows_with_content(tool: WriteTool, client: LocalAgentClient) -> None:
    """The agent-enforced deadline of a write grows with its content size."""
    small = await tool.prepare("a", b"x")
    await tool.execute(small, b"x")
    big = await tool.prepare("b", b"y" * (3 << 20))
    await tool.execute(big, b"y" * (3 << 20))
    deadlines = [s.timeout_ms or 0 for s in client.specs if s.stdin is not None]
    assert deadlines[1] - deadlines[0] == 3_000


# ---------------------------------------------------------------- pure pieces


def test_render_diff_marks_prefix_only_reviews() -> None:
    """A diff over a prefix of a larger file says it covers only the first bytes."""
    diff, truncated, binary = render_diff(
        "/w/f",
        b"a\n",
        b"b\n",
        old_size=10_000_000,
        new_size=2,
        old_sha256=None,
        new_sha256="0" * 64,
        max_lines=50,
    )
    assert truncated and not binary
    assert diff.endswith("[the diff covers only the first 262144 bytes of each side]\n")


def test_render_diff_cuts_long_lines() -> None:
    """A single huge line (a minified file) is cut, so the review stays bounded in bytes."""
    diff, _, _ = render_diff(
        "/w/f",
        None,
        b"x" * 100_000 + b"\n",
        old_size=0,
        new_size=100_001,
        old_sha256=None,
        new_sha256="0" * 64,
        max_lines=50,
    )
    assert len(diff) < 2_200
    assert "+" + "x" * 1_999 + " [... 98001 more characters on this line]\n" in diff


def test_render_diff_identical_content() -> None:
    """Writing the same content says so instead of showing an empty diff."""
    diff, _, _ = render_diff(
        "/w/f", b"same\n", b"same\n", old_size=5, new_size=5, old_sha256=None, new_sha256="0" * 64, max_lines=5
    )
    assert diff == "No change: /w/f already holds this content.\n"
    # A new empty file is a creation, not "no change" (it said both: created, and already holds this content).
    created, _, _ = render_diff(
        "/w/e", None, b"", old_size=0, new_size=0, old_sha256=None, new_sha256="0" * 64, max_lines=5
    )
    assert created == "--- /dev/null\n+++ b/w/e\n(an empty file)\n"


def test_prepared_write_is_frozen() -> None:
    """A prepared write cannot be edited in place."""
    prepared = PreparedWrite.model_validate(
        {
            "token": "t",
            "requested_path": "f",
            "path": "/w/f",
            "content_sha256": "0" * 64,
            "size": 0,
            "reviewed": {"kind": "missing"},
            "diff": "",
            "diff_truncated": False,
            "binary": False,
        }
    )
    with pytest.raises(ValueError, match="frozen"):
        prepared.path = "/etc/passwd"  # type: ignore[misc]  # the point of the test


def test_public_names() -> None:
    """The module exports exactly its public names."""
    assert sorted(write_module.__all__) == [
        "AGENT_PATH",
        "AgentRunner",
        "PreparedWrite",
        "WriteResult",
        "WriteTool",
        "render_diff",
    ]


# ---------------------------------------------------------------- write settings: effect, default, rejection


async def test_operation_deadline_follows_the_settings(client: LocalAgentClient, ws: Path) -> None:
    """Each agent file operation gets write.op_timeout_ms plus write.op_timeout_ms_per_mib per MiB of content."""
    tool = make_tool(client, ws, op_timeout_ms=5_000, op_timeout_ms_per_mib=700)
    content = b"x" * (3 * 1024 * 1024)
    prepared = await tool.prepare("big.bin", content)
    await tool.execute(prepared, content)
    write_spec = client.specs[-1]
    assert write_spec.timeout_ms == 5_000 + 3 * 700
    assert WriteSettings().op_timeout_ms == 120_000 and WriteSettings().op_timeout_ms_per_mib == 1_000


def test_diff_line_and_source_caps_follow_the_settings() -> None:
    """Long diff lines are cut at diff_line_chars, and a diff of a prefix says how many bytes it covers."""
    new = b"y" * 500 + b"\n"
    diff, truncated, _binary = render_diff(
        "/w/f",
        b"",
        new,
        old_size=0,
        new_size=5000,
        old_sha256=None,
        new_sha256="0" * 64,
        max_lines=50,
        max_line_chars=100,
        source_bytes=501,
    )
    assert "[... 401 more characters on this line]" in diff
    assert "first 501 bytes of each side" in diff
    assert truncated
    assert (WriteSettings().diff_line_chars, WriteSettings().diff_source_bytes) == (2_000, 256 * 1024)


@pytest.mark.parametrize(
    ("field", "value"),
    [("diff_line_chars", 10), ("diff_source_bytes", 1), ("op_timeout_ms", 0), ("op_timeout_ms_per_mib", -1)],
)
def test_bad_write_settings_are_rejected_at_load(field: str, value: int) -> None:
    """Out-of-range write settings fail at load, naming the field."""
    with pytest.raises(ConfigError, match=rf"write\.{field}"):
        load_settings(overrides={"write": {field: value}})


async def test_new_files_get_the_configured_mode(client: LocalAgentClient, ws: Path) -> None:
    """A file the write creates gets write.new_file_mode; an existing file keeps its own mode."""
    tool = make_tool(client, ws, new_file_mode=0o600)
    prepared = await tool.prepare("fresh.txt", b"new\n")
    await tool.execute(prepared, b"new\n")
    assert (ws / "fresh.txt").stat().st_mode & 0o7777 == 0o600
    (ws / "kept.sh").write_text("old\n")
    (ws / "kept.sh").chmod(0o750)
    again = await tool.prepare("kept.sh", b"new\n")
    await tool.execute(again, b"new\n")
    assert (ws / "kept.sh").stat().st_mode & 0o7777 == 0o750


_STATE = {"kind": "regular", "mode": 0o644, "uid": 1000, "gid": 1000, "dev": 1, "ino": 2, "size": 5, "mtime_ns": 3}


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        (None, r"what /w/f holds now could not be looked at"),
        ({**_STATE, "kind": "missing", "size": 0, "sha256": None}, r"/w/f no longer exists"),
        ({**_STATE, "kind": "directory", "sha256": None}, r"/w/f is now a directory"),
        ({**_STATE, "sha256": None}, r"/w/f now holds 5 bytes the session user cannot read back"),
        ({**_STATE, "sha256": "a" * 64}, r"/w/f now holds exactly the content prepared \(sha256 a{16}…\)$"),
        ({**_STATE, "sha256": "b" * 64}, r"/w/f now holds 5 bytes with sha256 b{16}…, not the content prepared"),
    ],
)
def test_a_committed_write_error_says_what_the_path_holds(now: object, expected: str) -> None:
    """After the rename, the error states the target's actual state, never that nothing was written."""
    from executor.tools.write import _on_disk_now

    said = _on_disk_now(now, "/w/f", "a" * 64)
    assert said.startswith("the rename happened")
    assert re.search(expected, said)
    assert "nothing" not in said


async def test_prepare_finds_a_git_dir_not_named_dot_git(client: LocalAgentClient, ws: Path) -> None:
    """A write into a folder holding git's marks (HEAD and objects/) names that git directory; others do not."""
    gd = ws / "gd"
    (gd / "hooks").mkdir(parents=True)
    (gd / "objects").mkdir()
    (gd / "HEAD").write_text("ref: refs/heads/main\n")
    (ws / "src" / "hooks").mkdir(parents=True)
    (ws / "app").mkdir()
    (ws / "app" / "HEAD").write_text("not git: no objects folder\n")
    tool = make_tool(client, ws)
    assert (await tool.prepare("gd/hooks/pre-commit", b"x")).git_dir == str(gd)
    assert (await tool.prepare("gd/config", b"x")).git_dir == str(gd)
    assert (await tool.prepare("app/config", b"x")).git_dir is None
    before = len(client.calls)
    plain = await tool.prepare("src/hooks/useThing.ts", b"x")
    assert plain.git_dir is None
    probes = [call for call in client.calls[before:] if call[1] == "fs-stat" and call[2] != plain.path]
    assert probes == [[AGENT_PATH, "fs-stat", f"{ws}/src/HEAD"]]  # one probe for the 'hooks' parent, then no more
    before = len(client.calls)
    await tool.prepare("notes.txt", b"x")
    assert [call[1] for call in client.calls[before:]] == ["fs-stat"]  # no candidate: no probe at all
