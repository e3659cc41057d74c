"""The write tool: staged file writes in the session container, bound to the state that was reviewed.

A write happens in two steps, so that the gate (and a human) can sit between them:

1. :meth:`WriteTool.prepare` validates the path on the host (:mod:`executor.tools.paths`: NUL, newline, length,
   ``..`` escapes, outside the workspace, built-in denials), then asks the in-container agent for the target's
   state (``fs-stat``: kind, mode, owner, device, inode, size, mtime, SHA-256) and its current content
   (``fs-read``, bounded), and builds a bounded unified diff. It returns a frozen :class:`PreparedWrite` holding
   the resolved path, the content's hash and size, the reviewed :class:`~executor.models.FileState`, the diff and
   a one-time token.
2. :meth:`WriteTool.execute` runs exactly that prepared action, once. The agent (``fs-write``, running as the
   session user, never as root) walks the parents without following symlinks, refuses a symlink or non-regular
   target, compares the target with the reviewed state (any difference: :class:`ChangedSinceReview`, nothing
   written), writes a private staging file in the same directory, gives it the original mode and owner through its
   descriptor, fsyncs, renames it over the target, fsyncs the directory and verifies a read-back SHA-256.

The content travels on the agent's stdin (binary-safe, never in argv) and its hash is checked by the agent before
the rename. A read-only filesystem, an unwritable directory or a full disk is a :class:`WriteFailed`, never a
silent success.

Residual race, stated honestly: the checks and the rename are separate operations. Another process in the sandbox
(a command the agent started earlier, still running) can change the file between the agent's last check and its
rename, and that change is then replaced. The agent narrows the window (it re-checks inode, size, mtime and ctime
right before the rename, and creates new files with a no-replace rename), but the tool promises no transaction and
no protection against a hostile process racing it inside the same sandbox. What it does promise: it never follows a
symlink, never writes through a hard link in place, never writes a non-regular file, and never reports success for
content that is not there.
"""

from __future__ import annotations

import difflib
import errno
import hashlib
import secrets
import shlex
from typing import Any, Final, Literal, NoReturn, Protocol

import trio
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from executor.config import Profile, WriteSettings
from executor.errors import (
    ActionConsumed,
    AgentProtocolError,
    ChangedSinceReview,
    ContentRejected,
    PathRejected,
    SandboxLost,
    UnsafeTarget,
    WriteFailed,
)
from executor.models import CaptureSink, FileState, RunResult, RunSpec, StreamName
from executor.nesting import DEFAULT_MAX_DEPTH, loads_json
from executor.tools.paths import resolve_write_path

__all__ = ["AGENT_PATH", "AgentRunner", "PreparedWrite", "WriteResult", "WriteTool", "render_diff"]

_ERRNO_OF: Final = {
    "not_found": errno.ENOENT,
    "not_directory": errno.ENOTDIR,
    "permission": errno.EACCES,
    "read_only": errno.EROFS,
    "no_space": errno.ENOSPC,
    "file_size_limit": errno.EFBIG,
    "too_large": errno.EFBIG,
}
"""The errno set on a :class:`WriteFailed` for each agent error code (anything else: EIO)."""

AGENT_PATH: Final = "/.executor/agent"
"""Where the agent binary lives in every session container."""

_OUTPUT_CAP: Final = 64 * 1024
"""Largest JSON answer the agent sends for fs-stat/fs-write (it prints one short line)."""
_GRACE_MS: Final = 2_000
"""fs-write unlinks its staging file on SIGTERM; it needs only a moment."""
_DRAIN_MS: Final = 1_000
_STAT_TRIES: Final = 3
"""prepare re-reads when the file changes between its stat and its read, this many times."""


