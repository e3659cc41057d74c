"""`executor cp` end to end (in-process CLI, real engine): folders both ways, unsafe archives, bounds, bad input."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from executor.cli.cp_cmd import parse_side
from executor.testing.cli import cli, named_session, serving
from executor.testing.files import listing, make_tree


def test_sides_parse_like_docker_cp() -> None:
    """NAME:PATH and :PATH are session sides; a path with a '/' before any ':' is a host path."""
    side = parse_side("ci:/work/x")
    assert (side.remote, side.session, side.path) == (True, "ci", "/work/x")
    side = parse_side(":out")
    assert (side.remote, side.session, side.path) == (True, None, "out")
    assert not parse_side("./a:b").remote
    assert not parse_side("/tmp/a:b").remote
    side = parse_side("ci:src/new\nline.txt")  # a newline is part of a name
    assert (side.remote, side.session, side.path) == (True, "ci", "src/new\nline.txt")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["a", "b"], "neither is"),
        (["s:a", "t:b"], "both are"),
        (["/no/such/path", "s:x"], "no such file or folder on this host"),
        ([":x", "out"], "which session"),
        (["s:", "out"], "no path after"),
    ],
)
def test_bad_sides_exit_2(home: Path, args: list[str], message: str) -> None:
    """Malformed sides and a missing host path exit 2 with one line, under --json too."""
    ran = cli(home, "cp", *args)
    assert ran.code == 2 and message in ran.stderr and "Traceback" not in ran.stderr
    as_json = cli(home, "--json", "cp", *args).json()
    assert as_json["exit_code"] == 2 and message in as_json["error"]


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_a_folder_goes_in_and_comes_back_exact(either_home: Path, tmp_path: Path) -> None:
    """A folder with nested files, modes and a symlink copies in and back out byte for byte, modes and link kept,
    in-process and over a service."""
    home = either_home
    src = make_tree(tmp_path)
    with named_session(home) as name:
        assert cli(home, "exec", "--session", name, "--create", "--", "true").code == 0
        put = cli(home, "--json", "cp", str(src), f"{name}:in")
        assert put.code == 0, put.stdout + put.stderr
        data = put.json()
        assert data["outcome"] == "completed" and data["direction"] == "to_session"
        assert (data["files"], data["bytes"], data["entries"]) == (3, 256 * 3000 + 8 + 2, 7)
        assert data["artifact_id"] and data["session"]["id"].startswith("s-") and data["session"]["name"] == name
        modes = cli(home, "exec", "--session", name, "--", "stat -c '%a %n' in/src/run.sh in/src/secret")
        assert "750 in/src/run.sh" in modes.stdout and "600 in/src/secret" in modes.stdout
        back = cli(home, "--json", "cp", "--session", name, ":in/src", str(tmp_path / "back"))
        assert back.code == 0, back.stdout + back.stderr
        assert back.json()["direction"] == "from_session" and back.json()["files"] == 3
        assert back.json()["artifact_id"]
        # The action that packed it, on both paths (the thin one said null: the download's headers named none).
        assert back.json()["action_id"] and back.json()["action_id"].startswith(back.json()["session"]["id"] + ".x")
        assert data["action_id"]
        assert listing(tmp_path / "back" / "src") == listing(src)


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_unsafe_archive_and_missing_path(either_home: Path, tmp_path: Path) -> None:
    """A folder holding a link out of it is refused (exit 2, nothing written) and a missing session path is exit 1,
    in-process and over a service."""
    home = either_home
    with named_session(home) as name:
        made = cli(home, "exec", "--session", name, "--create", "--", "mkdir -p evil && ln -s /etc evil/etc")
        assert made.code == 0, made.stderr
        refused = cli(home, "cp", f"{name}:evil", str(tmp_path / "dest"))
        assert refused.code == 2 and "refused the archive" in refused.stderr
        assert not (tmp_path / "dest").exists()
        missing = cli(home, "--json", "cp", f"{name}:nope", str(tmp_path / "dest"))
        assert missing.code == 1 and "Cannot stat" in missing.json()["text"]
        assert missing.json()["outcome"] == "failed"
        hint = re.search(r"executor (output read \S+ --stream stderr)", missing.json()["text"])
        assert hint is not None, missing.json()["text"]
        followed = cli(home, *hint.group(1).split())  # the hint, as written, shows tar's message
        assert followed.code == 0 and "Cannot stat" in followed.stdout, followed.stdout + followed.stderr
        unknown = cli(home, "cp", "nosuch-session-x:a", str(tmp_path / "dest"))
        assert unknown.code == 2 and "nosuch-session-x" in unknown.stderr


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_an_archive_that_would_write_a_git_hook_is_denied(either_home: Path, tmp_path: Path) -> None:
    """The files an upload unpacks are judged like any write: a folder holding .git/hooks/post-merge copied over a
    repository (the destination only names the folder) is denied, exit 77, and nothing lands; a plain folder copies
    in. It was exit 0: the gate read only `tar -x -C DEST`."""
    home = either_home
    evil = tmp_path / "evil"
    (evil / ".git" / "hooks").mkdir(parents=True)
    (evil / ".git" / "hooks" / "post-merge").write_text("#!/bin/sh\nid\n")
    with named_session(home) as name:
        made = cli(home, "exec", "--session", name, "--create", "--", "mkdir r && git -C r init -q")
        assert made.code == 0, made.stderr
        denied = cli(home, "--json", "cp", f"{evil}/.", f"{name}:r")
        assert denied.code == 77, denied.stdout + denied.stderr
        assert "git-hooks" in denied.json()["text"], denied.stdout
        looked = cli(home, "exec", "--session", name, "--", "test -e r/.git/hooks/post-merge")
        assert looked.code == 1
        plain = tmp_path / "plain"
        (plain / "src").mkdir(parents=True)
        (plain / "src" / "a.txt").write_text("a\n")
        assert cli(home, "cp", f"{plain}/.", f"{name}:r").code == 0


@pytest.mark.docker
@pytest.mark.timeout(240)
def test_bounds_in_process(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Archives past bash.max_stdin_bytes (in) and service.download_max_bytes (out) are exit 2 naming the setting."""
    with named_session(home) as name:
        made = cli(home, "exec", "--session", name, "--create", "--", "mkdir big && head -c 20000 /dev/urandom >big/n")
        assert made.code == 0, made.stderr
        monkeypatch.setenv("EXECUTOR_SERVICE__DOWNLOAD_MAX_BYTES", "8192")
        monkeypatch.setenv("EXECUTOR_BASH__MAX_STDIN_BYTES", "8192")
        out = cli(home, "cp", f"{name}:big", str(tmp_path / "dest"))
        assert out.code == 2 and "service.download_max_bytes" in out.stderr
        big = tmp_path / "bigin"
        big.mkdir()
        (big / "noise").write_bytes(os.urandom(20000))
        into = cli(home, "cp", str(big), f"{name}:x")
        assert into.code == 2 and "bash.max_stdin_bytes" in into.stderr


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_a_trailing_slash_dot_copies_a_folders_contents(either_home: Path, tmp_path: Path) -> None:
    """As with docker cp, ``SRC/.`` copies the folder's contents into DEST (not the folder under its own name), both
    ways, in-process and over a service."""
    home = either_home
    src = make_tree(tmp_path)
    with named_session(home) as name:
        assert cli(home, "session", "start", "--name", name).code == 0
        put = cli(home, "cp", f"{src}/.", f"{name}:in")
        assert put.code == 0, put.stdout + put.stderr
        listed = cli(home, "exec", "--session", name, "--", "cd in && find . | sort").stdout.split()
        assert "./src" not in listed and sorted(listed) == sorted(["."] + [f"./{p}" for p in listing(src)])
        back = cli(home, "cp", f"{name}:in/.", str(tmp_path / "back"))
        assert back.code == 0, back.stdout + back.stderr
        assert listing(tmp_path / "back") == listing(src)


