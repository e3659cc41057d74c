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
import struct
import tarfile
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final, Protocol, cast

from executor.errors import ContentRejected, PathRejected, UnsafeTarget

__all__ = [
    "AGENT_PATH",
    "ENTRY_MAGIC",
    "ArchiveBounds",
    "ArchiveStats",
    "ArchiveTooCostly",
    "TarPacker",
    "archive_bounds",
    "canonical_entries",
    "download_too_large",
    "extract_tar",
    "is_contents",
    "list_members",
    "pack_command",
    "unpack_command",
    "write_entry_stream",
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


AGENT_PATH: Final = "/.executor/agent"
"""The in-container agent, whose ``fs-unpack`` writes an upload's entries (see ``PROTOCOL.md``)."""


def unpack_command(dest: str) -> str:
    """The bash command that writes the entry stream read from stdin (:func:`canonical_entries`) into folder
    ``dest`` (made if missing): the agent's ``fs-unpack``, which writes exactly the stream's entries, follows no
    symbolic link on any path (the destination's, one the workspace holds, or one an entry made) and refuses the
    whole upload when an entry cannot be written as listed. Ownership is never taken from the archive; modes are
    kept as the session's umask allows.

    Raises:
        PathRejected: ``dest`` is empty or holds a NUL.
    """
    _checked(dest, "the destination")
    # A relative destination that starts with '-' is still a path, never an option.
    return f"{AGENT_PATH} fs-unpack -- {shlex.quote(dest)}"


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


def list_members(archive: IO[bytes], bounds: ArchiveBounds | None = None) -> tuple[str, ...]:
    """The member names of the tar that ``tar -x`` may unpack from ``archive`` (streamed: contents are skipped, never
    held), read as GNU tar can read it: past end-of-archive blocks (``--ignore-zeros``, also set by ``TAR_OPTIONS``)
    and damaged headers (it skips to the next one), through every member of a gzip, bzip2 or xz stream (``gzip -d``
    decompresses them all, one after another), and what each link member names (see :func:`_named_by_link`). At
    most :data:`MAX_LISTED_MEMBERS`; a last ``...`` says that more
    were not listed or that some of it could not be read (a compression this does not decode, a header it cannot
    parse, data that is no tar, or one that passes ``bounds``: decompressing further would cost more than an upload
    may): the gate then judges the archive unseen. An entry stream (an upload's, :func:`canonical_entries`) is
    listed as the paths it writes."""
    names: list[str] = []
    start = archive.tell()
    head = archive.read(len(ENTRY_MAGIC))
    archive.seek(start)
    if head == ENTRY_MAGIC:
        return _list_entries(archive)
    try:
        stream = _decompressed(archive)
        if stream is None:
            return ("...",)
        reader = cast(IO[bytes], _BoundedReader(stream, bounds or ArchiveBounds()))
        with _Lister.open(fileobj=reader, mode="r|", ignore_zeros=True) as tar:
            for member in tar:
                for name in (member.name, *_named_by_link(member)):
                    if len(names) == MAX_LISTED_MEMBERS:
                        return (*names, "...")
                    names.append(name)
            unread = tar.unread
    except (tarfile.TarError, OSError, EOFError, ValueError, zlib.error, lzma.LZMAError):
        # ContentRejected (a bound passed) is a ValueError: what was listed so far, then unseen.
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


# -- an upload's entries ------------------------------------------------------------------------------------------

ENTRY_MAGIC: Final = b"XENTRY1\n"
"""The first bytes of an entry stream (:func:`canonical_entries`; the format is in ``PROTOCOL.md``, fs-unpack)."""
_NAME_MAX: Final = 255
_PATH_MAX: Final = 4095


@dataclass(frozen=True)
class ArchiveBounds:
    """The work one upload's archive may cost on the host (the ``archive`` settings); past any of them it is
    refused naming the setting, and the gate judges an archive it could not list within them unseen."""

    max_expanded_bytes: int = 256 * 1024 * 1024
    """Bytes of tar read after decompression (headers and contents)."""
    max_members: int = 100_000
    """Members (files, folders, links)."""
    max_seconds: float = 30.0
    """Seconds spent reading it."""


def archive_bounds(section: _ArchiveSection) -> ArchiveBounds:
    """The bounds the ``archive`` settings section sets."""
    return ArchiveBounds(
        max_expanded_bytes=section.max_expanded_bytes,
        max_members=section.max_members,
        max_seconds=section.max_seconds,
    )


class _ArchiveSection(Protocol):
    """The ``archive`` settings section (this module imports no pydantic)."""

    @property
    def max_expanded_bytes(self) -> int: ...
    @property
    def max_members(self) -> int: ...
    @property
    def max_seconds(self) -> float: ...


class ArchiveTooCostly(ContentRejected):
    """An archive passed one of its :class:`ArchiveBounds` (the message names the setting)."""


class _BoundedReader:
    """A decompressed stream read at most ``max_expanded_bytes`` far and ``max_seconds`` long, in pieces of at most
    1 MiB: a small bomb is refused after a bounded amount of work, and nothing expanded is held."""

    def __init__(self, raw: IO[bytes], bounds: ArchiveBounds) -> None:
        self._raw = raw
        self._bounds = bounds
        self._deadline = time.monotonic() + bounds.max_seconds
        self.total = 0

    def check_time(self) -> None:
        if time.monotonic() > self._deadline:
            raise ArchiveTooCostly(
                f"reading the archive took more than {self._bounds.max_seconds:g} s (archive.max_seconds); "
                "send a smaller or less compressed archive, or raise the setting"
            )

    def read(self, size: int = -1) -> bytes:
        self.check_time()
        want = _CHUNK if size is None or size < 0 else min(size, _CHUNK)
        data = self._raw.read(want)
        self.total += len(data)
        if self.total > self._bounds.max_expanded_bytes:
            raise ArchiveTooCostly(
                f"the archive expands to more than {self._bounds.max_expanded_bytes} bytes "
                "(archive.max_expanded_bytes); send a smaller archive, or raise the setting"
            )
        return data


@dataclass
class _Entry:
    kind: str  # "d", "f" or "l"
    path: bytes
    mode: int
    size: int = 0
    link: bytes = b""
    offset: int = 0  # of a file's content in the data spool


def _normal_name(name: str, what: str) -> bytes:
    """``name`` as the relative path it is written at: leading ``/``, empty and ``.`` parts dropped, ``..``
    taking its parent (lexically: nothing is ever written through a link, so that is where it lands)."""
    parts: list[bytes] = []
    for part in os.fsencode(name).split(b"/"):
        if part in (b"", b"."):
            continue
        if part == b"..":
            if not parts:
                raise UnsafeTarget(f"refused the archive: {what} {name!r} leaves the destination ('..')")
            parts.pop()
            continue
        if len(part) > _NAME_MAX:
            raise ContentRejected(f"{what} {name[:80]!r}... has a part longer than {_NAME_MAX} bytes")
        parts.append(part)
    path = b"/".join(parts)
    if len(path) > _PATH_MAX:
        raise ContentRejected(f"{what} {name[:80]!r}... is longer than {_PATH_MAX} bytes")
    return path


def _shown(path: bytes) -> str:
    return os.fsdecode(path)


class _Entries:
    """The entries of an upload as they will be written, checked as each member is added."""

    def __init__(self, data: IO[bytes]) -> None:
        self.data = data
        self.order: list[_Entry] = []
        self.kinds: dict[bytes, str] = {}  # "D": a folder implied by a deeper entry
        self.dirs: dict[bytes, _Entry] = {}

    def _claim(self, path: bytes, kind: str, name: str) -> bool:
        """Whether ``path`` is new; refuses a path under a file or link, or one already held by another kind."""
        parts = path.split(b"/")
        for depth in range(1, len(parts)):
            prefix = b"/".join(parts[:depth])
            held = self.kinds.get(prefix)
            if held in ("f", "l"):
                what = "symbolic link" if held == "l" else "file"
                raise UnsafeTarget(
                    f"refused the archive: member {name!r} would be written through {_shown(prefix)!r}, a {what} "
                    "earlier in the archive; nothing was written"
                )
            if held is None:
                self.kinds[prefix] = "D"
        held = self.kinds.get(path)
        if held is None:
            self.kinds[path] = kind
            return True
        if kind == "d" and held in ("d", "D"):
            self.kinds[path] = "d"
            return held == "D"
        raise UnsafeTarget(
            f"refused the archive: member {name!r} replaces {_shown(path)!r}, which the archive already holds; "
            "nothing was written"
        )

    def add(self, member: tarfile.TarInfo, tar: tarfile.TarFile, reader: _BoundedReader) -> None:
        name = member.name
        path = _normal_name(name, "member")
        mode = member.mode & 0o777
        if not path:
            if member.isdir():
                return  # the destination itself
            raise UnsafeTarget(f"refused the archive: member {name!r} names the destination itself")
        if member.isdir():
            if self._claim(path, "d", name):
                entry = _Entry("d", path, mode)
                self.dirs[path] = entry
                self.order.append(entry)
            else:
                self.dirs[path].mode = mode
        elif member.issym():
            if not member.linkname or "\0" in member.linkname or len(os.fsencode(member.linkname)) > _PATH_MAX:
                raise ContentRejected(f"member {name!r} is a symbolic link with an empty or over-long target")
            self._claim(path, "l", name)
            self.order.append(_Entry("l", path, 0o777, link=os.fsencode(member.linkname)))
        elif member.islnk():
            target = _normal_name(member.linkname, "the hard link target")
            source = next((e for e in self.order if e.kind == "f" and e.path == target), None)
            if source is None:
                raise UnsafeTarget(
                    f"refused the archive: member {name!r} is a hard link to {member.linkname!r}, which is not a "
                    "file earlier in the archive; nothing was written"
                )
            self._claim(path, "f", name)
            entry = _Entry("f", path, mode, size=source.size, offset=self.data.seek(0, os.SEEK_END))
            self.data.seek(source.offset)
            left = source.size
            while left > 0:  # a copy of the file it names: the upload never makes a hard link
                reader.check_time()
                chunk = self.data.read(min(_CHUNK, left))
                self.data.seek(0, os.SEEK_END)
                self.data.write(chunk)
                left -= len(chunk)
                if left > 0:
                    self.data.seek(source.offset + source.size - left)
            self.order.append(entry)
        elif member.isreg():
            self._claim(path, "f", name)
            entry = _Entry("f", path, mode, size=member.size, offset=self.data.seek(0, os.SEEK_END))
            handle = tar.extractfile(member)
            if handle is None:  # pragma: no cover - tarfile returns one for every regular member
                raise ContentRejected(f"member {name!r} could not be read")
            while True:
                chunk = handle.read(_CHUNK)
                if not chunk:
                    break
                self.data.write(chunk)
            if self.data.tell() - entry.offset != member.size:
                raise ContentRejected(f"the archive is damaged or truncated (member {name!r} is short)")
            self.order.append(entry)
        else:
            raise UnsafeTarget(
                f"refused the archive: member {name!r} is a device, FIFO or other special file; only files, "
                "folders and links are copied"
            )

    def write(self, out: IO[bytes]) -> None:
        # Folders first, parents before children (a folder's mode comes from its own member); then files and links
        # in archive order, whose contents follow in that order.
        folders = sorted((e for e in self.order if e.kind == "d"), key=lambda e: e.path.count(b"/"))
        rest = [e for e in self.order if e.kind != "d"]
        out.write(ENTRY_MAGIC + struct.pack(">I", len(folders) + len(rest)))
        for entry in (*folders, *rest):
            out.write(entry.kind.encode() + struct.pack(">HH", entry.mode, len(entry.path)) + entry.path)
            if entry.kind == "l":
                out.write(struct.pack(">H", len(entry.link)) + entry.link)
            elif entry.kind == "f":
                out.write(struct.pack(">Q", entry.size))
        for entry in rest:
            if entry.kind == "f":
                self.data.seek(entry.offset)
                left = entry.size
                while left > 0:
                    chunk = self.data.read(min(_CHUNK, left))
                    if not chunk:
                        raise OSError("the upload's spool shrank while it was written")
                    out.write(chunk)
                    left -= len(chunk)


def canonical_entries(
    archive: IO[bytes], out: IO[bytes], *, bounds: ArchiveBounds, spool_dir: Path | None = None
) -> ArchiveStats:
    """Read the tar ``archive`` (plain, gzip, bzip2 or xz) once, within ``bounds``, and write to ``out`` the entry
    stream of exactly what it holds, as it will be written (the input of the agent's ``fs-unpack``): each member's
    path normalised (``./``, ``//``, a leading ``/`` and ``..`` that stays inside resolved), folders, files and
    symbolic links with their permission bits, hard links as copies of the file they name. The gate judges that
    stream's entries (:func:`list_members`) and the agent writes those and nothing else.

    Raises:
        ArchiveTooCostly: the archive passed a bound (the message names its setting); nothing was written.
        UnsafeTarget: a member leaves the destination, is written through a link or file the archive made, replaces
            another member, is a hard link to no earlier file, or is a device or FIFO.
        ContentRejected: the archive is not a tar this reads, or is damaged or truncated.
    """
    start = archive.tell()
    head = archive.read(len(ENTRY_MAGIC))
    archive.seek(start)
    if head == ENTRY_MAGIC:
        raise ContentRejected("the upload is an entry stream already; send a tar archive")
    stream = _decompressed(archive)
    if stream is None:
        raise ContentRejected(
            "the archive uses a compression the executor does not read (zstd, lzip, lzma, lzop or compress); send "
            "a plain tar or one compressed with gzip, bzip2 or xz"
        )
    reader = _BoundedReader(stream, bounds)
    stats = ArchiveStats()
    with tempfile.TemporaryFile(dir=spool_dir) as data:
        entries = _Entries(data)
        count = 0
        try:
            with tarfile.open(fileobj=cast(IO[bytes], reader), mode="r|") as tar:
                for member in tar:
                    count += 1
                    if count > bounds.max_members:
                        raise ArchiveTooCostly(
                            f"the archive holds more than {bounds.max_members} members (archive.max_members); "
                            "send fewer files at once, or raise the setting"
                        )
                    reader.check_time()
                    entries.add(member, tar, reader)
        except (ContentRejected, UnsafeTarget):  # UnsafeTarget is an OSError: not "could not be read"
            raise
        except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, ValueError) as exc:
            raise ContentRejected(f"the archive is damaged, truncated or not a tar ({exc})") from exc
        except OSError as exc:  # gzip and bz2 raise OSError on data that is not theirs
            raise ContentRejected(f"the archive could not be read ({exc})") from exc
        entries.write(out)
    for entry in entries.order:
        stats.entries += 1
        if entry.kind == "f":
            stats.files += 1
            stats.bytes += entry.size
    return stats