class AgentRunner(Protocol):
    """What the write tool needs from the agent client: run one argv to its end, output into a sink."""

    async def run(self, spec: RunSpec, sink: CaptureSink, *, argv: list[str] | None = None) -> RunResult:
        """Run ``argv`` (or ``bash -c spec.command``) as the session user and return how it ended."""
        ...


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class PreparedWrite(_Model):
    """A prepared write: exactly what :meth:`WriteTool.execute` will do, and what the review showed."""

    token: str
    """One-time token; execute accepts it once, and only from the tool that issued it."""
    requested_path: str
    """The path as the caller gave it."""
    path: str
    """Resolved absolute path inside the container (normalised, no ``.``/``..``)."""
    content_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    """Hex SHA-256 of the exact bytes to be written."""
    size: int = Field(ge=0)
    """Length of the content in bytes."""
    reviewed: FileState
    """The target's state when the write was prepared; execution refuses any other state."""
    diff: str
    """Bounded unified diff (or a summary for binary content) shown for review."""
    diff_truncated: bool
    """True when the diff was cut (``write.diff_max_lines``) or covers only a prefix of a large file."""
    binary: bool
    """True when either side is not UTF-8 text; the diff is then a summary."""
    git_dir: str | None = None
    """The git directory (not named ``.git``) the target lies in, when the review found one: the target is then a
    hook or config file git will use (see :meth:`WriteTool.find_git_dir`)."""
    create_parents: bool = False
    """Missing parent directories are created by the write (as the session user)."""

    @property
    def creates(self) -> bool:
        """True when the target did not exist at review time."""
        return self.reviewed.kind == "missing"


class WriteResult(_Model):
    """A write that happened and was verified by a read-back hash."""

    path: str
    """Resolved absolute path inside the container."""
    created: bool
    """True when the file did not exist before."""
    state: FileState
    """The file's state after the write, as read back."""
    mode_kept: bool
    """The intended mode was applied (an existing file's own mode, or ``write.new_file_mode``)."""
    owner_kept: bool
    """The original owner and group were kept (False: the session user could not give the file away, so it owns
    the new version)."""
    dir_synced: bool
    """The directory was fsynced after the rename (False only when the session user cannot open it for reading)."""
    verified: Literal["name", "descriptor"]
    """How the read-back was done: through the final name, or (for a mode the user cannot read) through the
    staging descriptor after checking that the name holds that inode."""


class _BoundedSink:
    """Collects a run's output up to a cap per stream; past it, remembers that it overflowed."""

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self.data: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        self.overflow = False

    def feed(self, stream: StreamName, data: bytes) -> None:
        buf = self.data.setdefault(stream, bytearray())
        room = self._cap - len(buf)
        if len(data) > room:
            self.overflow = True
            data = data[: max(room, 0)]
        buf += data


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _on_disk_now(now: object, path: str, expected_sha: str | None) -> str:
    """What a write whose rename happened left at ``path``, from the agent's ``now`` state, in one clause."""
    try:
        state = FileState.model_validate(now)
    except ValidationError:
        return f"the rename happened, and what {path} holds now could not be looked at: check it before writing again"
    if state.kind == "missing":
        return f"the rename happened, but {path} no longer exists (something removed it right after)"
    if state.kind != "regular":
        return f"the rename happened, but {path} is now a {state.kind} (something replaced it right after)"
    if state.sha256 is None:
        return f"the rename happened: {path} now holds {state.size} bytes the session user cannot read back"
    if expected_sha is not None and state.sha256 == expected_sha:
        return f"the rename happened: {path} now holds exactly the content prepared (sha256 {state.sha256[:16]}…)"
    expected = f", not the content prepared (sha256 {expected_sha[:16]}…)" if expected_sha else ""
    return (
        f"the rename happened: {path} now holds {state.size} bytes with sha256 {state.sha256[:16]}…{expected}; "
        "something changed it during or right after the write: check it before writing again"
    )


def _expect_arg(state: FileState) -> str:
    """The agent's ``--expect`` form of a reviewed state."""
    if state.kind == "missing":
        return "missing"
    fields = (state.uid, state.gid, state.dev, state.ino, state.size, state.mtime_ns)
    return f"regular:{state.mode:o}:" + ":".join(str(v) for v in fields) + f":{state.sha256 or '-'}"


def _decode_text(data: bytes) -> str | None:
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        # a cut at the end of a bounded sample may split a character; that alone does not make it binary
        if exc.start >= len(data) - 3 and exc.reason == "unexpected end of data":
            return data[: exc.start].decode("utf-8", errors="strict")
        return None


