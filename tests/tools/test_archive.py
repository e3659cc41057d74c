"""The host side of file copies: the streaming packer and the checked unpacker (pure: no engine)."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import tarfile
from pathlib import Path

import pytest

from executor.errors import ContentRejected, PathRejected, UnsafeTarget
from executor.testing.files import listing, make_tree, one_file_tar
from executor.tools.archive import (
    MAX_LISTED_MEMBERS,
    ArchiveBounds,
    ArchiveTooCostly,
    TarPacker,
    canonical_entries,
    extract_tar,
    list_members,
    pack_command,
    unpack_command,
)


def test_pack_then_extract_is_exact(tmp_path: Path) -> None:
    """A folder packed and unpacked elsewhere has the same names, bytes, modes and symlinks, under its own name."""
    src = make_tree(tmp_path)
    packer = TarPacker(src)
    archive = io.BytesIO(b"".join(packer))
    stats = extract_tar(archive, tmp_path / "dest")
    assert listing(tmp_path / "dest" / "src") == listing(src)
    assert (stats.files, stats.entries, stats.bytes) == (3, 7, 256 * 3000 + 8 + 2)
    assert (packer.stats.files, packer.stats.bytes) == (stats.files, stats.bytes)
    archive.seek(0)
    with tarfile.open(fileobj=archive) as tar:
        assert {(m.uid, m.gid, m.uname, m.gname) for m in tar.getmembers()} == {(0, 0, "", "")}


def test_contents_mode_packs_a_folders_children(tmp_path: Path) -> None:
    """contents=True puts a folder's children at the archive's root."""
    src = make_tree(tmp_path)
    with tarfile.open(fileobj=io.BytesIO(b"".join(TarPacker(src, contents=True)))) as tar:
        assert {name.split("/")[0] for name in tar.getnames()} == {"sub", "run.sh", "secret", "link"}


def test_pack_streams_in_bounded_chunks(tmp_path: Path) -> None:
    """A large file is produced in chunks of at most 1 MiB, never whole."""
    big = tmp_path / "big"
    with big.open("wb") as handle:
        handle.truncate(5 * 1024 * 1024)
    sizes = [len(chunk) for chunk in TarPacker(big)]
    assert max(sizes) <= 1024 * 1024 and sum(sizes) > 5 * 1024 * 1024


def test_pack_over_its_limit_is_refused(tmp_path: Path) -> None:
    """An archive past its limit raises ContentRejected naming the setting."""
    src = make_tree(tmp_path)
    with pytest.raises(ContentRejected, match=r"above 4096 bytes \(bash\.max_stdin_bytes\)"):
        b"".join(TarPacker(src, limit=4096, setting="bash.max_stdin_bytes"))


def test_pack_refuses_a_fifo(tmp_path: Path) -> None:
    """Only files, folders and symlinks are copied."""
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(ContentRejected, match="not a file, folder or symlink"):
        b"".join(TarPacker(tmp_path))


def _evil(*members: tuple[str, bytes | None, str | None]) -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, link in members:
            info = tarfile.TarInfo(name)
            if link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, link
                tar.addfile(info)
            else:
                payload = data or b""
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    buffer.seek(0)
    return buffer


@pytest.mark.parametrize(
    "members",
    [
        [("../escaped", b"x", None)],
        [("ok", b"fine", None), ("up", None, "../../outside")],
        [("abs", None, "/etc/passwd")],
        [("ok", b"fine", None), ("dir", None, ".."), ("dir/escaped", b"x", None)],
    ],
    ids=["dotdot", "relative-link-out", "absolute-link", "through-a-link"],
)
def test_unsafe_archives_write_nothing(tmp_path: Path, members: list[tuple[str, bytes | None, str | None]]) -> None:
    """An archive with a member or link leaving the destination is refused before anything is written."""
    dest = tmp_path / "a" / "dest"
    with pytest.raises(UnsafeTarget, match="refused the archive"):
        extract_tar(_evil(*members), dest)
    assert not dest.exists()
    assert list(tmp_path.rglob("*")) == []


def test_absolute_names_land_inside_the_destination(tmp_path: Path) -> None:
    """A member named by an absolute path is written under the destination, never at that path."""
    extract_tar(_evil(("/abs/inside", b"x", None)), tmp_path / "dest")
    assert (tmp_path / "dest" / "abs" / "inside").read_bytes() == b"x"


def test_a_truncated_archive_is_refused(tmp_path: Path) -> None:
    """A cut archive is ContentRejected, not a traceback."""
    whole = _evil(("f", b"y" * 5000, None)).getvalue()
    with pytest.raises(ContentRejected, match="damaged or truncated"):
        extract_tar(io.BytesIO(whole[:1500]), tmp_path / "d")


def test_commands_quote_their_paths() -> None:
    """The in-session commands quote paths and pack a path under its own name."""
    assert unpack_command("my dir") == "/.executor/agent fs-unpack -- 'my dir'"
    assert pack_command("/work/out/") == "tar -c -C /work -f - -- out"
    assert pack_command("out") == "tar -c -C . -f - -- out"
    assert pack_command("/") == "tar -c -C / -f - -- ."


@pytest.mark.parametrize("path", ["", "a\0b"])
def test_a_path_no_command_can_take_is_refused(path: str) -> None:
    with pytest.raises(PathRejected, match="empty or contains a NUL"):
        pack_command(path)
    with pytest.raises(PathRejected, match="empty or contains a NUL"):
        unpack_command(path)


def test_extract_keeps_the_archives_permission_bits_but_no_set_id(tmp_path: Path) -> None:
    """As docker cp: a private 0700 folder stays 0700, a read-only 0400 file 0400, a group-writable 0775 folder and
    0664 file keep their bits (Python's data filter made them 0755/0600/0755/0644); set-id and sticky bits are
    dropped all the same."""
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for name, kind, mode in [
            ("m", tarfile.DIRTYPE, 0o755),
            ("m/priv", tarfile.DIRTYPE, 0o700),
            ("m/shared", tarfile.DIRTYPE, 0o775),
            ("m/g664", tarfile.REGTYPE, 0o664),
            ("m/ro400", tarfile.REGTYPE, 0o400),
            ("m/suid", tarfile.REGTYPE, 0o4755),
        ]:
            info = tarfile.TarInfo(name)
            info.type, info.mode = kind, mode
            tar.addfile(info, io.BytesIO(b"") if kind == tarfile.REGTYPE else None)
    archive.seek(0)
    extract_tar(archive, tmp_path / "out")
    modes = {p.name: p.stat().st_mode & 0o7777 for p in (tmp_path / "out" / "m").iterdir()}
    assert modes == {"priv": 0o700, "shared": 0o775, "g664": 0o664, "ro400": 0o400, "suid": 0o755}


def test_list_members_names_every_member_up_to_the_cap(tmp_path: Path) -> None:
    """The gate's view of an upload: every member's name in order; past the cap a last '...'."""
    archive = b"".join(TarPacker(make_tree(tmp_path)))
    names = list_members(io.BytesIO(archive))
    assert names[0] == "src" and "src/run.sh" in names and "..." not in names  # an upload is listed whole
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for index in range(MAX_LISTED_MEMBERS + 5):
            tar.addfile(tarfile.TarInfo(f"f{index}"), io.BytesIO(b""))
    many = list_members(io.BytesIO(buffer.getvalue()))
    assert len(many) == MAX_LISTED_MEMBERS + 1 and many[-1] == "..."


_A, _B = one_file_tar("a"), one_file_tar("b")


@pytest.mark.parametrize(
    ("stream", "listed"),
    [
        (_A + _B, ("a", "b")),  # past the end-of-archive blocks (tar --ignore-zeros, TAR_OPTIONS)
        (_A + b"\0" * (1 << 20) + _B, ("a", "b")),
        (gzip.compress(one_file_tar("a", end=False)) + gzip.compress(_B), ("a", "b")),  # gzip -d reads on
        (gzip.compress(_A) + gzip.compress(_B), ("a", "b")),
        (bz2.compress(_A) + bz2.compress(_B), ("a", "b")),
        (lzma.compress(_A) + lzma.compress(_B), ("a", "b")),
        (one_file_tar("a", end=False) + b"junk" * 256 + _B, ("a", "b", "...")),  # tar skips to the next header
        (_A + b"junk" * 300, ("a", "...")),
        (b"\x28\xb5\x2f\xfd" + b"zstd data" * 50, ("...",)),  # a compression not decoded here
        (b"not a tar at all" * 100, ("...",)),
        (b"", ("...",)),
        (gzip.compress(_A + b"\0" * (200 << 20) + _B), ("a", "...")),  # zeros past the bound: the rest unseen
    ],
    ids=[
        "after-end", "after-1MiB-zeros", "gzip-members", "gzip-members-ended", "bzip2-streams", "xz-streams",
        "garbage-between", "trailing-garbage", "zstd", "not-a-tar", "empty", "zero-bomb",
    ],
)  # fmt: skip
def test_list_members_reads_as_far_as_tar_can(stream: bytes, listed: tuple[str, ...]) -> None:
    """The gate's view of an upload holds every member GNU tar may unpack: past end-of-archive blocks and damaged
    headers, through every member of a compressed stream; what it cannot read ends the list with '...' (unseen)."""
    assert list_members(io.BytesIO(stream)) == listed


def test_list_members_names_what_each_link_names() -> None:
    """A link member lists what it names too (a write through it lands there): a symlink's text is read from its
    own folder, an absolute one stays absolute, a hard link names an archive member."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, kind, target in [
            ("gg", tarfile.SYMTYPE, ".git"),
            ("sub/up", tarfile.SYMTYPE, "../.git/hooks"),
            ("abs", tarfile.SYMTYPE, "/home/agent/.bashrc"),
            ("hard", tarfile.LNKTYPE, ".git/config"),
            ("plain", tarfile.REGTYPE, ""),
        ]:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, target
            tar.addfile(info, io.BytesIO(b"") if kind == tarfile.REGTYPE else None)
    assert list_members(io.BytesIO(buffer.getvalue())) == (
        "gg", ".git", "sub/up", ".git/hooks", "abs", "/home/agent/.bashrc", "hard", ".git/config", "plain",
    )  # fmt: skip


