"""The agent's file operations (fileops.c), run as real processes on real files on the host.

The C source is compiled here with a tiny ``main`` (``-DFILEOPS_STANDALONE``): once statically, as shipped, and
once with AddressSanitizer and UndefinedBehaviorSanitizer. Every test runs against both builds.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
import struct
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from executor.testing.agent import FILEOPS_BUILDS, build_fileops_standalone

_RUN_TIMEOUT_S = 30.0


@pytest.fixture(scope="session")
def scratch() -> Iterator[Path]:
    """A world-traversable scratch root in /tmp, so that uid 1000 can run the binary too."""
    root = Path(tempfile.mkdtemp(prefix="fileops-", dir="/tmp"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session", params=sorted(FILEOPS_BUILDS))
def agent(request: pytest.FixtureRequest, scratch: Path) -> Path:
    """The standalone fileops binary, in each build."""
    out = scratch / f"build-{request.param}"
    if not out.exists():
        out.mkdir(mode=0o755)
        build_fileops_standalone(out, sanitize=request.param == "sanitized")
    return out / ("fileops-san" if request.param == "sanitized" else "fileops")


@pytest.fixture
def work(scratch: Path) -> Iterator[Path]:
    """A fresh directory for one test (no symlinks on its path: /tmp is a real directory here)."""
    path = Path(tempfile.mkdtemp(dir=scratch))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


class Run:
    """One finished fileops process: exit status, parsed JSON line and raw bytes after it."""

    def __init__(self, proc: subprocess.CompletedProcess[bytes]) -> None:
        self.rc = proc.returncode
        self.stderr = proc.stderr
        head, _, self.tail = proc.stdout.partition(b"\n")
        self.out: dict[str, Any] = json.loads(head)

    @property
    def error(self) -> str | None:
        value = self.out.get("error")
        return value if isinstance(value, str) else None


def run(agent: Path, *args: str, stdin: bytes = b"", user: int | None = None) -> Run:
    env = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:exitcode=99", "UBSAN_OPTIONS": "halt_on_error=1"}
    proc = subprocess.run(
        [str(agent), *args], input=stdin, capture_output=True, timeout=_RUN_TIMEOUT_S, env=env, user=user
    )
    assert proc.returncode in (0, 1, 2), proc.stderr.decode(errors="replace")
    assert proc.stderr == b"", proc.stderr.decode(errors="replace")
    return Run(proc)


def expect_of(state: dict[str, Any]) -> str:
    if state["kind"] == "missing":
        return "missing"
    sha = state["sha256"] or "-"
    keys = ("uid", "gid", "dev", "ino", "size", "mtime_ns")
    return f"regular:{state['mode']:o}:" + ":".join(str(state[k]) for k in keys) + f":{sha}"


def stat_of(agent: Path, path: Path) -> dict[str, Any]:
    result = run(agent, "fs-stat", str(path))
    assert result.rc == 0, result.out
    state: dict[str, Any] = result.out["state"]
    return state


def write(
    agent: Path,
    path: Path,
    content: bytes,
    *,
    expect: str | None = None,
    max_bytes: int = 1 << 20,
    extra: tuple[str, ...] = (),
    user: int | None = None,
) -> Run:
    if expect is None:
        expect = expect_of(stat_of(agent, path))
    return run(
        agent, "fs-write", str(path), "--expect", expect, "--max", str(max_bytes), *extra, stdin=content, user=user
    )


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".executor-" in p.name)


# ---------------------------------------------------------------- fs-stat


def test_stat_regular_file_reports_identity_and_digest(agent: Path, work: Path) -> None:
    """fs-stat reports a regular file's mode, owner, inode, size, mtime and the SHA-256 of its content."""
    target = work / "f.txt"
    target.write_bytes(b"hello\n")
    target.chmod(0o640)
    st = target.stat()
    state = stat_of(agent, target)
    assert state == {
        "kind": "regular",
        "mode": 0o640,
        "uid": st.st_uid,
        "gid": st.st_gid,
        "dev": st.st_dev,
        "ino": st.st_ino,
        "size": 6,
        "mtime_ns": st.st_mtime_ns,
        "sha256": hashlib.sha256(b"hello\n").hexdigest(),
    }