def render_diff(
    path: str,
    old: bytes | None,
    new: bytes,
    *,
    old_size: int,
    new_size: int,
    old_sha256: str | None,
    new_sha256: str,
    max_lines: int,
    max_line_chars: int = 2_000,
    source_bytes: int = 256 * 1024,
) -> tuple[str, bool, bool]:
    """A bounded unified diff for review.

    Args:
        path: the resolved path (shown in the headers).
        old: a prefix of the current content (None: the file does not exist, or could not be read).
        new: a prefix of the new content.
        old_size: the current file's full size (0 when missing).
        new_size: the new content's full size.
        old_sha256: the current content's digest, if known.
        new_sha256: the new content's digest.
        max_lines: most diff lines shown (``write.diff_max_lines``); each line is cut at 2,000 characters.

    Returns:
        ``(diff, truncated, binary)``: the text, whether it was cut or covers only a prefix, and whether either
        side is binary (then the text is a summary, never a dump).
    """
    old_text = "" if old is None else _decode_text(old)
    new_text = _decode_text(new)
    if old_text is None or new_text is None:
        was = "absent" if old is None else f"{old_size} bytes, sha256 {old_sha256 or 'unknown'}"
        lines = [
            f"Binary content for {path}: not shown.",
            f"  now: {was}",
            f"  new: {new_size} bytes, sha256 {new_sha256}",
        ]
        return "\n".join(lines) + "\n", False, True
    prefix_only = (old is not None and len(old) < old_size) or len(new) < new_size
    fromfile = "/dev/null" if old is None else f"a{path}"
    body = difflib.unified_diff(
        old_text.splitlines(keepends=True), new_text.splitlines(keepends=True), fromfile=fromfile, tofile=f"b{path}"
    )
    shown: list[str] = []
    hidden = 0
    for line in body:
        if len(shown) >= max_lines:
            hidden += 1
            continue
        if len(line) > max_line_chars:
            cut = len(line.rstrip("\n")) - max_line_chars
            line = line[:max_line_chars] + f" [... {cut} more characters on this line]\n"
        shown.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    if not shown:
        shown.append(
            f"--- /dev/null\n+++ b{path}\n(an empty file)\n"
            if old is None
            else f"No change: {path} already holds this content.\n"
        )
    if hidden:
        shown.append(f"[... {hidden} more diff lines not shown (write.diff_max_lines = {max_lines})]\n")
    if prefix_only:
        shown.append(f"[the diff covers only the first {source_bytes} bytes of each side]\n")
    return "".join(shown), bool(hidden) or prefix_only, False


