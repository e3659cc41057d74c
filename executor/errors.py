"""The executor's one exception tree.

Every error the executor raises on purpose derives from :class:`ExecutorError`. Leaves also subclass
the builtin that matches their meaning, so callers that only know the builtins still catch them::

    ExecutorError
    ├── ConfigError (ValueError)              settings, profiles or policy files that do not load
    ├── ServiceUnavailable (ConnectionError)  no executor service answers (executor.client)
    ├── Unauthorized (PermissionError)        the service refused the bearer token: missing or unknown (401)
    ├── Draining                              the service got SIGTERM and takes no new work
    ├── SessionStopped                        the session was stopped before or while the call ran (cancelled)
    ├── SessionClosed (RuntimeError)          a Session object used after its block ended (or after close)
    ├── SandboxError                          the container side
    │   ├── EngineUnavailable (ConnectionError)   no Docker engine answers
    │   ├── EngineError                       the engine refused or failed a call
    │   ├── ImageError                        an image could not be found, bootstrapped or built
    │   │   └── ImageNotFound (LookupError)   no image folder or local image of that name (bad input)
    │   ├── SessionNotFound (LookupError)     no such session (or not yours)
    │   │   └── SessionNotRunning             a named session whose container stopped (its workspace is kept)
    │   ├── SessionRejected (ValueError)      a session name refused before anything started (shape, in use)
    │   │   └── SessionNameTaken              the name is a live session's, or kept for another owner
    │   ├── SandboxLost                       the session's container went away mid-action
    │   ├── SessionUnhealthy                  the session's agent stopped answering (paused, frozen): recreate it
    │   └── AgentError                        the in-container agent
    │       ├── AgentProtocolError            a malformed frame or a version mismatch
    │       └── SpawnFailed                   the agent could not start a command (fork at the pids limit, ...)
    ├── CommandError                          the bash tool
    │   ├── CommandRejected (ValueError)      refused before anything ran (size, timeout above the cap)
    │   └── TaskNotFound (LookupError)        no such background task (or not yours)
    ├── WriteError                            the write tool
    │   ├── PathRejected (ValueError)         a path refused before any container call
    │   ├── ContentRejected (ValueError)      content refused before any container call (over the size cap)
    │   ├── UnsafeTarget (PermissionError)    a symlink on the path, or a non-regular target
    │   ├── ChangedSinceReview                the target is not in the state that was reviewed
    │   ├── ActionConsumed                    a prepared action can execute once
    │   └── WriteFailed (OSError)             the container refused the write (read-only, no space, ...)
    ├── ArtifactError                         the artifact store and recovery tools
    │   ├── ArtifactNotFound (LookupError)    unknown, malformed or foreign id: one message for all three
    │   ├── StreamNotFound (LookupError)      the artifact has no such stream
    │   ├── ArtifactEvicted (LookupError)     evicted by retention; its tombstone is still remembered
    │   ├── OutputRangeError (ValueError)     a read/search position or count out of range (past a line's end)
    │   ├── PatternError (ValueError)         a search pattern that does not compile or is too long
    │   └── PatternTimeout (TimeoutError)     a search pattern that ran past its time bound
    ├── GateError                             policy, judge and approvals
    │   ├── ActionDenied (PermissionError)    the gate said no
    │   ├── ApprovalRequired (PermissionError)    an ask with nobody to answer it (blocked)
    │   ├── ApprovalInvalidated               the action changed between request and resolution
    │   ├── ApprovalNotFound (LookupError)    no such pending approval (answered, expired, or not yours)
    │   └── JudgeError                        a judge failed (the gate fails closed on it)
    └── JournalError                          the decision journal
        └── JournalCorrupt (ValueError)       a journal line that does not parse or validate

Messages say what happened and what to do next.
"""

from __future__ import annotations

__all__ = [
    "ActionConsumed",
    "ActionDenied",
    "AgentError",
    "AgentProtocolError",
    "ApprovalInvalidated",
    "ApprovalNotFound",
    "ApprovalRequired",
    "ArtifactError",
    "ArtifactEvicted",
    "ArtifactNotFound",
    "ChangedSinceReview",
    "CommandError",
    "CommandRejected",
    "ConfigError",
    "ContentRejected",
    "Draining",
    "EngineError",
    "EngineUnavailable",
    "ExecutorError",
    "GateError",
    "ImageError",
    "ImageNotFound",
    "JournalCorrupt",
    "JournalError",
    "JudgeError",
    "OutputRangeError",
    "PathRejected",
    "PatternError",
    "PatternTimeout",
    "SandboxError",
    "SandboxLost",
    "ServiceUnavailable",
    "SessionClosed",
    "SessionNameTaken",
    "SessionNotFound",
    "SessionNotRunning",
    "SessionRejected",
    "SessionStopped",
    "SessionUnhealthy",
    "SpawnFailed",
    "StreamNotFound",
    "TaskNotFound",
    "Unauthorized",
    "UnsafeTarget",
    "WriteError",
    "WriteFailed",
    "public_name",
]


class ExecutorError(Exception):
    """Root of every error the executor raises on purpose."""


class ConfigError(ExecutorError, ValueError):
    """Settings, a profile or a policy file failed to load; the message names the field."""


class ServiceUnavailable(ExecutorError, ConnectionError):
    """No executor service answers at the address a client was given (or it went away mid-call)."""


class Unauthorized(ExecutorError, PermissionError):
    """The service refused the request's bearer token (missing over TCP, unknown, or not a bearer token): 401."""


class SandboxError(ExecutorError):
    """Something on the container side failed."""


class EngineUnavailable(SandboxError, ConnectionError):
    """No Docker engine answers at the configured address."""