def test_stat_missing_and_special_kinds(agent: Path, work: Path) -> None:
    """fs-stat names missing paths, directories, fifos, symlinks and devices by kind, without a digest."""
    os.mkfifo(work / "fifo")
    (work / "dir").mkdir()
    (work / "link").symlink_to("/etc/passwd")
    kinds = {name: stat_of(agent, work / name) for name in ("nothing", "fifo", "dir", "link")}
    assert {k: v["kind"] for k, v in kinds.items()} == {
        "nothing": "missing",
        "fifo": "fifo",
        "dir": "directory",
        "link": "symlink",
    }
    assert all(v["sha256"] is None for v in kinds.values())
    assert stat_of(agent, Path("/dev/null"))["kind"] == "char"


def test_stat_refuses_symlinked_parent_naming_it(agent: Path, work: Path) -> None:
    """A symlink among the parent directories is refused and named, never followed."""
    (work / "real").mkdir()
    (work / "real" / "f").write_bytes(b"x")
    (work / "alias").symlink_to(work / "real")
    result = run(agent, "fs-stat", str(work / "alias" / "f"))
    assert result.rc == 1
    assert result.error == "symlink"
    assert result.out["component"] == str(work / "alias")
    assert result.out["message"].startswith(f"{work / 'alias'} is a symbolic link")


def test_sha256_matches_hashlib_across_block_boundaries(agent: Path, work: Path) -> None:
    """The embedded SHA-256 agrees with hashlib for lengths around the 64-byte block and padding edges."""
    for size in (0, 1, 55, 56, 63, 64, 65, 119, 120, 127, 128, 65535, 65536, 65537, 200_003):
        content = bytes((i * 7 + size) % 256 for i in range(size))
        target = work / f"f{size}"
        target.write_bytes(content)
        assert stat_of(agent, target)["sha256"] == hashlib.sha256(content).hexdigest(), size


# ---------------------------------------------------------------- fs-read


def test_read_returns_header_then_exact_bytes(agent: Path, work: Path) -> None:
    """fs-read prints a JSON header then exactly the file's bytes, with a digest when the whole file was sent."""
    content = b"a\0b\xff\n" * 3
    (work / "f").write_bytes(content)
    whole = run(agent, "fs-read", str(work / "f"), "--max", "100")
    assert whole.rc == 0
    assert (whole.out["length"], whole.out["truncated"], whole.tail) == (15, False, content)
    assert whole.out["state"]["sha256"] == hashlib.sha256(content).hexdigest()
    part = run(agent, "fs-read", str(work / "f"), "--max", "4")
    assert (part.out["length"], part.out["truncated"], part.tail) == (4, True, content[:4])
    assert part.out["state"]["sha256"] is None
    assert part.out["state"]["size"] == 15


def test_read_refuses_non_regular_and_missing(agent: Path, work: Path) -> None:
    """fs-read refuses a fifo (without blocking on it), a directory and a missing file."""
    os.mkfifo(work / "fifo")
    assert run(agent, "fs-read", str(work / "fifo"), "--max", "10").out["kind"] == "fifo"
    assert run(agent, "fs-read", str(work), "--max", "10").error == "not_regular"
    assert run(agent, "fs-read", str(work / "nothing"), "--max", "10").error == "not_found"


# ---------------------------------------------------------------- fs-write: what it writes


