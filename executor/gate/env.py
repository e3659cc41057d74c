"""Which environment entries change what code runs (pure).

A command is more than its string: ``BASH_ENV=/workspace/x.sh`` makes bash source a file before ``ls``,
``PATH=/workspace/bin:...`` picks another ``ls``, ``BASH_FUNC_ls%%=() {...}`` replaces it outright, and
``LD_PRELOAD`` loads a library into every program. :func:`classify_env` sorts one variable name into a
:data:`EnvClass` (or None for a plain value) so that static policy (``[[env]]`` rules) and the rules judge
judge the whole action: the caller's explicit env and the assignments inside the command string itself
(``LD_PRELOAD=x ls``, ``env PATH=x ls``, ``export BASH_ENV=x; ls``).

Classes (a name takes the first that fits, in this order):

================== ====================================================================================
``shell``          the shell runs it or changes how it parses: ``BASH_ENV``, ``ENV``, ``BASH_FUNC_*``,
                   ``PROMPT_COMMAND``, ``PS0``..``PS4``, ``SHELLOPTS``, ``BASHOPTS``, ``IFS``, ``CDPATH``,
                   ``GLOBIGNORE``, ``BASH_XTRACEFD``, ``BASH_LOADABLES_PATH``, ``INPUTRC``, ``ZDOTDIR``, ``FPATH``
``loader``         the dynamic loader or libc: ``LD_*``, ``GLIBC_TUNABLES``, ``MALLOC_*``, ``GCONV_PATH``,
                   ``LOCPATH``, ``NLSPATH``, ``HOSTALIASES``, ``RESOLV_HOST_CONF``
``search-path``    where programs and modules are found: ``PATH`` and every other ``*PATH``, ``*_PATH``,
                   ``*LIB``, ``*_LIB``, ``*_HOME`` and ``*_ROOT`` name (``PYTHONPATH``, ``NODE_PATH``,
                   ``PERL5LIB``, ``RUBYLIB``, ``CLASSPATH``, ``GEM_HOME`` ...)
``interpreter``    an interpreter's start-up hooks and options: every ``PYTHON*`` name, ``PERL5OPT``,
                   ``PERL5DB``, ``PERLDB_OPTS``, ``NODE_OPTIONS``, ``RUBYOPT``, ``JAVA_TOOL_OPTIONS``,
                   ``_JAVA_OPTIONS``, ``LUA_INIT*``, ``PHPRC``, ``PHP_INI_SCAN_DIR``, ``R_PROFILE*``,
                   ``OPENSSL_CONF``/``OPENSSL_ENGINES``/``OPENSSL_MODULES``, and every ``*OPT``, ``*OPTS``,
                   ``*_OPTIONS`` and ``*FLAGS`` name (``GOFLAGS=-toolexec=...``, ``CFLAGS=-fplugin=...``);
                   except ``PYTHONUNBUFFERED``, ``PYTHONDONTWRITEBYTECODE``, ``PYTHONHASHSEED``,
                   ``PYTHONIOENCODING``, ``PYTHONUTF8``, ``PYTHONFAULTHANDLER``, ``PYTHONNOUSERSITE`` and
                   ``PYTHONSAFEPATH``, which are plain
``git``            every ``GIT_*`` name (``GIT_DIR``, ``GIT_CONFIG_*``, ``GIT_EXEC_PATH``, ``GIT_SSH_COMMAND``,
                   ``GIT_TEMPLATE_DIR`` ...) except identity and date names (``GIT_AUTHOR_*``,
                   ``GIT_COMMITTER_*``) and ``GIT_TERMINAL_PROMPT``
``program``        names of programs other programs start, and where they read their config: ``SHELL``,
                   ``CONFIG_SHELL``, ``EDITOR``, ``VISUAL``, ``PAGER``, ``MANPAGER``, ``BROWSER``, ``LESSOPEN``,
                   ``LESSCLOSE``, ``CC``, ``CXX``, ``CPP``, ``LD``, ``AR``, ``MAKE``, ``MAKEFLAGS``, ``HOME``,
                   ``XDG_CONFIG_HOME``, ``XDG_CONFIG_DIRS``, and every ``*_COMMAND``, ``*_ASKPASS``, ``*_RSH``,
                   ``*_EDITOR``, ``*_PAGER``, ``*_SHELL``, ``*_CONFIG``, ``*_CONF``, ``*_CONFIG_FILE``,
                   ``*_WRAPPER``, ``*RC`` name, and package managers' settings (``NPM_CONFIG_*``, ``YARN_*``,
                   ``PNPM_*``, ``PIP_*``, ``CARGO_*``, ``BUNDLE_*``)
``unusual``        a name bash cannot even set (``%``, ``-``, a leading digit ...): only ``env`` and the
                   caller's env can carry it, and bash imports functions under such names
================== ====================================================================================

Anything else (``FOO=1``, ``LANG``, ``TZ``, ``NO_COLOR``, ``DEBUG``) is plain. The lists over-approximate on
purpose: a plain variable classified as risky costs an approval, a risky one classified plain runs code
unseen. Imports neither trio nor docker.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["ENV_CLASSES", "EnvClass", "EnvFinding", "classify_env", "risky_env", "split_assignment"]

EnvClass = Literal["shell", "loader", "search-path", "interpreter", "git", "program", "unusual"]
"""Why an environment name changes what code runs (see the module docstring)."""

ENV_CLASSES: Final[tuple[EnvClass, ...]] = (
    "shell",
    "loader",
    "search-path",
    "interpreter",
    "git",
    "program",
    "unusual",
)
"""Every class, in the order a name is tested against them."""

_PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

_SHELL = frozenset(
    {
        "BASH_ENV",
        "ENV",
        "PROMPT_COMMAND",
        "PS0",
        "PS1",
        "PS2",
        "PS3",
        "PS4",
        "SHELLOPTS",
        "BASHOPTS",
        "IFS",
        "CDPATH",
        "GLOBIGNORE",
        "BASH_XTRACEFD",
        "BASH_LOADABLES_PATH",
        "BASH_COMPAT",
        "EXECIGNORE",
        "INPUTRC",
        "ZDOTDIR",
        "FPATH",
        "POSIXLY_CORRECT",
        "TMOUT",
    }
)
_SHELL_PREFIXES = ("BASH_FUNC_",)
_LOADER = frozenset({"GLIBC_TUNABLES", "GCONV_PATH", "LOCPATH", "NLSPATH", "HOSTALIASES", "RESOLV_HOST_CONF"})
_LOADER_PREFIXES = ("LD_", "MALLOC_", "DYLD_")
_INTERPRETER = frozenset(
    {
        "PERL5OPT",
        "PERL5DB",
        "PERLDB_OPTS",
        "PERL5LIB",
        "PERLLIB",
        "NODE_OPTIONS",
        "RUBYOPT",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "PHPRC",
        "PHP_INI_SCAN_DIR",
        "OPENSSL_CONF",
        "OPENSSL_ENGINES",
        "OPENSSL_MODULES",
        "TCLLIBPATH",
        "R_PROFILE",
        "R_PROFILE_USER",
        "R_ENVIRON",
        "R_ENVIRON_USER",
    }
)
_INTERPRETER_PREFIXES = ("PYTHON", "LUA_INIT", "LUA_PATH", "LUA_CPATH")
_INTERPRETER_SUFFIXES = ("OPT", "OPTS", "_OPTIONS", "FLAGS")
# Python settings that only change buffering, encoding, hashing or bytecode files (or restrict imports): plain.
_PYTHON_PLAIN = frozenset(
    {
        "PYTHONUNBUFFERED",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONHASHSEED",
        "PYTHONIOENCODING",
        "PYTHONUTF8",
        "PYTHONFAULTHANDLER",
        "PYTHONNOUSERSITE",
        "PYTHONSAFEPATH",
    }
)
_GIT_SAFE_PREFIXES = ("GIT_AUTHOR_", "GIT_COMMITTER_")
_GIT_SAFE = frozenset({"GIT_TERMINAL_PROMPT"})
_SEARCH_SUFFIXES = ("PATH", "LIB", "_HOME", "_ROOT")
_PROGRAM = frozenset(
    {
        "SHELL",
        "CONFIG_SHELL",
        "EDITOR",
        "VISUAL",
        "PAGER",
        "MANPAGER",
        "BROWSER",
        "LESSOPEN",
        "LESSCLOSE",
        "CC",
        "CXX",
        "CPP",
        "LD",
        "AR",
        "AS",
        "MAKE",
        "MAKEFILES",
        "MAKEFLAGS",
        "MFLAGS",
        "GNUMAKEFLAGS",
        "HOME",
        "XDG_CONFIG_HOME",
        "XDG_CONFIG_DIRS",
        "XDG_DATA_DIRS",
        "TERMINFO",
        "TERMINFO_DIRS",
    }
)
_PROGRAM_SUFFIXES = (
    "_COMMAND",
    "_ASKPASS",
    "_RSH",
    "_EDITOR",
    "_PAGER",
    "_SHELL",
    "_CONFIG",
    "_CONF",
    "_CONFIG_FILE",
    "_WRAPPER",
    "RC",
)
_PROGRAM_PREFIXES = ("NPM_CONFIG_", "YARN_", "PNPM_", "PIP_", "CARGO_", "BUNDLE_")


@dataclass(frozen=True)
class EnvFinding:
    """One environment entry that changes what code runs."""

    name: str
    """The variable's name as given."""
    value: str
    """Its value (as given; shown to people only through an escaping renderer)."""
    env_class: EnvClass
    """Why it matters."""
    source: Literal["env", "command"]
    """``env``: the caller's explicit env; ``command``: an assignment inside the command string."""