class EngineError(SandboxError):
    """The engine refused or failed a call."""


class ImageError(SandboxError):
    """An image could not be found, bootstrapped or built."""


class ImageNotFound(ImageError, LookupError):
    """No image folder and no local image has that name: bad input, with the known names in the message."""


class SessionNotFound(SandboxError, LookupError):
    """No session with that id or name (or it belongs to someone else)."""


class SessionNotRunning(SessionNotFound):
    """A named session whose container stopped or is gone, its workspace kept: starting the name again (``--create``,
    ``session start --name``) recreates it there."""


class SessionRejected(SandboxError, ValueError):
    """A session name refused before anything started: not a usable name, or already used by a live session."""


class SessionNameTaken(SessionRejected):
    """The name is a live session's (or kept, with its workspace, for another owner): a conflict, not bad shape."""


class SandboxLost(SandboxError):
    """The session's container went away while an action was in flight."""


class SessionUnhealthy(SandboxError):
    """The session's agent did not answer within the host's own bound (the container was paused, the agent frozen
    or the engine stalled); the session is marked unhealthy and every later call on it fails at once with this
    error until it is stopped (and, if wanted, started again)."""


class AgentError(SandboxError):
    """The in-container agent failed or could not be reached."""


class AgentProtocolError(AgentError):
    """A malformed frame, an oversized length or a protocol version mismatch."""


class SpawnFailed(AgentError):
    """The agent could not start a command: a fork refused at the session's pids limit, no descriptors for its
    pipes, or a step between fork and exec (the message names it). A missing working directory is the caller's
    input and leaves the tools as :class:`CommandRejected`."""


class CommandError(ExecutorError):
    """The bash tool could not run a command."""


class CommandRejected(CommandError, ValueError):
    """A command refused before anything ran: too large, or a timeout above the cap."""


class TaskNotFound(CommandError, LookupError):
    """No background task with that id (or it belongs to someone else)."""


class WriteError(ExecutorError):
    """The write tool refused or failed a write."""

    committed: bool = False
    """True when this write's rename already happened (the message then says what the target holds now); False
    means the write changed nothing on disk."""


class PathRejected(WriteError, ValueError):
    """A path refused before any container call (NUL, newline, too long, escapes the workspace, denied)."""


class ContentRejected(WriteError, ValueError):
    """File content refused before any container call: larger than ``write.max_bytes``."""


class UnsafeTarget(WriteError, PermissionError):
    """A symlink somewhere on the path, or a target that is not a regular file."""


class ChangedSinceReview(WriteError):
    """The target's state differs from the state that was reviewed; nothing was written."""


class ActionConsumed(WriteError):
    """A prepared action executes once; this one already did."""


class WriteFailed(WriteError, OSError):
    """The container refused the write (read-only filesystem, no space, permission)."""


class ArtifactError(ExecutorError):
    """The artifact store or a recovery tool failed."""


class ArtifactNotFound(ArtifactError, LookupError):
    """Unknown, malformed or foreign artifact id. The message never says which."""


class StreamNotFound(ArtifactError, LookupError):
    """The artifact exists but has no stream of that name."""


class ArtifactEvicted(ArtifactError, LookupError):
    """The artifact was evicted by retention; only its tombstone remains."""


class OutputRangeError(ArtifactError, ValueError):
    """A ``read_output``/``search_output`` argument out of range: a line below 1, a byte offset past its line."""

    @classmethod
    def bounds(cls, name: str, value: object, low: int, high: int | None = None) -> OutputRangeError:
        """A number outside ``low``..``high`` (no upper bound when None), in the one wording every surface gives."""
        rule = f"at least {low}" if high is None else f"between {low} and {high}"
        return cls(f"{name} must be {rule}; got {value}")


class PatternError(ArtifactError, ValueError):
    """A search pattern that does not compile, or is longer than allowed."""


class PatternTimeout(ArtifactError, TimeoutError):
    """A search pattern that ran past its time bound."""


class Draining(ExecutorError):
    """The service got SIGTERM and takes no new work (a 503); retry against its next start."""


class SessionStopped(ExecutorError):
    """The session was stopped (``DELETE``, ``session stop``, an idle stop) while this ran, or before it: what ran in
    it was cancelled, its process group killed (a 409); nothing more runs in it (its artifacts stay readable)."""


class SessionClosed(ExecutorError, RuntimeError):
    """A :class:`~executor.session.Session` was used after the block that opened it ended: its connection and
    journal are closed (the session itself may still run: attach to it again)."""


class GateError(ExecutorError):
    """Policy, judge or approval failure."""


class ActionDenied(GateError, PermissionError):
    """The gate denied the action; nothing ran."""


class ApprovalRequired(GateError, PermissionError):
    """The gate asks for an approval and no handler can give one; nothing ran."""


class ApprovalInvalidated(GateError):
    """The action changed between the approval request and its resolution; nothing ran."""


class ApprovalNotFound(GateError, LookupError):
    """No such pending approval: answered already, expired, or another owner's."""


class JudgeError(GateError):
    """A judge provider failed (timeout, non-JSON, schema violation, too much output, budget)."""


class JournalError(ExecutorError):
    """The decision journal could not be written or read."""


class JournalCorrupt(JournalError, ValueError):
    """A journal line that does not parse or validate; the message carries the line number."""


def public_name(exc: BaseException) -> str:
    """The name of the nearest class of ``exc`` in this tree (``ExecutorError`` for anything else): what surfaces
    put on the wire as an error's type, so a client can rebuild it (a private subclass is named by its parent)."""
    names = set(__all__)
    for cls in type(exc).__mro__:
        if cls.__name__ in names and cls.__module__ == __name__:
            return cls.__name__
    return ExecutorError.__name__