def test_write_creates_new_file_byte_exact_with_new_mode(agent: Path, work: Path) -> None:
    """A new file gets the exact bytes (NUL and 0xff included) and the --new-mode permission bits."""
    content = bytes(range(256)) * 40 + b"\0\xff\0"
    target = work / "new.bin"
    result = write(agent, target, content, expect="missing", extra=("--new-mode", "640"))
    assert result.rc == 0, result.out
    assert target.read_bytes() == content
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert result.out["created"] is True
    assert result.out["verified"] == "name"
    assert result.out["state"]["sha256"] == hashlib.sha256(content).hexdigest()
    assert result.out["state"]["ino"] == target.stat().st_ino
    assert leftovers(work) == []


def test_write_replaces_and_keeps_script_mode(agent: Path, work: Path) -> None:
    """Replacing a 0755 script keeps it 0755 and reports the new state."""
    target = work / "run.sh"
    target.write_bytes(b"#!/bin/sh\necho old\n")
    target.chmod(0o755)
    result = write(agent, target, b"#!/bin/sh\necho new\n")
    assert result.rc == 0, result.out
    assert stat.S_IMODE(target.stat().st_mode) == 0o755
    assert target.read_bytes() == b"#!/bin/sh\necho new\n"
    assert result.out["created"] is False
    assert result.out["mode_kept"] is True


def test_write_keeps_hard_linked_copy_unchanged(agent: Path, work: Path) -> None:
    """A hard link elsewhere keeps the old content: the write renames a new inode into place."""
    target = work / "f"
    target.write_bytes(b"old")
    os.link(target, work / "other-name")
    old_ino = target.stat().st_ino
    result = write(agent, target, b"new")
    assert result.rc == 0, result.out
    assert target.read_bytes() == b"new"
    assert (work / "other-name").read_bytes() == b"old"
    assert target.stat().st_ino != old_ino


def test_write_keeps_owner_when_permitted(agent: Path, work: Path) -> None:
    """A file owned by someone else keeps its owner and group when the writer may set them (root here)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to own a file as another user")
    target = work / "f"
    target.write_bytes(b"old")
    os.chown(target, 1234, 4321)
    result = write(agent, target, b"new")
    assert result.rc == 0, result.out
    assert (target.stat().st_uid, target.stat().st_gid) == (1234, 4321)
    assert result.out["owner_kept"] is True


def test_write_up_to_cap_and_refused_above(agent: Path, work: Path) -> None:
    """Content exactly at --max is written; one byte more is refused, leaving target and directory untouched."""
    cap = 8 << 20
    content = os.urandom(cap)
    target = work / "big"
    assert write(agent, target, content, expect="missing", max_bytes=cap).rc == 0
    assert target.read_bytes() == content
    over = write(agent, target, content + b"!", max_bytes=cap)
    assert over.error == "too_large"
    assert target.read_bytes() == content
    assert leftovers(work) == []


def test_write_refuses_content_that_is_not_the_prepared_content(agent: Path, work: Path) -> None:
    """With --content-sha256, bytes whose digest differs are refused and nothing is written."""
    target = work / "f"
    target.write_bytes(b"old")
    wrong = hashlib.sha256(b"something else").hexdigest()
    result = write(agent, target, b"new", extra=("--content-sha256", wrong))
    assert result.error == "content_mismatch"
    assert target.read_bytes() == b"old"
    assert leftovers(work) == []


# ---------------------------------------------------------------- fs-write: what it refuses


def test_write_refuses_final_symlink(agent: Path, work: Path) -> None:
    """A symlink as the target is refused and the file it points to is untouched."""
    victim = work / "victim"
    victim.write_bytes(b"keep")
    (work / "link").symlink_to(victim)
    result = write(agent, work / "link", b"pwned", expect="missing")
    assert result.error == "symlink"
    assert result.out["component"] == str(work / "link")
    assert victim.read_bytes() == b"keep"
    assert (work / "link").is_symlink()
    assert leftovers(work) == []


def test_write_refuses_symlinked_parent_naming_component(agent: Path, work: Path) -> None:
    """A symlinked parent directory is refused, the component is named and nothing lands behind it."""
    real = work / "real"
    real.mkdir()
    (work / "sub").mkdir()
    (work / "sub" / "escape").symlink_to(real)
    result = write(agent, work / "sub" / "escape" / "f", b"x", expect="missing")
    assert result.error == "symlink"
    assert result.out["component"] == str(work / "sub" / "escape")
    assert list(real.iterdir()) == []


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_write_refuses_non_regular_targets(agent: Path, work: Path, kind: str) -> None:
    """A fifo, a directory and a device are refused as targets, naming their kind."""
    if kind == "fifo":
        target = work / "fifo"
        os.mkfifo(target)
    elif kind == "directory":
        target = work / "dir"
        target.mkdir()
    else:
        target = Path("/dev/null")
    result = write(agent, target, b"x", expect="missing")
    assert result.error == "not_regular"
    assert result.out["kind"] == {"fifo": "fifo", "directory": "directory", "device": "char"}[kind]
    assert result.out["message"].startswith(f"{target} is a ")
    assert leftovers(target.parent) == []


def test_write_refuses_file_changed_since_review(agent: Path, work: Path) -> None:
    """A file modified between stat and write is refused; the other writer's content stays and nothing leaks."""
    target = work / "f"
    target.write_bytes(b"reviewed")
    reviewed = expect_of(stat_of(agent, target))
    target.write_bytes(b"changed!")  # same size: only mtime and content differ
    result = write(agent, target, b"mine", expect=reviewed)
    assert result.error == "changed_since_review"
    assert "nothing was written" in result.out["message"]
    assert target.read_bytes() == b"changed!"
    assert leftovers(work) == []


