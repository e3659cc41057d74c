"""Folders to copy and a way to compare them, for the file-copy tests (host side only)."""

from __future__ import annotations

import io
import stat
import tarfile
from pathlib import Path

__all__ = ["Listing", "listing", "make_tree", "one_file_tar"]

Listing = dict[str, tuple[str, int, bytes | str]]
"""Relative path -> (kind, mode bits, bytes of a file or target of a link)."""


def make_tree(root: Path, *, big_bytes: int = 256 * 3000) -> Path:
    """``root/src``: nested folders, a binary file, files with modes 0750 and 0600, a relative symlink."""
    src = root / "src"
    (src / "sub" / "deep").mkdir(parents=True)
    (src / "sub" / "deep" / "data.bin").write_bytes((bytes(range(256)) * (big_bytes // 256 + 1))[:big_bytes])
    (src / "run.sh").write_text("echo hi\n")
    (src / "run.sh").chmod(0o750)
    (src / "secret").write_text("s\n")
    (src / "secret").chmod(0o600)
    (src / "link").symlink_to("sub/deep/data.bin")
    return src


def listing(root: Path) -> Listing:
    """Every entry under ``root``: kind, mode bits and content (a file's bytes, a link's target)."""
    out: Listing = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = ("link", 0, str(path.readlink()))
        elif path.is_dir():
            out[rel] = ("dir", stat.S_IMODE(path.lstat().st_mode), "")
        else:
            out[rel] = ("file", stat.S_IMODE(path.lstat().st_mode), path.read_bytes())
    return out


def one_file_tar(name: str, data: bytes = b"", *, end: bool = True) -> bytes:
    """A GNU tar holding one regular file; ``end=False`` leaves out the end-of-archive blocks (so another archive
    appended to it reads on as one)."""
    buffer = io.BytesIO()
    tar = tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT)  # noqa: SIM115 - closed below, or not
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
    if end:
        tar.close()  # the end-of-archive blocks and the record's padding
    return buffer.getvalue()