@pytest.mark.docker
def test_a_file_name_that_is_not_utf8_goes_in_and_comes_back(either_home: Path, tmp_path: Path) -> None:
    """A host folder holding a file whose name is not UTF-8 is copied as tar carries it (bytes), both ways, on both
    paths: the archive's member list is journaled with the byte escaped (it failed as an internal error, 125)."""
    home = either_home
    src = tmp_path / "src"
    src.mkdir()
    name_bytes = b"f\xff.txt"
    (src / os.fsdecode(name_bytes)).write_bytes(b"x\n")
    with named_session(home) as name:
        assert cli(home, "session", "start", "--name", name).code == 0
        put = cli(home, "cp", f"{src}/.", f"{name}:in")
        assert put.code == 0, put.stdout + put.stderr
        listed = cli(home, "exec", "--session", name, "--", "ls -b in")
        assert listed.stdout.strip() == "f\\377.txt", listed.stdout
        back = cli(home, "cp", f"{name}:in/.", str(tmp_path / "back"))
        assert back.code == 0, back.stdout + back.stderr
        assert [os.fsencode(p.name) for p in (tmp_path / "back").iterdir()] == [name_bytes]


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_a_download_cut_at_the_services_bound_is_exit_2(base_image: str, tmp_path: Path) -> None:
    """Over a service, a folder whose tar grows past service.download_max_bytes once streaming is cut at the bound:
    the thin CLI says so (exit 2 naming the setting, as in-process), writes nothing, and a cut for another reason
    would stay 125."""
    home = Path(tempfile.mkdtemp(prefix="exc-", dir="/tmp"))
    try:
        # A bound that is no multiple of the CLI's read size: the bytes before the cut are all counted.
        with serving(home, service__download_max_bytes="1000000"), named_session(home) as name:
            made = cli(
                home, "exec", "--session", name, "--create", "--", "mkdir big && head -c 3000000 /dev/urandom >big/n"
            )
            assert made.code == 0, made.stderr
            out = cli(home, "cp", f"{name}:big", str(tmp_path / "dest"))
            assert out.code == 2, out.stderr
            assert "above 1000000 bytes (service.download_max_bytes)" in out.stderr
            assert not (tmp_path / "dest").exists()
    finally:
        cli(home, "session", "gc")
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.docker
def test_a_copy_to_a_session_that_does_not_exist_names_a_way_that_works(either_home: Path, tmp_path: Path) -> None:
    """cp has no --create: its missing-session message says how to start the session, not to add an option cp
    refuses (it did in-process)."""
    source = tmp_path / "f.txt"
    source.write_text("x")
    with named_session(either_home) as name:
        refused = cli(either_home, "cp", str(source), f"{name}:in")
        assert refused.code == 2, refused.stdout + refused.stderr
        assert "--create" not in refused.stderr and name in refused.stderr, refused.stderr