def test_write_refuses_file_that_appeared_since_review(agent: Path, work: Path) -> None:
    """A file reviewed as missing that exists at write time is refused and kept."""
    target = work / "f"
    target.write_bytes(b"someone else's")
    result = write(agent, target, b"mine", expect="missing")
    assert result.error == "changed_since_review"
    assert target.read_bytes() == b"someone else's"


def test_write_refuses_mode_change_since_review(agent: Path, work: Path) -> None:
    """A chmod since review (same content, same mtime) is a change: refused."""
    target = work / "f"
    target.write_bytes(b"x")
    reviewed = expect_of(stat_of(agent, target))
    target.chmod(0o600)
    result = write(agent, target, b"y", expect=reviewed)
    assert result.error == "changed_since_review"
    assert "mode 0644 -> 0600" in result.out["message"]


def test_write_into_read_only_mount_is_an_explicit_error(agent: Path, work: Path) -> None:
    """A write into a read-only bind mount fails with read_only, never a silent success."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a private read-only bind mount")
    (work / "f").write_bytes(b"old")
    script = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" "$1" && shift && exec "$@"'
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", str(work), "true"],
        capture_output=True,
        timeout=_RUN_TIMEOUT_S,
    )
    if probe.returncode != 0:
        pytest.skip(f"no private mounts here: {probe.stderr.decode(errors='replace').strip()}")
    expect = expect_of(stat_of(agent, work / "f"))
    proc = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
            str(work),
            str(agent),
            "fs-write",
            str(work / "f"),
            "--expect",
            expect,
            "--max",
            "100",
        ],
        input=b"new",
        capture_output=True,
        timeout=_RUN_TIMEOUT_S,
    )
    result = Run(proc)
    assert result.rc == 1
    assert result.error == "read_only"
    assert "read-only" in result.out["message"]
    assert (work / "f").read_bytes() == b"old"


def test_write_as_unprivileged_user_into_foreign_directory_is_refused(agent: Path, work: Path) -> None:
    """Run as uid 1000, a write into a root-owned directory fails with permission and writes nothing."""
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to uid 1000")
    result = write(agent, work / "f", b"x", expect="missing", user=1000)
    assert result.error == "permission"
    assert list(work.iterdir()) == []


def test_write_as_unprivileged_user_in_own_directory(agent: Path, work: Path) -> None:
    """Run as uid 1000 in a directory it owns, a replacement keeps the mode and is owned by uid 1000."""
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to uid 1000")
    os.chown(work, 1000, 1000)
    target = work / "f"
    target.write_bytes(b"old")
    os.chown(target, 1000, 1000)
    target.chmod(0o751)
    result = write(agent, target, b"new", user=1000)
    assert result.rc == 0, result.out
    assert (target.stat().st_uid, stat.S_IMODE(target.stat().st_mode)) == (1000, 0o751)


def test_unreadable_file_is_reviewed_without_digest_and_verified_by_descriptor(agent: Path, work: Path) -> None:
    """A write-only (0200) file is stated without a digest, replaced, and verified through the descriptor."""
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to uid 1000")
    os.chown(work, 1000, 1000)
    target = work / "secret"
    target.write_bytes(b"old")
    os.chown(target, 1000, 1000)
    target.chmod(0o200)
    state = run(agent, "fs-stat", str(target), user=1000).out["state"]
    assert (state["kind"], state["sha256"]) == ("regular", None)
    result = write(agent, target, b"new content", expect=expect_of(state), user=1000)
    assert result.rc == 0, result.out
    assert result.out["verified"] == "descriptor"
    assert result.out["state"]["sha256"] == hashlib.sha256(b"new content").hexdigest()
    assert target.read_bytes() == b"new content"
    assert stat.S_IMODE(target.stat().st_mode) == 0o200


def test_staging_file_removed_when_terminated_mid_write(agent: Path, work: Path) -> None:
    """SIGTERM while content is still arriving removes the staging file and leaves the target alone."""
    target = work / "f"
    target.write_bytes(b"old")
    expect = expect_of(stat_of(agent, target))
    proc = subprocess.Popen(
        [str(agent), "fs-write", str(target), "--expect", expect, "--max", "1000000"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write(b"partial")
        proc.stdin.flush()
        deadline = time.monotonic() + 10
        while not leftovers(work) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert leftovers(work), "the staging file never appeared"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == -signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    assert leftovers(work) == []
    assert target.read_bytes() == b"old"


# ---------------------------------------------------------------- arguments and paths


@pytest.mark.parametrize(
    "path",
    ["relative/f", "/", "/tmp/", "/tmp//f", "/tmp/./f", "/tmp/../etc/f", "/tmp/" + "a" * 256, "/" + "a/" * 2100],
)
def test_bad_paths_are_refused(agent: Path, path: str) -> None:
    """Relative, empty-component, dot, dot-dot, over-long component and over-long paths are refused."""
    result = run(agent, "fs-write", path, "--expect", "missing", "--max", "10", stdin=b"x")
    assert result.rc == 1
    assert result.error == "bad_path"


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["fs-nope", "/tmp/x"],
        ["fs-stat"],
        ["fs-read", "/tmp/x"],
        ["fs-read", "/tmp/x", "--max", "99999999999"],
        ["fs-write", "/tmp/x", "--max", "10"],
        ["fs-write", "/tmp/x", "--expect", "regular:644:0", "--max", "10"],
        ["fs-write", "/tmp/x", "--expect", "missing", "--max", "-1"],
        ["fs-write", "/tmp/x", "--expect", "missing", "--max", "10", "--new-mode", "99"],
        ["fs-write", "/tmp/x", "--expect", "missing", "--max", "10", "--content-sha256", "ABC"],
        ["fs-write", "/tmp/x", "--expect", "missing", "--max", "10", "--max", "10"],
    ],
)
def test_usage_errors_exit_2_with_json(agent: Path, args: list[str]) -> None:
    """Malformed command lines exit 2 with a JSON usage error and touch nothing."""
    result = run(agent, *args)
    assert (result.rc, result.error) == (2, "usage")


def test_write_refuses_a_file_the_user_could_not_write_in_place(agent: Path, work: Path) -> None:
    """After chmod -w the write is refused with permission although the folder is writable; the file is unchanged."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run the agent as another user")
    work.chmod(0o777)
    target = work / "ro.txt"
    target.write_bytes(b"original")
    os.chown(target, 1000, 1000)
    target.chmod(0o444)
    result = write(agent, target, b"replaced", user=1000)
    assert (result.rc, result.error) == (1, "permission"), result.out
    assert "not writable by the session user" in result.out["message"]
    assert "chmod u+w" in result.out["message"]  # its owner can change its mode
    assert target.read_bytes() == b"original"
    assert leftovers(work) == []
    # Another user's file: chmod would fail too, so the advice is to write elsewhere.
    os.chown(target, 0, 0)
    target.chmod(0o644)
    theirs = write(agent, target, b"replaced", user=1000)
    assert (theirs.rc, theirs.error) == (1, "permission"), theirs.out
    assert "owned by uid 0" in theirs.out["message"] and "chmod" not in theirs.out["message"], theirs.out
    assert target.read_bytes() == b"original"