def write_entry_stream(
    source: Path, dest: Path, *, bounds: ArchiveBounds, spool_dir: Path | None = None
) -> ArchiveStats:
    """:func:`canonical_entries` of the tar in file ``source``, written to file ``dest`` (replaced; mode 0600)."""
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as out, source.open("rb") as archive:
        return canonical_entries(archive, out, bounds=bounds, spool_dir=spool_dir)


def _list_entries(archive: IO[bytes]) -> tuple[str, ...]:
    """The paths of an entry stream (and what each symbolic link names, as :func:`_named_by_link` does), or a last
    ``...`` where it cannot be read whole."""
    names: list[str] = []
    archive.read(len(ENTRY_MAGIC))
    head = archive.read(4)
    if len(head) != 4:
        return ("...",)
    (count,) = struct.unpack(">I", head)
    for _ in range(count):
        fixed = archive.read(5)
        if len(fixed) != 5:
            return (*names, "...")
        kind = fixed[:1]
        (length,) = struct.unpack(">H", fixed[3:5])
        path = os.fsdecode(archive.read(length))
        if len(names) >= MAX_LISTED_MEMBERS:
            return (*names, "...")
        names.append(path)
        if kind == b"l":
            (size,) = struct.unpack(">H", archive.read(2) or b"\0\0")
            link = tarfile.TarInfo(path)
            link.type, link.linkname = tarfile.SYMTYPE, os.fsdecode(archive.read(size))
            names.extend(_named_by_link(link))
        elif kind == b"f":
            archive.read(8)
        elif kind != b"d":
            return (*names, "...")
    return tuple(names)
