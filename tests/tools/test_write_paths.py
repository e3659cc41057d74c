"""Write-path validation (executor/tools/paths.py): pure, before anything reaches a container."""

from __future__ import annotations

import pytest

import executor.tools.paths as paths_module
from executor.errors import PathRejected
from executor.tools.paths import denial_rule, resolve_write_path

WS = "/workspace"
HOME = "/home/agent"


def resolve(path: str, **kwargs: bool) -> str:
    return resolve_write_path(path, workspace=WS, home=HOME, max_path_chars=4096, max_component_chars=255, **kwargs)


@pytest.mark.parametrize(
    ("given", "resolved"),
    [
        ("a.txt", "/workspace/a.txt"),
        ("src/./pkg//mod.py", "/workspace/src/pkg/mod.py"),
        ("src/../b.txt", "/workspace/b.txt"),
        ("/workspace/x/y", "/workspace/x/y"),
        ("./notes.md", "/workspace/notes.md"),
        ("dir with spaces/ünïcødé.txt", "/workspace/dir with spaces/ünïcødé.txt"),
    ],
)
def test_relative_paths_resolve_against_the_workspace(given: str, resolved: str) -> None:
    """Relative paths land in the workspace, normalised; '..' that stays inside is resolved by name."""
    assert resolve(given) == resolved


@pytest.mark.parametrize(
    ("given", "fragment"),
    [
        ("", "the path is empty"),
        ("   ", "the path is empty"),
        ("a\0b", "contains a NUL byte"),
        ("a\nb", "contains a newline or carriage return"),
        ("a\rb", "contains a newline or carriage return"),
        ("a\x1bb", "contains a control character"),
        ("bad\udcffname", "is not valid UTF-8"),
        ("../etc/passwd", "climbs out of the workspace with '..'"),
        ("a/../../x", "climbs out of the workspace with '..'"),
        ("/../etc/x", "climbs out of / with '..'"),
        ("~/../../x", "climbs out of your home with '..'"),
        ("x" * 5000, "is longer than 4096 characters (write.max_path_chars)"),
        ("d/" + "n" * 256, "has a component longer than 255 characters"),
        ("d/" + "é" * 200, "has a component longer than 255 characters"),
        ("dir/", "names a directory"),
        ("dir/..", "names a directory"),
        (".", "names a directory"),
        ("/workspace", "names a directory"),
        ("/", "names a directory"),
    ],
)
def test_malformed_paths_are_rejected_with_a_fix(given: str, fragment: str) -> None:
    """NUL, newline, control characters, '..' escapes, over-long paths and directories are refused, saying why."""
    with pytest.raises(PathRejected, match=r"^(path .* )?" + fragment.replace("(", r"\(").replace(")", r"\)")):
        resolve(given)


def test_outside_the_workspace_is_refused_unless_allowed() -> None:
    """An absolute path outside the workspace is refused by default and accepted when the switch allows it."""
    with pytest.raises(PathRejected, match=r"resolves to /etc/motd, outside the workspace; write under /workspace"):
        resolve("/etc/motd")
    with pytest.raises(PathRejected, match="outside the workspace"):
        resolve("/workspace/../etc/motd")
    with pytest.raises(PathRejected, match="outside the workspace"):
        resolve("/workspace-other/f")
    assert resolve("/etc/motd", allow_outside_workspace=True) == "/etc/motd"
    assert resolve("~/notes", allow_outside_workspace=True) == "/home/agent/notes"


@pytest.mark.parametrize(
    ("given", "rule"),
    [
        (".git/hooks/pre-commit", ".git/hooks/"),
        ("vendor/lib/.git/hooks/post-checkout", ".git/hooks/"),
        (".git/config", ".git/config"),
        ("sub/.git/config", ".git/config"),
        (".bashrc", "shell rc files"),
        ("deep/dir/.zprofile", "shell rc files"),
        ("~/.bash_profile", "shell rc files"),
        ("~/.ssh/authorized_keys", "~/.ssh/"),
    ],
)
def test_builtin_denials_name_their_rule(given: str, rule: str) -> None:
    """Hooks, git config, shell rc files and ~/.ssh are refused by default, naming the rule."""
    with pytest.raises(PathRejected, match=f"denied by the built-in rule '{rule}'"):
        resolve(given, allow_outside_workspace=True)


def test_builtin_denials_can_be_switched_off() -> None:
    """With builtin_denials off (the gate's policy takes over), the same paths resolve."""
    assert resolve(".git/hooks/pre-commit", builtin_denials=False) == "/workspace/.git/hooks/pre-commit"
    assert resolve("~/.ssh/config", builtin_denials=False, allow_outside_workspace=True) == "/home/agent/.ssh/config"


def test_near_misses_of_denials_are_allowed() -> None:
    """Names that only resemble a denied path are not denied."""
    for ok in (".git/HEAD", "hooks/x", ".github/config", "bashrc", ".ssh-notes/x", "git/hooks/x"):
        assert denial_rule(resolve(ok), home=HOME) is None, ok


def test_settings_limits_apply() -> None:
    """The character limits come from the caller (write.max_path_chars, write.max_component_chars)."""
    with pytest.raises(PathRejected, match="longer than 20 characters"):
        resolve_write_path("a" * 21, workspace=WS, home=HOME, max_path_chars=20, max_component_chars=255)
    with pytest.raises(PathRejected, match="component longer than 8"):
        resolve_write_path("abcdefghi", workspace=WS, home=HOME, max_path_chars=4096, max_component_chars=8)


def test_public_names() -> None:
    """The module exports exactly its public names."""
    assert sorted(paths_module.__all__) == ["BUILTIN_DENIALS", "SHELL_RC_FILES", "denial_rule", "resolve_write_path"]