def test_write_with_parents_creates_missing_folders(agent: Path, work: Path) -> None:
    """--parents creates the missing folders on the way; without it a missing folder is not_found."""
    target = work / "a" / "b" / "f.txt"
    refused = write(agent, target, b"x", expect="missing")
    assert (refused.rc, refused.error) == (1, "not_found")
    made = write(agent, target, b"x", expect="missing", extra=("--parents",))
    assert made.rc == 0, made.out
    assert target.read_bytes() == b"x"
    assert stat.S_ISDIR((work / "a" / "b").stat().st_mode)


# ---------------------------------------------------------------- fs-unpack

_MAGIC = b"XENTRY1\n"


def _entry(kind: bytes, path: bytes, *, mode: int = 0o644, link: bytes = b"", size: int = 0) -> bytes:
    head = kind + struct.pack(">HH", mode, len(path)) + path
    if kind == b"l":
        return head + struct.pack(">H", len(link)) + link
    if kind == b"f":
        return head + struct.pack(">Q", size)
    return head


def _stream(*entries: bytes, contents: bytes = b"", count: int | None = None) -> bytes:
    return _MAGIC + struct.pack(">I", len(entries) if count is None else count) + b"".join(entries) + contents


def unpack(agent: Path, dest: Path | str, stream: bytes) -> Run:
    """fs-unpack DEST with ``stream`` on stdin; its stderr holds at most the one-line echo of its refusal."""
    env = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:exitcode=99", "UBSAN_OPTIONS": "halt_on_error=1"}
    proc = subprocess.run(
        [str(agent), "fs-unpack", "--", str(dest)], input=stream, capture_output=True, timeout=_RUN_TIMEOUT_S, env=env
    )
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode in (0, 1, 2), err
    assert "Sanitizer" not in err and "runtime error" not in err, err
    result = Run(proc)
    if result.rc == 0:
        assert err == "", err
    else:
        # one clean line, the same message as the JSON answer
        assert err == f"fs-unpack: {result.out['message']}\n", err
    return result