# -- an upload's entries ------------------------------------------------------------------------------------------


def _tar(*members: tarfile.TarInfo | tuple[str, bytes], fmt: int = tarfile.PAX_FORMAT) -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                tar.addfile(member)
            else:
                info = tarfile.TarInfo(member[0])
                info.size = len(member[1])
                tar.addfile(info, io.BytesIO(member[1]))
    buffer.seek(0)
    return buffer


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def _entries(archive: io.BytesIO, bounds: ArchiveBounds | None = None) -> tuple[str, ...]:
    out = io.BytesIO()
    canonical_entries(archive, out, bounds=bounds or ArchiveBounds())
    out.seek(0)
    return list_members(out)


@pytest.mark.parametrize(
    ("name", "written"),
    [
        ("./.git/config", ".git/config"),
        ("a//../.git/hooks/x", ".git/hooks/x"),
        ("x/../.git/config", ".git/config"),
        ("/.git/config", ".git/config"),
        ("d/" * 60 + ".git/config", "d/" * 60 + ".git/config"),
    ],
    ids=["dot-slash", "double-slash-dotdot", "dotdot-back-inside", "absolute", "long-name"],
)
@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT], ids=["pax", "gnu"])
def test_an_uploads_entries_are_the_paths_written(name: str, written: str, fmt: int) -> None:
    """Each member is listed as the normalised path the agent writes, however tar would spell it."""
    assert _entries(_tar((name, b"x"), fmt=fmt))[-1] == written


