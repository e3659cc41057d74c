"""Files and folders moved between the host and a session as tar streams (``executor cp``, the service's
``/v1/sessions/{s}/files``): the two bash commands that unpack and pack them inside the session, and the host side
(a streaming packer and a checked unpacker).

Inside the session, tar runs as the session user, gated like any command (an upload is bound to its archive's
hash, its stdin): the sandbox is the boundary there. On the host the archive is untrusted (it came out of the
sandbox): :func:`extract_tar` checks every member before it writes anything, refuses absolute paths, ``..``,
links that leave the destination, devices and setuid bits (tarfile's ``data`` filter, applied again while
extracting so that a link made by an earlier member cannot be followed), and never takes ownership from it.

Stdlib only (no trio, no pydantic): the thin CLI uses it too.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import posixpath
import shlex
import stat
import tarfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Final, cast

from executor.errors import ContentRejected, PathRejected, UnsafeTarget

__all__ = [
    "ArchiveStats",
    "TarPacker",
    "download_too_large",
    "extract_tar",
    "is_contents",
    "list_members",
    "pack_command",
    "unpack_command",
]

_BLOCK: Final = 512
_CHUNK: Final = 1024 * 1024


def _checked(path: str, what: str) -> str:
    if not path or "\0" in path:
        raise PathRejected(f"{what} {path!r} is empty or contains a NUL byte; give a path in the session")
    return path


def download_too_large(path: str, limit: int | str) -> ContentRejected:
    """The refusal of an archive of ``path`` past ``service.download_max_bytes`` (``limit``), on every surface."""
    return ContentRejected(
        f"the archive of {path} is above {limit} bytes (service.download_max_bytes); copy a smaller folder or raise "
        "the setting"
    )


def is_contents(path: str) -> bool:
    """Whether ``path`` names a folder's contents rather than the folder: it ends in ``/.`` (``docker cp``'s rule)."""
    return path.endswith("/.")


def unpack_command(dest: str) -> str:
    """The bash command that unpacks a tar read from stdin into folder ``dest`` (made if missing).

    Ownership is never taken from the archive; modes are kept as the session's umask allows. A ``dest`` whose path
    goes through a symbolic link is refused (exit 1), as :meth:`write_file` refuses one.

    Raises:
        PathRejected: ``dest`` is empty or holds a NUL.
    """
    quoted = shlex.quote(_checked(dest, "the destination"))
    # As write_file, never through a symlink on the destination's path: the gate judged the path as named.
    refuse = (
        f"echo {shlex.quote(f'refusing to unpack into {dest}: its path goes through a symbolic link')}"
        f"' (name the folder it points at)' >&2; exit 1"
    )
    return (
        f'[ "$(realpath -m -- {quoted})" = "$(realpath -ms -- {quoted})" ] || {{ {refuse}; }}; '
        f"mkdir -p -- {quoted} && tar -x --no-same-owner --no-same-permissions -C {quoted} -f -"
    )


def pack_command(path: str) -> str:
    """The bash command that writes a tar of ``path`` (a file or a folder, under its own name) to stdout; a path
    ending in ``/.`` gives the folder's contents at the archive's root (as ``docker cp`` reads ``SRC/.``).

    Raises:
        PathRejected: ``path`` is empty or holds a NUL.
    """
    if is_contents(_checked(path, "the path")):
        return f"tar -c -C {shlex.quote(path[:-2] or '/')} -f - ."
    parent, name = posixpath.split(path.rstrip("/") or "/")
    return f"tar -c -C {shlex.quote(parent or '.')} -f - -- {shlex.quote(name or '.')}"


MAX_LISTED_MEMBERS: Final = 1024
"""Most member names :func:`list_members` returns: past it the list ends with ``...`` (more were not listed)."""


def list_members(archive: IO[bytes]) -> tuple[str, ...]:
    """The member names of the tar that ``tar -x`` may unpack from ``archive`` (streamed: contents are skipped, never
    held), read as GNU tar can read it: past end-of-archive blocks (``--ignore-zeros``, also set by ``TAR_OPTIONS``)
    and damaged headers (it skips to the next one), through every member of a gzip, bzip2 or xz stream (``gzip -d``
    decompresses them all, one after another), and what each link member names (see :func:`_named_by_link`). At
    most :data:`MAX_LISTED_MEMBERS`; a last ``...`` says that more
    were not listed or that some of it could not be read (a compression this does not decode, a header it cannot
    parse, data that is no tar): the gate then judges the archive unseen."""
    names: list[str] = []
    try:
        stream = _decompressed(archive)
        if stream is None:
            return ("...",)
        with _Lister.open(fileobj=stream, mode="r|", ignore_zeros=True) as tar:
            for member in tar:
                for name in (member.name, *_named_by_link(member)):
                    if len(names) == MAX_LISTED_MEMBERS:
                        return (*names, "...")
                    names.append(name)
            unread = tar.unread
    except (tarfile.TarError, OSError, EOFError, ValueError, zlib.error, lzma.LZMAError):
        return (*names, "...")
    return (*names, "...") if unread or not names else tuple(names)


def _named_by_link(member: tarfile.TarInfo) -> tuple[str, ...]:
    """What a link member names, listed as a member too: whatever is later written through the link is written
    there (``gg -> .git``, then a copy into ``gg`` writes ``.git/config``). A symbolic link's text is read from its
    own folder (absolute, it stays absolute); a hard link names a member of the archive."""
    if member.issym():
        target = member.linkname
        if not target.startswith("/"):
            target = posixpath.normpath(posixpath.join(posixpath.dirname(member.name), target))
        return (target,)
    if member.islnk():
        return (member.linkname,)
    return ()


class _Lister(tarfile.TarFile):
    """Counts the blocks tarfile skips (end-of-archive zeros, headers it cannot parse, other data) and stops past
    :data:`_MAX_SKIPPED_BLOCKS` of them: what follows is judged unseen, not scanned block by block."""

    unread = 0
    skipped = 0

    def _dbg(self, level: int, msg: str) -> None:  # tarfile reports each block it skips here (a private hook)
        if msg.startswith("0x"):
            self.skipped += 1
            if "end of file header" not in msg:
                self.unread += 1
            if self.skipped > _MAX_SKIPPED_BLOCKS:
                raise tarfile.TarError("too many blocks that hold no header")


_MAX_SKIPPED_BLOCKS: Final = 4096
"""Blocks of 512 bytes that are no member's header (end-of-archive zeros and record padding, or other data) that
:func:`list_members` reads past before it judges the rest unseen: a stream of zeros would otherwise be scanned a
block at a time (a few MB of gzip hold GBs of them)."""


_COMPRESSED: Final[tuple[tuple[bytes, Callable[[IO[bytes]], object]], ...]] = (
    (b"\x1f\x8b", lambda raw: gzip.GzipFile(fileobj=raw, mode="rb")),  # every member, as gzip -d reads them
    (b"BZh", bz2.BZ2File),  # every stream
    (b"\xfd7zXZ\x00", lzma.LZMAFile),  # every stream
)


def _decompressed(archive: IO[bytes]) -> IO[bytes] | None:
    """``archive`` as the tar it holds: decompressed when it is gzip, bzip2 or xz; None for another compression tar
    knows (zstd, lzip, lzma, lzop, compress), whose members this cannot read."""
    start = archive.tell()
    head = archive.read(6)
    archive.seek(start)
    for magic, opener in _COMPRESSED:
        if head.startswith(magic):
            return cast(IO[bytes], opener(archive))  # read as a binary file, which each of them is
    if head.startswith((b"\x28\xb5\x2f\xfd", b"LZIP", b"\x5d\x00\x00", b"\x89LZO", b"\x1f\x9d", b"\x1f\xa0")):
        return None
    return archive


class ArchiveStats:
    """What a pack or an unpack moved: entries (files, folders, links) and the bytes of regular files."""

    def __init__(self) -> None:
        self.files = 0
        """Regular files."""
        self.entries = 0
        """Every member (files, folders, symlinks)."""
        self.bytes = 0
        """Bytes of regular files' content."""