def test_unpack_writes_exactly_the_entries(agent: Path, work: Path) -> None:
    """A valid entry stream becomes its folders, files (bytes and modes) and symlinks under DEST, and nothing else."""
    dest = work / "dest"
    stream = _stream(
        _entry(b"d", b"a", mode=0o750),
        _entry(b"d", b"a/b", mode=0o555),
        _entry(b"f", b"a/b/f.txt", mode=0o640, size=5),
        _entry(b"f", b"top", mode=0o755, size=0),
        _entry(b"l", b"a/ln", mode=0o777, link=b"b/f.txt"),
        _entry(b"f", b"c/d/e", mode=0o600, size=3),
        contents=b"hello" + b"xyz",
    )
    result = unpack(agent, dest, stream)
    assert result.rc == 0, result.out
    assert result.out == {"ok": True, "path": str(dest), "entries": 6, "files": 3, "bytes": 8}
    assert (dest / "a/b/f.txt").read_bytes() == b"hello" and (dest / "c/d/e").read_bytes() == b"xyz"
    assert (dest / "a/ln").readlink() == Path("b/f.txt")
    assert stat.S_IMODE((dest / "a/b").stat().st_mode) == 0o555
    assert stat.S_IMODE((dest / "a/b/f.txt").stat().st_mode) == 0o640
    assert stat.S_IMODE((dest / "top").stat().st_mode) == 0o755
    found = sorted(str(p.relative_to(dest)) for p in dest.rglob("*"))
    assert found == ["a", "a/b", "a/b/f.txt", "a/ln", "c", "c/d", "c/d/e", "top"]