@pytest.mark.parametrize(
    "members",
    [
        [_link("l", ".git"), ("l/config", b"x")],
        [("d/f", b"x"), _link("d", ".git")],
        [("f", b"x"), ("f/inner", b"y")],
        [_link("h", ".git/config", tarfile.LNKTYPE)],
        [("../up", b"x")],
    ],
    ids=["through-a-symlink-member", "folder-replaced-by-link", "through-a-file", "hardlink-to-unlisted", "dotdot"],
)
def test_an_upload_written_through_a_link_or_leaving_is_refused(
    members: list[tarfile.TarInfo | tuple[str, bytes]],
) -> None:
    """A member written through a link or file the archive made, a hard link to no earlier file, or a path that
    leaves the destination refuses the upload."""
    with pytest.raises(UnsafeTarget, match="refused the archive"):
        _entries(_tar(*members))


def test_links_are_listed_as_what_they_name() -> None:
    """A symlink member is judged as a write to what it names; a hard link is a copy listed under its own name."""
    listed = _entries(_tar(("a/f", b"data"), _link("l", ".git"), _link("h", "a/f", tarfile.LNKTYPE)))
    assert listed == ("a/f", "l", ".git", "h")


def test_a_compression_bomb_is_refused_at_its_bound() -> None:
    """A small bzip2 or gzip of many zero bytes is refused naming archive.max_expanded_bytes, quickly, and the gate's
    listing of it stops there (judged unseen)."""
    zeros = tarfile.TarInfo("z")
    zeros.size = 64 * 1024 * 1024
    plain = io.BytesIO()
    with tarfile.open(fileobj=plain, mode="w") as tar:
        tar.addfile(zeros, io.BytesIO(bytes(zeros.size)))
    bounds = ArchiveBounds(max_expanded_bytes=8 * 1024 * 1024)
    for squeeze in (bz2.compress, gzip.compress):
        small = squeeze(plain.getvalue())
        assert len(small) < 256 * 1024
        with pytest.raises(ArchiveTooCostly, match=r"archive\.max_expanded_bytes"):
            canonical_entries(io.BytesIO(small), io.BytesIO(), bounds=bounds)
        assert list_members(io.BytesIO(small), bounds)[-1] == "..."


def test_member_count_and_time_bounds_name_their_setting() -> None:
    """More members than archive.max_members, or more time than archive.max_seconds, is refused naming it."""
    many = _tar(*[(f"f{i}", b"") for i in range(20)])
    with pytest.raises(ArchiveTooCostly, match=r"more than 10 members \(archive\.max_members\)"):
        canonical_entries(many, io.BytesIO(), bounds=ArchiveBounds(max_members=10))
    many.seek(0)
    with pytest.raises(ArchiveTooCostly, match=r"archive\.max_seconds"):
        canonical_entries(many, io.BytesIO(), bounds=ArchiveBounds(max_seconds=1e-9))
