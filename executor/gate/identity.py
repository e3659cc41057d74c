"""Action identity: the canonical hash an approval is bound to.

The hashing itself lives on the models (:meth:`BashAction.identity`, :meth:`WriteAction.identity`) so that
every layer computes it the same way; this module is the gate's entry point to it.

* bash: session, command string, its ``shlex`` argv (the executable arguments; None when it does not
  parse), cwd, explicit env, stdin hash and timeout;
* write: session, resolved path, content hash, size and the reviewed target state (type, mode, owner,
  device, inode, size, mtime, content hash). The diff is presentation and is not hashed.
"""

from __future__ import annotations

from executor.models import BashAction, WriteAction, canonical_json

__all__ = ["action_identity", "canonical_json"]


def action_identity(action: BashAction | WriteAction) -> str:
    """Hex SHA-256 of the action's canonical JSON (see the module docstring)."""
    return action.identity()
