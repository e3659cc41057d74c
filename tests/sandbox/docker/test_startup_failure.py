"""What a session's caller is told when the agent stops during startup (no engine needed)."""

from __future__ import annotations

from executor.sandbox.docker.backend import _startup_failure


def test_an_agent_that_could_not_drop_capabilities_is_named_clearly() -> None:
    """Exit 3 (capset refused) says the agent failed closed and why, not "check the image"."""
    message = _startup_failure("s-0123456789ab", 3)
    assert message.startswith("the agent of s-0123456789ab stopped during startup (exit code 3): it could not drop")
    assert "fails closed" in message and "check that the image" not in message


def test_other_exits_point_at_the_image() -> None:
    """An unknown exit code (or none) keeps the image hint."""
    assert "check that the image runs the agent" in _startup_failure("s-0123456789ab", 127)
    assert "exit code None" in _startup_failure("s-0123456789ab", None)