class WriteTool:
    """Prepares and executes staged writes in one session's container, through its agent.

    One instance per session: it remembers which prepared writes it issued and which were consumed.
    """

    def __init__(
        self,
        client: AgentRunner,
        profile: Profile,
        settings: WriteSettings,
        *,
        agent_path: str = AGENT_PATH,
        allow_outside_workspace: bool = False,
        builtin_denials: bool = True,
    ) -> None:
        """Bind the tool to a session.

        Args:
            client: the session's agent client (``executor.sandbox.agent.client.AgentClient`` or anything with
                its ``run``).
            profile: the session's profile: workspace, home and the session user.
            settings: the write section of the settings.
            agent_path: the agent binary inside the container.
            allow_outside_workspace: accept targets outside the workspace; off until the gate can ask for them.
            builtin_denials: apply the default static denials (``.git/hooks/``, ``.git/config``, shell rc files,
                ``~/.ssh/``); the gate's policy files take them over later.
        """
        self._client = client
        self._profile = profile
        self._settings = settings
        self._agent = agent_path
        self._allow_outside = allow_outside_workspace
        self._denials = builtin_denials
        self._issued: dict[str, PreparedWrite] = {}
        self._consumed: set[str] = set()

    def resolve(self, path: str) -> str:
        """The absolute path a write to ``path`` would target; pure, no container call.

        Raises:
            PathRejected: see :func:`executor.tools.paths.resolve_write_path`.
        """
        return resolve_write_path(
            path,
            workspace=self._profile.workspace,
            home=self._profile.home,
            max_path_chars=self._settings.max_path_chars,
            max_component_chars=self._settings.max_component_chars,
            allow_outside_workspace=self._allow_outside,
            builtin_denials=self._denials,
        )

    async def prepare(self, path: str, content: bytes, *, create_parents: bool = False) -> PreparedWrite:
        """Validate, look at the target through the agent, and return the write to review and execute.

        Nothing is written. The path and the content size are checked before any container call.

        Raises:
            ContentRejected: the content is larger than ``write.max_bytes``.
            PathRejected: the path is refused (see :meth:`resolve`).
            UnsafeTarget: a symlink on the path (named) or as the target, or a non-regular target.
            WriteFailed: the agent could not look at the target (a missing parent directory, no permission...).
            AgentProtocolError, SandboxLost: the agent misbehaved or went away.
        """
        if len(content) > self._settings.max_bytes:
            raise ContentRejected(
                f"the content is {len(content)} bytes, above the {self._settings.max_bytes}-byte cap "
                "(write.max_bytes); write a smaller file or split it"
            )
        resolved = self.resolve(path)
        content_sha = _sha256(content)
        git_dir = await self.find_git_dir(resolved)
        reviewed, old, unreadable = await self._review(resolved, missing_parents_ok=create_parents)
        diff, truncated, binary = await trio.to_thread.run_sync(
            lambda: render_diff(
                resolved,
                old,
                content[: self._settings.diff_source_bytes],
                old_size=reviewed.size,
                new_size=len(content),
                old_sha256=reviewed.sha256,
                new_sha256=content_sha,
                max_lines=self._settings.diff_max_lines,
                max_line_chars=self._settings.diff_line_chars,
                source_bytes=self._settings.diff_source_bytes,
            )
        )
        if unreadable:
            diff = f"[the current content of {resolved} is not readable by the session user]\n" + diff
        prepared = PreparedWrite(
            token=secrets.token_urlsafe(16),
            requested_path=path,
            path=resolved,
            content_sha256=content_sha,
            size=len(content),
            reviewed=reviewed,
            diff=diff,
            diff_truncated=truncated,
            binary=binary,
            git_dir=git_dir,
            create_parents=create_parents,
        )
        self._issued[prepared.token] = prepared
        return prepared

    async def execute(self, prepared: PreparedWrite, content: bytes) -> WriteResult:
        """Execute exactly ``prepared`` with ``content``, once.

        The action is consumed as soon as it passes the host-side checks (token and content hash), before the
        agent runs: a write that then fails (changed since review, read-only...) must be prepared again.

        Raises:
            ActionConsumed: this prepared write already executed, or this tool never issued it (or it was altered).
            ChangedSinceReview: the content is not the prepared content, or the target changed since review;
                nothing was written.
            UnsafeTarget: a symlink appeared on the path or as the target, or the target is no longer regular.
            WriteFailed: the container refused the write (read-only filesystem, permission, no space, file-size
                limit) or the read-back did not verify.
            AgentProtocolError, SandboxLost: the agent misbehaved or went away.
        """
        token = prepared.token
        if token in self._consumed:
            raise ActionConsumed(f"the write to {prepared.path} was already executed; prepare it again to write again")
        issued = self._issued.get(token)
        if issued is None or issued != prepared:
            raise ActionConsumed(
                f"the write to {prepared.path} was not prepared by this session's write tool, or was altered after "
                "prepare; prepare it again"
            )
        digest = _sha256(content)
        if digest != prepared.content_sha256 or len(content) != prepared.size:
            raise ChangedSinceReview(
                f"the content ({len(content)} bytes, sha256 {digest[:12]}...) is not the content prepared for "
                f"{prepared.path} ({prepared.size} bytes, sha256 {prepared.content_sha256[:12]}...); "
                "prepare the new content to have it reviewed"
            )
        # consumed before the first await: a second, concurrent execute of the same action is refused
        del self._issued[token]
        self._consumed.add(token)
        argv = [
            self._agent,
            "fs-write",
            prepared.path,
            "--expect",
            _expect_arg(prepared.reviewed),
            "--new-mode",
            f"{self._settings.new_file_mode:o}",
            "--max",
            str(self._settings.max_bytes),
            "--content-sha256",
            prepared.content_sha256,
        ]
        if prepared.create_parents:
            argv.append("--parents")
        out, _ = await self._call(
            argv, prepared.path, stdin=content, cap=_OUTPUT_CAP, phase="execute", expected_sha=prepared.content_sha256
        )
        try:
            result = WriteResult.model_validate({k: out.get(k) for k in WriteResult.model_fields})
        except ValidationError as exc:
            raise AgentProtocolError(f"fs-write answered with an unexpected shape for {prepared.path}: {exc}") from exc
        if result.state.sha256 != prepared.content_sha256 or result.state.size != prepared.size:
            raise WriteFailed(
                f"{prepared.path} was replaced but its read-back (sha256 {result.state.sha256}) is not the content "
                "written; check the file"
            )
        return result

    async def find_git_dir(self, path: str) -> str | None:
        """The git directory ``path`` lies in, when it is one git would use but is not named ``.git``.

        Git looks for hooks in ``$GIT_DIR/hooks`` and for config in ``$GIT_DIR/config``, and a git directory can be
        anywhere (``git init --separate-git-dir=gd``, a bare repository, ``GIT_DIR``). The host cannot see the
        container's files, so it asks the agent: for each ancestor that could be such a directory (the parent of a
        ``hooks`` folder on the path, or the folder of a ``config``/``config.worktree``/``commondir``/``gitdir``
        file) it checks for git's own marks, ``HEAD`` (a file) and ``objects`` (a folder). Folders named ``.git``
        are left to the path rules, which name them. Costs nothing for a path with no such component.
        """
        parts = path.split("/")
        candidates: list[str] = [
            "/".join(parts[:index]) for index, part in enumerate(parts[:-1]) if part == "hooks" and index > 1
        ]
        if parts[-1] in ("config", "config.worktree", "commondir", "gitdir"):
            candidates.append("/".join(parts[:-1]))
        for folder in dict.fromkeys(candidates):
            if not folder or folder.rsplit("/", 1)[-1] == ".git":
                continue
            if await self._probe(f"{folder}/HEAD", ("regular", "symlink")) and await self._probe(
                f"{folder}/objects", ("directory", "symlink")
            ):
                return folder
        return None

    async def _probe(self, path: str, kinds: tuple[str, ...]) -> bool:
        """Whether ``path`` exists as one of ``kinds`` (a symlink anywhere on it counts: the conservative answer)."""
        try:
            out, _ = await self._call([self._agent, "fs-stat", path], path, stdin=None, cap=_OUTPUT_CAP, phase="stat")
        except UnsafeTarget:
            return True
        except (WriteFailed, PathRejected):
            return False  # a missing or unreadable folder: the write's own review reports it
        return self._state(out, path).kind in kinds

    # ------------------------------------------------------------------ agent calls

    async def read(self, path: str, *, max_bytes: int) -> tuple[str, bytes, str | None]:
        """Read a whole regular file as the session user: ``(resolved path, content, sha256)``.

        Raises:
            PathRejected: the path is refused (see :meth:`resolve`).
            UnsafeTarget: a symlink on the path, or the target is not a regular file (``errno`` EISDIR for a
                directory).
            WriteFailed: not found (``errno`` ENOENT), not readable (EACCES), or larger than ``max_bytes`` (EFBIG).
            AgentProtocolError, SandboxLost: the agent misbehaved or went away.
        """
        resolved = self.resolve(path)
        out, data = await self._call(
            [self._agent, "fs-read", resolved, "--max", str(max_bytes)],
            resolved,
            stdin=None,
            cap=_OUTPUT_CAP + max_bytes,
            phase="read",
        )
        state = self._state(out, resolved)
        length = out.get("length")
        if not isinstance(length, int) or length != len(data):
            raise AgentProtocolError(f"fs-read of {resolved} announced {length} bytes and sent {len(data)}")
        if out.get("truncated") is True:
            exc = WriteFailed(
                f"{resolved} is {state.size} bytes, above the {max_bytes}-byte read limit; read it in parts with a "
                "command (head -c, tail -c) or raise write.read_max_bytes"
            )
            exc.errno = errno.EFBIG
            raise exc
        return resolved, data, state.sha256

    async def _review(self, path: str, *, missing_parents_ok: bool = False) -> tuple[FileState, bytes | None, bool]:
        """The reviewed state and a bounded prefix of the current content (None when missing or unreadable)."""
        for _ in range(_STAT_TRIES):
            try:
                out, _ = await self._call(
                    [self._agent, "fs-stat", path], path, stdin=None, cap=_OUTPUT_CAP, phase="stat"
                )
            except WriteFailed as exc:
                if missing_parents_ok and exc.errno == errno.ENOENT:
                    return FileState(kind="missing"), None, False  # the write creates the parents
                raise
            state = self._state(out, path)
            if state.kind == "symlink":
                raise UnsafeTarget(f"{path} is a symbolic link; writes never follow symlinks: write to the real path")
            if state.kind not in ("missing", "regular"):
                unsafe = UnsafeTarget(f"{path} is a {state.kind}, not a regular file; only regular files are written")
                unsafe.errno = errno.EISDIR if state.kind == "directory" else 0
                raise unsafe
            if state.kind == "missing":
                return state, None, False
            if state.sha256 is None:
                return state, None, True  # the session user cannot read it: review metadata only
            read_out, data = await self._call(
                [self._agent, "fs-read", path, "--max", str(self._settings.diff_source_bytes)],
                path,
                stdin=None,
                cap=_OUTPUT_CAP + self._settings.diff_source_bytes,
                phase="read",
            )
            seen = self._state(read_out, path)
            length = read_out.get("length")
            if not isinstance(length, int) or length != len(data):
                raise AgentProtocolError(f"fs-read of {path} announced {length} bytes and sent {len(data)}")
            same = seen.model_dump(exclude={"sha256"}) == state.model_dump(exclude={"sha256"})
            if same and seen.sha256 in (None, state.sha256):
                return state, data, False
        raise WriteFailed(f"{path} kept changing while it was reviewed; try again when nothing else writes it")

    @staticmethod
    def _state(out: dict[str, Any], path: str) -> FileState:
        try:
            return FileState.model_validate(out.get("state"))
        except ValidationError as exc:
            raise AgentProtocolError(f"the agent described {path} with an unexpected shape: {exc}") from exc

    async def _call(
        self,
        argv: list[str],
        path: str,
        *,
        stdin: bytes | None,
        cap: int,
        phase: str,
        expected_sha: str | None = None,
    ) -> tuple[dict[str, Any], bytes]:
        """Run one file operation; return its JSON answer and the raw bytes after it, or raise its error."""
        size = len(stdin) if stdin is not None else 0
        spec = RunSpec(
            command=shlex.join(argv),
            cwd="/",
            stdin=stdin,
            timeout_ms=self._settings.op_timeout_ms + self._settings.op_timeout_ms_per_mib * (size >> 20),
            grace_ms=_GRACE_MS,
            drain_ms=_DRAIN_MS,
            kill_orphans=True,
        )
        sink = _BoundedSink(cap)
        run = await self._client.run(spec, sink, argv=argv)
        if run.cause == "sandbox_lost":
            raise SandboxLost(f"the session's container went away during the {phase} of {path}")
        if run.cause != "exited":
            raise WriteFailed(
                f"the {phase} of {path} did not finish ({run.cause}); nothing is promised about the target: "
                "check it before writing again"
                if phase == "execute"
                else f"the {phase} of {path} did not finish ({run.cause}); try again"
            )
        if sink.overflow:
            raise AgentProtocolError(f"the agent's answer to the {phase} of {path} exceeded {cap} bytes")
        header, _, tail = bytes(sink.data["stdout"]).partition(b"\n")
        try:
            # The agent's answer comes from inside the sandbox: measured before the parser recurses into it.
            out = loads_json(header.decode("utf-8", errors="replace"), max_depth=DEFAULT_MAX_DEPTH)
        except ValueError:
            out = None
        if not isinstance(out, dict):
            said = bytes(sink.data["stderr"][:300]).decode("utf-8", errors="replace").strip() or header[:200]
            raise AgentProtocolError(
                f"the agent answered the {phase} of {path} with no JSON (exit {run.exit_code}): {said!r}"
            )
        if run.exit_code == 0 and out.get("ok") is True:
            return out, tail
        self._raise(out, path, phase, expected_sha)

    def _raise(self, out: dict[str, Any], path: str, phase: str, expected_sha: str | None = None) -> NoReturn:
        code = str(out.get("error", ""))
        message = str(out.get("message", "")) or f"{phase} of {path} failed ({code or 'no error code'})"
        if out.get("committed") is True:
            err = WriteFailed(f"{message}; {_on_disk_now(out.get('now'), path, expected_sha)}")
            err.committed = True
            raise err
        if phase == "execute":
            message += "; this write changed nothing on disk"
        if code in ("symlink", "not_regular"):
            unsafe = UnsafeTarget(message)
            unsafe.errno = errno.EISDIR if out.get("kind") == "directory" else errno.ELOOP if code == "symlink" else 0
            raise unsafe
        if code == "changed_since_review":
            raise ChangedSinceReview(message)
        if code == "bad_path":
            raise PathRejected(message)
        if code in ("usage", "content_mismatch", ""):
            raise AgentProtocolError(f"the agent refused the {phase} of {path}: {message}")
        if code == "permission":
            message += f" (the session user is uid {self._profile.uid})"
        failed = WriteFailed(message)
        # The errno says which builtin OSError a program would have seen (the inspect provider maps it).
        failed.errno = _ERRNO_OF.get(code, errno.EIO)
        raise failed