def classify_env(name: str) -> EnvClass | None:
    """The class of variable ``name``, or None when it is plain (see the module docstring)."""
    if not _PLAIN_NAME.match(name):
        # 'BASH_FUNC_ls%%' is how bash exports functions; any name bash cannot assign is suspect.
        return "shell" if name.startswith(_SHELL_PREFIXES) else "unusual"
    upper = name.upper()
    if upper in _SHELL or upper.startswith(_SHELL_PREFIXES):
        return "shell"
    if upper in _LOADER or upper.startswith(_LOADER_PREFIXES):
        return "loader"
    if upper.startswith("GIT_"):
        if upper in _GIT_SAFE or upper.startswith(_GIT_SAFE_PREFIXES):
            return None
        return "git"
    if upper in _PYTHON_PLAIN:
        return None
    if upper in _INTERPRETER or upper.startswith(_INTERPRETER_PREFIXES) or upper.endswith(_INTERPRETER_SUFFIXES):
        return "interpreter"
    if upper.endswith(_SEARCH_SUFFIXES):
        return "search-path"
    if upper in _PROGRAM or upper.endswith(_PROGRAM_SUFFIXES) or upper.startswith(_PROGRAM_PREFIXES):
        return "program"
    return None


def split_assignment(entry: str) -> tuple[str, str] | None:
    """``NAME=VALUE`` (or ``NAME+=VALUE``) split into name and value; None when ``entry`` is no assignment."""
    name, sep, value = entry.partition("=")
    if not sep or not name:
        return None
    return name.removesuffix("+"), value


def risky_env(env: Mapping[str, str], assignments: Iterable[tuple[str, str]] = ()) -> tuple[EnvFinding, ...]:
    """Every entry of the caller's ``env`` and of the command's own ``assignments`` that changes what runs."""
    found: list[EnvFinding] = []
    for source, items in (("env", env.items()), ("command", assignments)):
        for name, value in items:
            env_class = classify_env(name)
            if env_class is not None:
                found.append(
                    EnvFinding(
                        name=name,
                        value=value,
                        env_class=env_class,
                        source="env" if source == "env" else "command",
                    )
                )
    return tuple(found)
