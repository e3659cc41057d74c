"""Tamper evidence for journals: a per-home secret key, an HMAC on every line, each bound to its predecessor.

Pure apart from :func:`load_journal_key`, which reads (and on first use creates) the key file: no trio, no docker.

A signed line is the event's JSON object with one more member appended by the writer::

    {"v":1,"seq":7,...,"type":"execution_started","chain":"<key id>:<prev mac>:<mac>"}

* ``key id``: 16 hex digits naming the home key that signed the line (a hash of the key, never the key);
* ``prev mac``: the ``mac`` of the journal's previous signed line (:data:`GENESIS` for the first one);
* ``mac``: HMAC-SHA256 under the home key over the previous mac and the line's bytes without the ``chain``
  member (the event JSON exactly as written).

Each line is authenticated on its own (``mac``), and its position by ``prev``: an altered or forged line fails its
mac; a deleted, reordered or copied-in line breaks the link; a journal cut at the end no longer reaches the head
that the writer seals in ``<journal>.head`` (at every emit and commit: the pipeline commits before it returns a
result) (``seq``, ``mac``, the file size and a tag under the
same key; a writer opening a long journal also starts from it instead of re-reading every line).

The key lives in ``$EXECUTOR_HOME/journal.key`` (32 random bytes, mode 0600, created on first use, never inside a
container, never written into a journal). Whoever can read it can re-sign a journal: the chain protects journals
against anyone without the home's key (a copied or exported journal, a process that can write the journal but not
read the key), not against the home's own user.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import stat
from pathlib import Path

from executor.errors import JournalError

__all__ = [
    "GENESIS",
    "KEY_FILE",
    "ChainMark",
    "JournalKey",
    "head_path",
    "load_journal_key",
    "split_chain",
]

KEY_FILE = "journal.key"
"""The key's file name under ``$EXECUTOR_HOME``."""
GENESIS = "0" * 64
"""The ``prev`` of a journal's first signed line."""
_KEY_BYTES = 32
_LINE_DOMAIN = b"executor-journal-line-v1\0"
_HEAD_DOMAIN = b"executor-journal-head-v1\0"
_ID_DOMAIN = b"executor-journal-key-id-v1\0"
_CHAIN_RE = re.compile(rb',"chain":"([0-9a-f]{16}):([0-9a-f]{64}):([0-9a-f]{64})"\}\Z')
_HEAD_MAX_BYTES = 4096


class ChainMark:
    """The ``chain`` member of one line: who signed it, what it follows, its mac."""

    __slots__ = ("key_id", "mac", "prev")

    def __init__(self, key_id: str, prev: str, mac: str) -> None:
        self.key_id = key_id
        self.prev = prev
        self.mac = mac


def split_chain(raw: bytes) -> tuple[bytes, ChainMark | None]:
    """Split a line (without its newline) into the event JSON as signed and its chain mark (None: unsigned).

    The mark must be the object's last member, exactly as the writer appends it; anything else is left in place
    (and refused by the event model as an unknown field).
    """
    match = _CHAIN_RE.search(raw)
    if match is None:
        return raw, None
    body = raw[: match.start()] + b"}"
    mark = ChainMark(match.group(1).decode(), match.group(2).decode(), match.group(3).decode())
    return body, mark


def head_path(journal: Path) -> Path:
    """Where the sealed head of ``journal`` lives (``journal.ndjson.head``)."""
    return journal.with_name(journal.name + ".head")


class JournalKey:
    """A home's journal key: signs lines and heads, verifies them."""

    __slots__ = ("_secret", "key_id")

    def __init__(self, secret: bytes) -> None:
        if len(secret) != _KEY_BYTES:
            raise JournalError(f"a journal key is {_KEY_BYTES} bytes, not {len(secret)}")
        self._secret = secret
        self.key_id = hashlib.sha256(_ID_DOMAIN + secret).hexdigest()[:16]
        """16 hex digits naming this key in every line it signs."""

    def __repr__(self) -> str:
        return f"JournalKey(key_id={self.key_id!r})"

    def mac(self, prev: str, body: bytes) -> str:
        """The mac of ``body`` (a line without its chain member) following ``prev``."""
        return hmac.digest(self._secret, _LINE_DOMAIN + prev.encode("ascii") + b"\0" + body, "sha256").hex()

    def sign(self, prev: str, body: bytes) -> tuple[bytes, str]:
        """The line to write for ``body`` (a JSON object) after ``prev``, and its mac."""
        mac = self.mac(prev, body)
        return body[:-1] + f',"chain":"{self.key_id}:{prev}:{mac}"}}'.encode("ascii"), mac

    def verifies(self, body: bytes, mark: ChainMark) -> bool:
        """Whether ``mark`` is this key's genuine mac of ``body`` (after the predecessor it names)."""
        return mark.key_id == self.key_id and hmac.compare_digest(self.mac(mark.prev, body), mark.mac)

    def _head_tag(self, seq: int, mac: str, size: int) -> str:
        message = _HEAD_DOMAIN + f"{seq}:{mac}:{size}".encode("ascii")
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def head_bytes(self, seq: int, mac: str, size: int) -> bytes:
        """The sealed head: the journal's last signed line is ``seq`` with ``mac``, and the file was ``size`` bytes."""
        tag = self._head_tag(seq, mac, size)
        head = {"key_id": self.key_id, "seq": seq, "mac": mac, "size": size, "tag": tag}
        return json.dumps(head).encode("ascii") + b"\n"

    def read_head(self, raw: bytes) -> tuple[int, str, int] | None:
        """The (seq, mac, size) a head file records, or None when it is not a head this key sealed."""
        try:
            data = json.loads(raw[:_HEAD_MAX_BYTES])
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        seq, mac, size, tag = data.get("seq"), data.get("mac"), data.get("size"), data.get("tag")
        if not (isinstance(seq, int) and isinstance(mac, str) and isinstance(size, int) and isinstance(tag, str)):
            return None
        if len(mac) != 64 or not hmac.compare_digest(self._head_tag(seq, mac, size), tag):
            return None
        return seq, mac, size


def load_journal_key(home: Path, *, create: bool) -> JournalKey | None:
    """The home's journal key; with ``create``, made (0600) on first use. None: no key and ``create`` is False.

    Raises:
        JournalError: the key file is not a regular file, is readable by others, has the wrong size, or cannot
            be read or created.
    """
    path = home / KEY_FILE
    try:
        return _read_key(path)
    except FileNotFoundError:
        if not create:
            return None
    try:
        home.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = home / f".{KEY_FILE}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, os.urandom(_KEY_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            # link() never replaces: of several processes creating the key at once, exactly one wins.
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        return _read_key(path)
    except OSError as exc:
        raise JournalError(f"cannot create the journal key {path}: {exc.strerror or exc}") from exc


def _read_key(path: Path) -> JournalKey:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise JournalError(f"cannot read the journal key {path}: {exc.strerror or exc}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise JournalError(f"the journal key {path} is not a regular file; remove it")
        if info.st_mode & 0o077:
            raise JournalError(f"the journal key {path} is readable by others; run: chmod 600 {path}")
        secret = os.read(fd, _KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(secret) != _KEY_BYTES:
        raise JournalError(f"the journal key {path} is {len(secret)} bytes, not {_KEY_BYTES}; it is damaged")
    return JournalKey(secret)
