"""Environment classification: which names change what code runs (pure)."""

from __future__ import annotations

import pytest

from executor.gate.env import ENV_CLASSES, classify_env, risky_env, split_assignment


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("BASH_ENV", "shell"),
        ("ENV", "shell"),
        ("BASH_FUNC_ls%%", "shell"),
        ("BASH_FUNC_ls()", "shell"),
        ("PROMPT_COMMAND", "shell"),
        ("PS4", "shell"),
        ("SHELLOPTS", "shell"),
        ("BASHOPTS", "shell"),
        ("IFS", "shell"),
        ("LD_PRELOAD", "loader"),
        ("MAKEFILES", "program"),
        ("LD_LIBRARY_PATH", "loader"),
        ("LD_AUDIT", "loader"),
        ("GLIBC_TUNABLES", "loader"),
        ("GCONV_PATH", "loader"),
        ("PATH", "search-path"),
        ("NODE_PATH", "search-path"),
        ("CLASSPATH", "search-path"),
        ("RUBYLIB", "search-path"),
        ("GEM_HOME", "search-path"),
        ("PYTHONSTARTUP", "interpreter"),
        ("PYTHONPATH", "interpreter"),
        ("PYTHONHOME", "interpreter"),
        ("PYTHONWARNINGS", "interpreter"),
        ("PERL5OPT", "interpreter"),
        ("PERL5LIB", "interpreter"),
        ("NODE_OPTIONS", "interpreter"),
        ("RUBYOPT", "interpreter"),
        ("JAVA_TOOL_OPTIONS", "interpreter"),
        ("MAVEN_OPTS", "interpreter"),
        ("OPENSSL_CONF", "interpreter"),
        ("GIT_DIR", "git"),
        ("GIT_CONFIG_COUNT", "git"),
        ("GIT_CONFIG_KEY_0", "git"),
        ("GIT_CONFIG_PARAMETERS", "git"),
        ("GIT_EXEC_PATH", "git"),
        ("GIT_SSH_COMMAND", "git"),
        ("GIT_TEMPLATE_DIR", "git"),
        ("EDITOR", "program"),
        ("PAGER", "program"),
        ("LESSOPEN", "program"),
        ("HOME", "program"),
        ("XDG_CONFIG_HOME", "search-path"),
        ("XDG_CONFIG_DIRS", "program"),
        ("RSYNC_RSH", "program"),
        ("SUDO_ASKPASS", "program"),
        ("NPMRC", "program"),
        ("GOFLAGS", "interpreter"),
        ("CFLAGS", "interpreter"),
        ("RUSTC_WRAPPER", "program"),
        ("NPM_CONFIG_SCRIPT_SHELL", "program"),
        ("PIP_CONFIG_FILE", "program"),
        ("PYTHONBREAKPOINT", "interpreter"),
        ("PYTHONUNBUFFERED", None),
        ("PYTHONDONTWRITEBYTECODE", None),
        ("NODE_ENV", None),
        ("1BAD", "unusual"),
        ("A-B", "unusual"),
        ("LANG", None),
        ("LC_ALL", None),
        ("TZ", None),
        ("NO_COLOR", None),
        ("DEBUG", None),
        ("CI", None),
        ("GIT_AUTHOR_NAME", None),
        ("GIT_COMMITTER_EMAIL", None),
    ],
)
def test_classification(name: str, expected: str | None) -> None:
    """Each name lands in the class the module docstring promises, and plain names in none."""
    assert classify_env(name) == expected


def test_classification_ignores_case_of_the_name() -> None:
    """A lower-case spelling of a risky name is still risky (some programs read either)."""
    assert classify_env("ld_preload") == "loader"
    assert classify_env("bash_env") == "shell"


def test_every_class_is_listed() -> None:
    """The classes a policy file can name are exactly the ones the classifier returns."""
    assert set(ENV_CLASSES) == {"shell", "loader", "search-path", "interpreter", "git", "program", "unusual"}


def test_risky_env_reports_both_sources() -> None:
    """Entries from the caller's env and from the command's own assignments are both found, with their source."""
    found = risky_env({"PATH": "/w/bin", "LANG": "C"}, [("BASH_ENV", "/w/x"), ("FOO", "1")])
    assert [(f.name, f.env_class, f.source) for f in found] == [
        ("PATH", "search-path", "env"),
        ("BASH_ENV", "shell", "command"),
    ]


@pytest.mark.parametrize(
    ("entry", "expected"),
    [("A=1", ("A", "1")), ("A+=x", ("A", "x")), ("A=", ("A", "")), ("A=b=c", ("A", "b=c")), ("A", None), ("=x", None)],
)
def test_split_assignment(entry: str, expected: tuple[str, str] | None) -> None:
    """NAME=VALUE splits at the first '='; '+=' appends to the same name."""
    assert split_assignment(entry) == expected