class TarPacker:
    """A tar of a host file or folder, produced in chunks as it is iterated: memory stays flat whatever its size.

    Symlinks are stored as symlinks (never followed), modes and modification times are kept, ownership is neutral
    (uid/gid 0, no names). FIFOs, sockets and devices are refused.

    Args:
        source: the file or folder to pack.
        contents: pack a folder's contents at the archive's root; else the folder (or file) under its own name.
        limit: most archive bytes; more raises :class:`~executor.errors.ContentRejected` naming ``setting``.
        setting: the setting that set ``limit``, for the message.

    Raises (while iterating):
        ContentRejected: the archive grew past ``limit``, or a member is not a file, folder or symlink.
        OSError: a file could not be read (or shrank while it was read).
    """

    def __init__(self, source: Path, *, contents: bool = False, limit: int | None = None, setting: str = "") -> None:
        self._source = source
        self._contents = contents
        self._limit = limit
        self._setting = setting
        self.stats = ArchiveStats()
        self.size = 0
        """Archive bytes produced so far."""

    def _members(self) -> Iterator[tuple[Path, str]]:
        source = self._source
        if self._contents and source.is_dir() and not source.is_symlink():
            roots = [(child, child.name) for child in sorted(source.iterdir())]
        else:
            roots = [(source, source.name or "root")]
        for path, arc in roots:
            yield path, arc
            if path.is_dir() and not path.is_symlink():
                for parent, dirs, files in os.walk(path):
                    dirs.sort()
                    rel = os.path.relpath(parent, path)
                    base = arc if rel == "." else f"{arc}/{rel}"
                    for name in sorted(dirs + files):
                        yield Path(parent, name), f"{base}/{name}"

    def _emit(self, data: bytes) -> bytes:
        self.size += len(data)
        if self._limit is not None and self.size > self._limit:
            raise ContentRejected(
                f"the archive of {self._source} is above {self._limit} bytes ({self._setting}); copy a smaller "
                "folder or raise the setting"
            )
        return data

    def __iter__(self) -> Iterator[bytes]:
        for path, arc in self._members():
            st = os.lstat(path)
            info = tarfile.TarInfo(arc)
            info.mode = stat.S_IMODE(st.st_mode)
            info.mtime = int(st.st_mtime)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if stat.S_ISREG(st.st_mode):
                info.type, info.size = tarfile.REGTYPE, st.st_size
            elif stat.S_ISDIR(st.st_mode):
                info.type = tarfile.DIRTYPE
            elif stat.S_ISLNK(st.st_mode):
                info.type, info.linkname = tarfile.SYMTYPE, str(path.readlink())
            else:
                raise ContentRejected(f"{path} is not a file, folder or symlink; only those are copied")
            yield self._emit(info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape"))
            self.stats.entries += 1
            if info.type != tarfile.REGTYPE:
                continue
            self.stats.files += 1
            left = info.size
            with path.open("rb") as handle:
                while left > 0:
                    data = handle.read(min(_CHUNK, left))
                    if not data:
                        raise OSError(f"{path} shrank while it was copied; copy it again")
                    left -= len(data)
                    yield self._emit(data)
            self.stats.bytes += info.size
            if info.size % _BLOCK:
                yield self._emit(b"\0" * (_BLOCK - info.size % _BLOCK))
        yield self._emit(b"\0" * (2 * _BLOCK))


def _data_keeping_modes(member: tarfile.TarInfo, dest_path: str) -> tarfile.TarInfo | None:
    """Python's ``data`` filter (no paths or links out of the destination, no devices, no owners from the archive),
    with the permission bits the archive gives kept: that filter makes every folder 0755 and every file
    owner-writable (a private 0700 folder came out world-readable). Set-id and sticky bits are still dropped."""
    checked = tarfile.data_filter(member, dest_path)
    if checked is None or checked.islnk() or checked.issym():
        return checked
    return checked.replace(mode=member.mode & 0o777, deep=False)


def extract_tar(archive: IO[bytes], dest: Path) -> ArchiveStats:
    """Unpack a seekable tar ``archive`` into folder ``dest`` (made if missing), checked before anything is written.

    Raises:
        UnsafeTarget: a member would land outside ``dest`` (an absolute path, ``..``, a link leaving ``dest`` or
            passing through one), or is a device; nothing was written when the first check finds it.
        ContentRejected: the archive is damaged or truncated.
    """
    stats = ArchiveStats()
    try:
        with tarfile.open(fileobj=archive, mode="r:") as tar:
            members = tar.getmembers()
            root = os.path.realpath(dest)
            for member in members:
                # Checked all at once first: a refused archive writes nothing.
                tarfile.data_filter(member, root)
            dest.mkdir(parents=True, exist_ok=True)
            # ... and again while extracting (the filter resolves links that earlier members made on disk).
            tar.extractall(dest, members=members, filter=_data_keeping_modes)
    except tarfile.FilterError as exc:
        raise UnsafeTarget(f"refused the archive: {exc}; nothing outside {dest} was written") from exc
    except (tarfile.ReadError, EOFError) as exc:
        raise ContentRejected(f"the archive is damaged or truncated ({exc})") from exc
    for member in members:
        stats.entries += 1
        if member.isreg():
            stats.files += 1
            stats.bytes += member.size
    return stats