_BAD_STREAMS: dict[str, tuple[bytes, str, str]] = {
    "empty": (b"", "bad_stream", "ends inside its header"),
    "not a stream": (b"\x1f\x8b\x08\x00" + b"\0" * 60, "bad_stream", "not an entry stream"),
    "header cut": (_MAGIC + b"\0\0", "bad_stream", "ends inside its header"),
    "fewer entries than counted": (_stream(_entry(b"d", b"a"), count=2), "bad_stream", "ends inside an entry's header"),
    "entry header cut": (_stream(count=1) + b"f\x01", "bad_stream", "ends inside an entry's header"),
    "path past the end": (_stream(count=1) + b"d\x01\xed\x00\x10abc", "bad_stream", "ends inside an entry's path"),
    "path length cut": (_stream(count=1) + b"d\x01\xed\x00", "bad_stream", "ends inside an entry's path"),
    "size cut": (_stream(count=1) + b"f\x01\xa4\x00\x01x\x00\x00", "bad_stream", "ends inside a file's size"),
    "content past the end": (
        _stream(_entry(b"f", b"x", size=10), contents=b"abc"),
        "bad_stream",
        "ends inside a file's content",
    ),
    "size beyond any disk": (_stream(_entry(b"f", b"x", size=(1 << 62) + 1)), "bad_stream", "impossible size"),
    "link text past the end": (
        _stream(count=1) + b"l\x01\xff\x00\x01x\x00\x09ab",
        "bad_stream",
        "ends inside a symlink's text",
    ),
    "empty link text": (_stream(_entry(b"l", b"x", link=b"")), "bad_stream", "a symlink's text is empty"),
    "huge count": (_stream(count=0xFFFFFFFF), "too_large", "more than 1000000"),
    "a million counted, none sent": (_stream(count=1_000_000), "bad_stream", "ends inside an entry's header"),
    "unknown kind": (_stream(_entry(b"p", b"fifo")), "bad_stream", "want d, f or l"),
    "setuid mode": (_stream(_entry(b"f", b"x", mode=0o4755, size=0)), "bad_stream", "<= 0777"),
    "NUL in a name": (_stream(_entry(b"d", b"a\0b")), "bad_stream", "holds a NUL byte"),
    "NUL in a link": (_stream(_entry(b"l", b"x", link=b"/etc\0x")), "bad_stream", "holds a NUL byte"),
    "dot-dot": (_stream(_entry(b"f", b"../escape", size=0)), "bad_path", "not a normalised relative path"),
    "dot-dot inside": (_stream(_entry(b"f", b"a/../../escape", size=0)), "bad_path", "normalised relative"),
    "absolute": (_stream(_entry(b"f", b"/etc/cron.d/x", size=0)), "bad_path", "normalised relative"),
    "dot": (_stream(_entry(b"d", b".")), "bad_path", "normalised relative"),
    "empty component": (_stream(_entry(b"d", b"a//b")), "bad_path", "normalised relative"),
    "trailing slash": (_stream(_entry(b"d", b"a/")), "bad_path", "normalised relative"),
    "empty path": (_stream(_entry(b"d", b"")), "bad_stream", "an entry's path is empty"),
    "path longer than PATH_MAX": (_stream(_entry(b"d", b"a/" * 2048)), "bad_stream", "longer than 4095"),
    "name longer than NAME_MAX": (_stream(_entry(b"d", b"n" * 256)), "bad_path", "normalised relative"),
}


