"""Action identity: canonical, and sensitive to every field that changes what runs."""

from __future__ import annotations

from executor.gate.identity import action_identity
from executor.models import FileState
from executor.testing.actions import bash, write


def test_identity_is_stable_and_canonical() -> None:
    """The same action hashes the same, whatever the env's insertion order."""
    one = bash("ls", env={"A": "1", "B": "2"})
    two = bash("ls", env={"B": "2", "A": "1"})
    assert action_identity(one) == action_identity(two)
    assert len(action_identity(one)) == 64


def test_every_bash_field_changes_the_identity() -> None:
    """Command, arguments, cwd, env, stdin, timeout and session are all bound."""
    base = action_identity(bash("rm -rf build"))
    variants = [
        bash("rm -rf build2"),
        bash("rm  -rf build", timeout_ms=5000, cwd="/workspace/x"),
        bash("rm -rf build", env={"X": "1"}),
        bash("rm -rf build", stdin_sha256="0" * 64),
        bash("rm -rf build", timeout_ms=5001),
        bash("rm -rf build", session_id="s2"),
    ]
    assert all(action_identity(variant) != base for variant in variants)


def test_bash_identity_includes_the_parsed_arguments() -> None:
    """Two spellings of the same argv still differ (the raw string is bound too), and argv is part of it."""
    assert bash("echo 'a b'").argv() == ("echo", "a b")
    assert bash('echo "unterminated').argv() is None
    assert action_identity(bash("echo 'a b'")) != action_identity(bash('echo "a b"'))


def test_write_identity_binds_path_content_and_reviewed_state_not_the_diff() -> None:
    """A changed file (mtime, inode, content) changes a write's identity; a re-rendered diff does not."""
    base = write("/workspace/a.txt")
    assert action_identity(base) == action_identity(base.model_copy(update={"diff": "other rendering"}))
    changed_state = base.model_copy(update={"reviewed": FileState(kind="regular", size=3, mtime_ns=5)})
    assert action_identity(changed_state) != action_identity(base)
    assert action_identity(write("/workspace/a.txt", b"y\n")) != action_identity(base)
    assert action_identity(write("/workspace/b.txt")) != action_identity(base)