@pytest.mark.parametrize("case", sorted(_BAD_STREAMS))
def test_unpack_refuses_malformed_streams_before_writing(agent: Path, work: Path, case: str) -> None:
    """A truncated, oversized or unsafe entry stream is refused with one clean error and no entry is written."""
    stream, code, said = _BAD_STREAMS[case]
    dest = work / "dest"
    result = unpack(agent, dest, stream)
    assert (result.rc, result.error, result.out["committed"]) == (1, code, False), result.out
    assert said in result.out["message"], result.out
    if case == "content past the end":
        # contents are streamed after the headers were checked: DEST was made, and the cut file's staging removed
        assert list(dest.iterdir()) == []
    else:
        assert sorted(p.name for p in work.iterdir()) == []


def test_unpack_refuses_a_symlink_already_on_an_entry_path(agent: Path, work: Path) -> None:
    """A symlink in a path component that existed before the run is refused, not followed: nothing is written."""
    outside = work / "outside"
    outside.mkdir()
    dest = work / "dest"
    dest.mkdir()
    (dest / "safe").mkdir()
    (dest / "safe" / "cfg").symlink_to(outside)
    stream = _stream(_entry(b"f", b"first", size=1), _entry(b"f", b"safe/cfg/evil", size=1), contents=b"12")
    result = unpack(agent, dest, stream)
    assert (result.rc, result.error, result.out["kind"]) == (1, "symlink", "symlink"), result.out
    assert result.out["component"] == "safe/cfg" and "never writes through one" in result.out["message"]
    assert list(outside.iterdir()) == []
    # checked before anything was written: not even the entry before it
    assert sorted(p.name for p in dest.iterdir()) == ["safe"]


def test_unpack_refuses_a_symlink_as_dest_or_on_its_way(agent: Path, work: Path) -> None:
    """DEST that is, or passes through, a symlink is refused; the folder it names stays empty."""
    outside = work / "outside"
    outside.mkdir()
    (work / "link").symlink_to(outside)
    stream = _stream(_entry(b"f", b"x", size=1), contents=b"1")
    for dest in (work / "link", work / "link" / "sub"):
        result = unpack(agent, dest, stream)
        assert (result.rc, result.error) == (1, "symlink"), result.out
    assert list(outside.iterdir()) == []


def test_unpack_never_writes_through_a_symlink_its_own_stream_made(agent: Path, work: Path) -> None:
    """A link entry followed by a file entry under it is refused at that entry; nothing lands where the link points."""
    outside = work / "outside"
    outside.mkdir()
    dest = work / "dest"
    stream = _stream(_entry(b"l", b"ln", link=str(outside).encode()), _entry(b"f", b"ln/evil", size=1), contents=b"1")
    result = unpack(agent, dest, stream)
    assert (result.rc, result.error) == (1, "symlink"), result.out
    assert list(outside.iterdir()) == []


def test_unpack_replaces_a_symlink_at_an_entry_name_without_following_it(agent: Path, work: Path) -> None:
    """A file entry whose final name is a symlink replaces the link; the file it pointed at is untouched."""
    target = work / "precious"
    target.write_bytes(b"keep")
    dest = work / "dest"
    dest.mkdir()
    (dest / "f").symlink_to(target)
    result = unpack(agent, dest, _stream(_entry(b"f", b"f", size=3), contents=b"new"))
    assert result.rc == 0, result.out
    assert target.read_bytes() == b"keep"
    assert not (dest / "f").is_symlink() and (dest / "f").read_bytes() == b"new"


def test_unpack_refuses_bytes_after_the_last_entry(agent: Path, work: Path) -> None:
    """Bytes after the last entry's content make the run fail with bad_stream."""
    result = unpack(agent, work / "dest", _stream(_entry(b"f", b"x", size=1), contents=b"1extra"))
    assert (result.rc, result.error) == (1, "bad_stream"), result.out
    assert "bytes after its last entry" in result.out["message"]
