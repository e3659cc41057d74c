"""Static policy: TOML rules over commands and write paths, checked against their own examples at load (pure).

A policy file (``policy/<name>.toml``, chosen per profile by ``Profile.policy``) holds rules::

    [[command]]
    name = "sudo"
    decision = "deny"                      # allow | ask | deny
    justification = "Privilege changes are not available in a session."
    prefix = ["sudo", "doas"]             # literal leading words (argv[0] also matched by basename)
    argv = ["git ... push ... --force*"]   # word globs ('re:' prefix: a regex), '...' any run of words; anchored
    regex = ['curl[^|]*\\|\\s*sh\\b']      # Python regex searched in the raw command string
    unless_regex = ["--output"]            # the rule does not match when any of these is found
    examples.match = ["sudo ls"]
    examples.no_match = ["echo sudo"]

    [[path]]
    name = "git-hooks"
    decision = "deny"
    justification = "Hooks run on the host the next time someone uses git."
    glob = ["**/.git/hooks/**"]            # '**' any folders, '*' within one folder; {workspace}, {home}
    outside = "{workspace}"                # matches every path not at or below this folder
    unless_glob = []
    applies_to = ["write_file", "bash"]    # the default: write_file paths and the files bash commands write
    examples.match = ["{workspace}/.git/hooks/pre-commit"]
    examples.no_match = ["{workspace}/src/hooks.py"]
    examples.command_match = ["cd .git/hooks && printf x > pre-commit"]   # bash, run in {workspace}
    examples.command_no_match = ["echo x > notes.txt"]

    [[env]]
    name = "env-changes-what-runs"
    decision = "ask"
    justification = "These variables decide which code runs."
    classes = ["shell", "loader"]          # see executor.gate.env: shell, loader, search-path, interpreter, ...
    names = ["MY_PLUGIN_*"]                # name globs, in addition to the classes
    unless_names = []
    examples.match = ["BASH_ENV=/workspace/x.sh", "LD_PRELOAD=/tmp/x.so"]   # NAME=VALUE entries
    examples.no_match = ["LANG=C.UTF-8"]

Semantics:

* Command rules apply to bash actions. Path rules apply to write actions and, unless ``applies_to`` leaves
  ``bash`` out, to every file a bash command may write (output redirections and writing tools, see
  :mod:`executor.gate.shell`), resolved against the command's effective working directory: its cwd and every
  ``cd DIR`` earlier in the same string. Device sinks (``/dev/null``, ``/dev/stdout``, ``/dev/fd/N`` ...) are
  not files and are not matched. A write the host found to lie inside a git directory that is not named
  ``.git`` (``WriteAction.git_dir``: ``git init --separate-git-dir``, bare repositories) is matched both as
  written and as if that directory were named ``.git``, so the git rules hold wherever git looks.
* Env rules apply to bash actions: to each entry of the caller's env and each assignment inside the command
  string (``LD_PRELOAD=x ls``, ``env PATH=x ls``, ``export BASH_ENV=x``); ``classes`` name the classes of
  :func:`executor.gate.env.classify_env`. Independently of the rules, a static ``allow`` never decides alone
  when any such entry changes what runs: the judges are asked (see :mod:`executor.gate.gate`).
* An ``allow`` command rule only matches a command that is one simple command with no shell metacharacter
  (see :mod:`executor.gate.shell`), and only by its own first words: ``ls`` never allows ``ls; rm -rf /``.
* ``ask`` and ``deny`` command rules match every simple command the string might run: each part of a list
  or pipeline, substitutions, ``bash -c`` strings, and what wrappers such as ``sudo`` or ``env`` run.
* The strictest matching rule wins (deny > ask > allow); no match means no static decision.
* Every rule needs at least one ``examples.match``; path rules may add ``examples.command_match`` and
  ``examples.command_no_match`` (bash commands run in ``{workspace}``); each example is checked at load, so a rule that
  disagrees with its examples fails to load with a :class:`~executor.errors.ConfigError` naming the file,
  the rule and the example.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import posixpath
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from executor.config import GateSettings, Profile, parse_toml, plain_validation_message, read_toml_bytes
from executor.errors import ConfigError
from executor.gate.decision import strictest
from executor.gate.env import ENV_CLASSES, EnvClass, classify_env, split_assignment
from executor.gate.shell import (
    LINK_SOURCE,
    PROGRAM_SHELLS,
    UNPACKERS,
    ParsedCommand,
    judged_written,
    parse_command,
    path_under,
    resolve_target,
)
from executor.models import BashAction, Decision, WriteAction

__all__ = [
    "CommandRule",
    "EnvRule",
    "PathRule",
    "Policy",
    "RuleMatch",
    "StaticVerdict",
    "bash_write_paths",
    "git_dir_alias",
    "load_policy",
    "load_profile_policy",
    "policy_path",
]

_POLICY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Examples(_Spec):
    match: list[str] = Field(min_length=1)
    no_match: list[str] = []
    command_match: list[str] = []
    command_no_match: list[str] = []


class _RuleSpec(_Spec):
    name: str = Field(min_length=1, max_length=80)
    decision: Decision
    justification: str = Field(min_length=1)
    examples: _Examples


class _CommandSpec(_RuleSpec):
    prefix: list[str] = []
    argv: list[str] = []
    regex: list[str] = []
    unless_regex: list[str] = []


class _PathSpec(_RuleSpec):
    glob: list[str] = []
    outside: str | None = None
    unless_glob: list[str] = []
    applies_to: list[Literal["write_file", "bash"]] = Field(default=["write_file", "bash"], min_length=1)


class _EnvSpec(_RuleSpec):
    classes: list[EnvClass] = []
    names: list[str] = []
    unless_names: list[str] = []


class _FileSpec(_Spec):
    description: str = ""
    extends: str | None = None
    without: list[str] = []
    command: list[_CommandSpec] = []
    path: list[_PathSpec] = []
    env: list[_EnvSpec] = []


class RuleMatch(BaseModel):
    """A rule that matched an action."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    rule: str
    """The rule's name."""
    kind: Literal["command", "path"]
    """Which kind of rule: ``command`` for command and env rules (both judge a bash action), ``path`` for path
    rules (on a write, or on the files a bash command writes)."""
    decision: Decision
    """The rule's decision."""
    justification: str
    """Why the rule exists, as shown to people."""


class StaticVerdict(BaseModel):
    """What static policy alone says about an action."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    policy: str
    """Name of the policy file (its stem)."""
    policy_sha256: str
    """Hex SHA-256 of the policy file's bytes, so a journal names the exact rules that were applied."""
    decision: Decision | None
    """The strictest matching rule's decision; None when no rule matched."""
    matches: tuple[RuleMatch, ...]
    """Every matching rule, strictest first."""


def _glob_regex(pattern: str) -> re.Pattern[str]:
    out: list[str] = []
    index = 0
    while index < len(pattern):
        if pattern.startswith("**/", index):
            out.append("(?:.*/)?")
            index += 3
        elif pattern.startswith("/**", index) and index + 3 == len(pattern):
            out.append("(?:/.*)?")
            index += 3
        elif pattern.startswith("**", index):
            out.append(".*")
            index += 2
        elif pattern[index] == "*":
            out.append("[^/]*")
            index += 1
        elif pattern[index] == "?":
            out.append("[^/]")
            index += 1
        elif pattern[index] == "[":
            end = pattern.find("]", index + 2)
            if end == -1:
                out.append(re.escape("["))
                index += 1
            else:
                body = pattern[index + 1 : end].replace("\\", "\\\\")
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                index = end + 1
        else:
            out.append(re.escape(pattern[index]))
            index += 1
    return re.compile("".join(out), re.DOTALL)


def _checked_glob(where: str, pattern: str) -> re.Pattern[str]:
    try:
        return _glob_regex(pattern)
    except re.error as exc:  # a bad character class ('[z-a]')
        raise ConfigError(f"{where}: glob {pattern!r} is not a valid pattern: {exc}") from exc


def _word_match(word: str, token: str) -> bool:
    if token.startswith("re:"):
        return re.fullmatch(token[3:], word) is not None
    return fnmatch.fnmatchcase(word, token)


def _argv_match(pattern: Sequence[str], argv: Sequence[str]) -> bool:
    """Word patterns ('re:' regex or glob), '...' = any run of words; anchored at the start, open at the end."""
    if pattern and pattern[0] != "..." and not (argv and _word_match(argv[0], pattern[0])):
        return False  # cheap rejection: almost every rule fails on argv[0]
    # reachable[j]: the pattern tokens seen so far can consume exactly argv[:j].
    reachable = [True] + [False] * len(argv)
    for token in pattern:
        if token == "...":
            seen = False
            for j in range(len(argv) + 1):
                seen = seen or reachable[j]
                reachable[j] = seen
        else:
            reachable = [False] + [reachable[j] and _word_match(argv[j], token) for j in range(len(argv))]
        if not any(reachable):
            return False
    return True


@dataclass(frozen=True)
class CommandRule:
    """A compiled command rule (see the module docstring)."""

    name: str
    decision: Decision
    justification: str
    prefixes: tuple[tuple[str, ...], ...]
    argv_patterns: tuple[tuple[str, ...], ...]
    regexes: tuple[re.Pattern[str], ...]
    unless: tuple[re.Pattern[str], ...]
    origin: str = ""
    """The name of the policy file that defines the rule."""

    def matches(self, command: str, parsed: ParsedCommand | None = None) -> bool:
        """True when this rule applies to ``command``."""
        if any(pattern.search(command) for pattern in self.unless):
            return False
        if parsed is None:
            parsed = parse_command(command)
        if self.decision == "allow":
            # Allow only ever speaks for one plain simple command, by its own words as written.
            if not parsed.simple:
                return False
            first = parsed.segments[0]
            argvs: tuple[tuple[str, ...], ...] = (first, (posixpath.basename(first[0]), *first[1:]))
        else:
            argvs = parsed.candidates
        for argv in argvs:
            if any(argv[: len(prefix)] == prefix for prefix in self.prefixes):
                return True
            if any(_argv_match(pattern, argv) for pattern in self.argv_patterns):
                return True
        return any(pattern.search(command) for pattern in self.regexes)


@dataclass(frozen=True)
class PathRule:
    """A compiled path rule (see the module docstring)."""

    name: str
    decision: Decision
    justification: str
    globs: tuple[re.Pattern[str], ...]
    outside: str | None
    unless: tuple[re.Pattern[str], ...]
    origin: str = ""
    """The name of the policy file that defines the rule."""

    def matches(self, path: str) -> bool:
        """True when this rule applies to the resolved absolute ``path``."""
        path = posixpath.normpath(path)
        if path.startswith("//"):
            path = "/" + path.lstrip("/")
        if any(pattern.fullmatch(path) for pattern in self.unless):
            return False
        if any(pattern.fullmatch(path) for pattern in self.globs):
            return True
        if self.outside is not None:
            return not path_under(path, self.outside)
        return False


_SINKS = re.compile(
    r"^/dev/(null|zero|full|stdout|stderr|stdin|tty|fd/[0-9]+)$|^/proc/self/fd/[0-9]+$|^/dev/(tcp|udp)/"
)
"""Redirection targets that are not files a command writes."""


def bash_write_paths(
    parsed: ParsedCommand, *, cwd: str, home: str, workspace: str, members: Sequence[str] | None = None
) -> tuple[str, ...]:
    """The absolute paths a bash command may write that can be placed (see :func:`resolve_target`); device sinks
    such as ``/dev/null`` are left out. ``members``: the names of the archive a ``tar -x`` in it unpacks from its
    stdin (:attr:`BashAction.stdin_members`), placed in the folder it unpacks into."""
    out: dict[str, None] = {}
    targets = list(parsed.write_targets)
    for target in parsed.write_targets:
        if members and target.via in UNPACKERS and target.word.endswith("/*"):
            folder = target.word[:-2]
            for member in members:
                if member == "...":
                    continue
                # tar unpacks an absolute name under the folder; an absolute link names its path as it is.
                targets.append(dataclasses.replace(target, word=posixpath.join(folder, member.lstrip("/"))))
                if member.startswith("/"):
                    targets.append(dataclasses.replace(target, word=member, via=LINK_SOURCE))
    for target in targets:
        paths, _ = resolve_target(target, cwd=cwd, home=home)
        for path in paths:
            if judged_written(target, path, workspace=workspace, home=home) and not _SINKS.match(path):
                out[path] = None
    return tuple(out)


def git_dir_alias(path: str, git_dir: str | None) -> str | None:
    """``path`` as if the git directory ``git_dir`` holding it were named ``.git`` (None when it is not inside)."""
    if git_dir is None:
        return None
    root = git_dir.rstrip("/") or "/"
    if not path.startswith(root + "/") or posixpath.basename(root) == ".git":
        return None
    return posixpath.join(posixpath.dirname(root), ".git", path[len(root) + 1 :])


@dataclass(frozen=True)
class EnvRule:
    """A compiled env rule (see the module docstring)."""

    name: str
    decision: Decision
    justification: str
    classes: frozenset[EnvClass]
    names: tuple[str, ...]
    unless: tuple[str, ...]
    origin: str = ""
    """The name of the policy file that defines the rule."""

    def matches(self, name: str) -> bool:
        """True when this rule applies to the variable ``name``."""
        if any(fnmatch.fnmatchcase(name, glob) for glob in self.unless):
            return False
        if any(fnmatch.fnmatchcase(name, glob) for glob in self.names):
            return True
        return classify_env(name) in self.classes


@dataclass(frozen=True)
class Policy:
    """A loaded, example-checked static policy."""

    name: str
    """The file's stem."""
    sha256: str
    """Hex SHA-256 of the file's bytes."""
    description: str
    command_rules: tuple[CommandRule, ...]
    path_rules: tuple[PathRule, ...]
    env_rules: tuple[EnvRule, ...] = ()
    """Env rules (see the module docstring)."""
    bash_path_rules: tuple[PathRule, ...] = ()
    """The path rules that also apply to the files bash commands write."""
    workspace: str = "/workspace"
    """The workspace ``{workspace}`` was filled with."""
    home: str = "/home/agent"
    """The home folder ``{home}`` was filled with."""
    source: str = ""
    """The file it was loaded from (and, after ``<``, the files it extends), for messages that say what to edit."""

    def rule_file(self, rule: str) -> str:
        """The name of the policy file that defines ``rule`` (this file, or one it extends)."""
        origins = (
            {r.name: r.origin for r in self.command_rules}
            | {r.name: r.origin for r in self.path_rules}
            | {r.name: r.origin for r in self.env_rules}
        )
        return origins.get(rule) or f"{self.name}.toml"

    def evaluate(self, action: BashAction | WriteAction) -> StaticVerdict:
        """The static verdict for ``action``: the strictest matching rule, or None when nothing matched."""
        found: list[RuleMatch] = []
        if isinstance(action, BashAction):
            parsed = parse_command(action.command)
            for rule in self.command_rules:
                if rule.matches(action.command, parsed):
                    found.append(
                        RuleMatch(
                            rule=rule.name, kind="command", decision=rule.decision, justification=rule.justification
                        )
                    )
            names = [*action.env, *(name for name, _ in parsed.assignments)]
            for env_rule in self.env_rules:
                if any(env_rule.matches(name) for name in names):
                    found.append(
                        RuleMatch(
                            rule=env_rule.name,
                            kind="command",
                            decision=env_rule.decision,
                            justification=env_rule.justification,
                        )
                    )
            written = bash_write_paths(
                parsed, cwd=action.cwd, home=self.home, workspace=self.workspace, members=action.stdin_members
            )
            for path_rule in self.bash_path_rules:
                if any(path_rule.matches(path) for path in written):
                    found.append(
                        RuleMatch(
                            rule=path_rule.name,
                            kind="path",
                            decision=path_rule.decision,
                            justification=path_rule.justification,
                        )
                    )
            if action.stdin_program is not None and any(name in PROGRAM_SHELLS for name in parsed.stdin_readers):
                # A shell the command runs reads the supplied stdin as its program: the rules apply to it as to
                # the command itself ('bash' with a script on stdin is no way around them).
                program = action.model_copy(
                    update={"command": action.stdin_program, "stdin_program": None, "exec_argv": None}
                )
                found.extend(match for match in self.evaluate(program).matches if match not in found)
        else:
            alias = git_dir_alias(action.path, action.git_dir)
            for path_rule in self.path_rules:
                if path_rule.matches(action.path) or (alias is not None and path_rule.matches(alias)):
                    found.append(
                        RuleMatch(
                            rule=path_rule.name,
                            kind="path",
                            decision=path_rule.decision,
                            justification=path_rule.justification,
                        )
                    )
        order = {"deny": 0, "ask": 1, "allow": 2}
        found.sort(key=lambda match: order[match.decision])
        decision = strictest(*(match.decision for match in found)) if found else None
        return StaticVerdict(policy=self.name, policy_sha256=self.sha256, decision=decision, matches=tuple(found))


def _fill(text: str, workspace: str, home: str) -> str:
    return text.replace("{workspace}", workspace.rstrip("/")).replace("{home}", home.rstrip("/"))


def _compile_regexes(where: str, patterns: list[str]) -> tuple[re.Pattern[str], ...]:
    compiled: list[re.Pattern[str]] = []
    for pattern in patterns:
        compiled.append(_compile(where, pattern))
    return tuple(compiled)


def _compile(where: str, pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except (re.error, OverflowError, RecursionError, ValueError) as exc:  # a huge repeat count overflows
        raise ConfigError(f"{where}: regex {pattern!r} does not compile: {exc}") from exc


def _split_words(where: str, text: str) -> tuple[str, ...]:
    try:
        words = tuple(shlex.split(text))
    except ValueError as exc:
        raise ConfigError(f"{where}: pattern {text!r} does not split into words: {exc}") from exc
    if not words:
        raise ConfigError(f"{where}: empty pattern")
    for word in words:
        if word.startswith("re:"):
            _compile(where, word[3:])  # checked here, not first when a command reaches it
    return words


def _command_rule(where: str, spec: _CommandSpec, origin: str) -> CommandRule:
    if not (spec.prefix or spec.argv or spec.regex):
        raise ConfigError(f"{where}: needs at least one of 'prefix', 'argv' or 'regex'")
    return CommandRule(
        name=spec.name,
        decision=spec.decision,
        justification=spec.justification,
        prefixes=tuple(_split_words(where, text) for text in spec.prefix),
        argv_patterns=tuple(_split_words(where, text) for text in spec.argv),
        regexes=_compile_regexes(where, spec.regex),
        unless=_compile_regexes(where, spec.unless_regex),
        origin=origin,
    )


def _env_rule(where: str, spec: _EnvSpec, origin: str) -> EnvRule:
    if not (spec.classes or spec.names):
        raise ConfigError(f"{where}: needs 'classes' (any of {', '.join(ENV_CLASSES)}) or 'names'")
    if spec.examples.command_match or spec.examples.command_no_match:
        raise ConfigError(f"{where}: examples.command_match and command_no_match belong to path rules")
    return EnvRule(
        name=spec.name,
        decision=spec.decision,
        justification=spec.justification,
        classes=frozenset(spec.classes),
        names=tuple(spec.names),
        unless=tuple(spec.unless_names),
        origin=origin,
    )


def _path_rule(where: str, spec: _PathSpec, workspace: str, home: str, origin: str) -> PathRule:
    if not (spec.glob or spec.outside):
        raise ConfigError(f"{where}: needs 'glob' or 'outside'")
    outside = None
    if spec.outside is not None:
        outside = posixpath.normpath(_fill(spec.outside, workspace, home))
        if not outside.startswith("/"):
            raise ConfigError(f"{where}: 'outside' must be an absolute folder, got {spec.outside!r}")
    return PathRule(
        name=spec.name,
        decision=spec.decision,
        justification=spec.justification,
        globs=tuple(_checked_glob(where, _fill(glob, workspace, home)) for glob in spec.glob),
        outside=outside,
        unless=tuple(_checked_glob(where, _fill(glob, workspace, home)) for glob in spec.unless_glob),
        origin=origin,
    )


def _rule_line(text: str, table: str, index: int) -> int:
    """The 1-based line of the ``index``-th ``[[table]]`` header in ``text`` (0 when it is not written that way)."""
    header = re.compile(rf"^[ \t]*\[\[[ \t]*{table}[ \t]*\]\]", re.MULTILINE)
    for seen, match in enumerate(header.finditer(text)):
        if seen == index:
            return text.count("\n", 0, match.start()) + 1
    return 0


def _describe_problem(path: Path, text: str, data: object, loc: tuple[int | str, ...], message: str) -> str:
    """One validation problem, naming the rule by its name and the file line of its table, not by an index."""
    message = plain_validation_message(message)
    if message == "Extra inputs are not permitted":
        if len(loc) == 1:
            known = ", ".join(_FileSpec.model_fields)
            message = f"unknown key {loc[0]!r}; a policy file's keys are {known} ([[command]], [[path]], [[env]])"
        else:
            message = (
                f"unknown field {loc[-1]!r}; rule fields are name, decision, justification, examples and the matchers"
            )
    if len(loc) >= 2 and loc[0] in ("command", "path", "env") and isinstance(loc[1], int) and isinstance(data, dict):
        table, index = str(loc[0]), loc[1]
        rules = data.get(table)
        rule = rules[index] if isinstance(rules, list) and index < len(rules) else None
        name = rule.get("name") if isinstance(rule, dict) else None
        label = f"{table} rule {name!r}" if isinstance(name, str) else f"{table} rule #{index + 1} (no name)"
        field = ".".join(str(part) for part in loc[2:]) or "(the rule)"
        return f"  {path}:{_rule_line(text, table, index)}: {label}: {field}: {message}"
    field = ".".join(str(part) for part in loc) or "(top level)"
    return f"  {path}: {field}: {message}"


def load_policy(
    path: Path,
    *,
    workspace: str = "/workspace",
    home: str = "/home/agent",
    resolve: Callable[[str], Path] | None = None,
    _chain: tuple[Path, ...] = (),
) -> Policy:
    """Load, compile and example-check one policy file.

    Args:
        path: the TOML file.
        workspace: replaces ``{workspace}`` in path rules and their examples.
        home: replaces ``{home}`` in path rules and their examples.
        resolve: finds the file of a policy named by ``extends`` (the profile loader passes the search path's);
            None resolves it beside ``path``.

    A file may build on another: ``extends = "default"`` takes every rule of that policy, ``without = [names]``
    leaves some of them out, and the file's own rules are added (a name may not repeat one that is kept).

    Raises:
        ConfigError: the file is missing, not TOML, has an unknown or invalid field, a duplicate rule name,
            a pattern that does not compile, or a rule that disagrees with one of its examples. The message
            names the file, the rule and the example.
    """
    try:
        raw = read_toml_bytes(path)
    except FileNotFoundError:
        raise ConfigError(
            f"policy file {path} does not exist; check gate.policy_dir and the profile's policy"
        ) from None
    data = parse_toml(raw, path=path)
    text = raw.decode("utf-8")
    try:
        spec = _FileSpec.model_validate(data)
    except ValidationError as exc:
        problems = [_describe_problem(path, text, data, item["loc"], item["msg"]) for item in exc.errors()]
        raise ConfigError(f"{path}: invalid policy ({len(problems)} problem(s)):\n" + "\n".join(problems)) from exc
    names: set[str] = set()
    command_rules: list[CommandRule] = []
    path_rules: list[PathRule] = []
    bash_path_rules: list[PathRule] = []
    env_rules: list[EnvRule] = []
    base: Policy | None = None
    if spec.extends is not None:
        base = _load_base(path, spec.extends, resolve, (*_chain, path), workspace=workspace, home=home)
        kept_names = (
            {rule.name for rule in base.command_rules}
            | {rule.name for rule in base.path_rules}
            | {rule.name for rule in base.env_rules}
        )
        unknown = sorted(set(spec.without) - kept_names)
        if unknown:
            raise ConfigError(f"{path}: without names no rule of {spec.extends!r}: {', '.join(unknown)}")
        command_rules = [rule for rule in base.command_rules if rule.name not in spec.without]
        path_rules = [rule for rule in base.path_rules if rule.name not in spec.without]
        bash_path_rules = [rule for rule in base.bash_path_rules if rule.name not in spec.without]
        env_rules = [rule for rule in base.env_rules if rule.name not in spec.without]
        names = (
            {rule.name for rule in command_rules}
            | {rule.name for rule in path_rules}
            | {rule.name for rule in env_rules}
        )
    elif spec.without:
        raise ConfigError(f"{path}: 'without' needs 'extends' (it leaves out rules of the extended policy)")
    for index, command_spec in enumerate(spec.command):
        where = f"{path}:{_rule_line(text, 'command', index)}: command rule {command_spec.name!r}"
        if command_spec.name in names:
            raise ConfigError(f"{where}: duplicate rule name")
        names.add(command_spec.name)
        rule = _command_rule(where, command_spec, path.name)
        if command_spec.examples.command_match or command_spec.examples.command_no_match:
            raise ConfigError(f"{where}: examples.command_match and command_no_match belong to path rules")
        for example in command_spec.examples.match:
            if not rule.matches(example):
                raise ConfigError(f"{where}: example {example!r} is listed under examples.match but does not match")
        for example in command_spec.examples.no_match:
            if rule.matches(example):
                raise ConfigError(f"{where}: example {example!r} is listed under examples.no_match but matches")
        command_rules.append(rule)
    for index, path_spec in enumerate(spec.path):
        where = f"{path}:{_rule_line(text, 'path', index)}: path rule {path_spec.name!r}"
        if path_spec.name in names:
            raise ConfigError(f"{where}: duplicate rule name")
        names.add(path_spec.name)
        path_rule = _path_rule(where, path_spec, workspace, home, path.name)
        for example in path_spec.examples.match:
            if not path_rule.matches(_fill(example, workspace, home)):
                raise ConfigError(f"{where}: example {example!r} is listed under examples.match but does not match")
        for example in path_spec.examples.no_match:
            if path_rule.matches(_fill(example, workspace, home)):
                raise ConfigError(f"{where}: example {example!r} is listed under examples.no_match but matches")
        on_bash = "bash" in path_spec.applies_to
        if not on_bash and (path_spec.examples.command_match or path_spec.examples.command_no_match):
            raise ConfigError(f"{where}: command examples need 'bash' in applies_to")
        for wanted, examples in (
            (True, path_spec.examples.command_match),
            (False, path_spec.examples.command_no_match),
        ):
            for example in examples:
                written = bash_write_paths(
                    parse_command(example), cwd=workspace.rstrip("/") or "/", home=home, workspace=workspace
                )
                if any(path_rule.matches(target) for target in written) != wanted:
                    listed = (
                        "examples.command_match but does not match"
                        if wanted
                        else "examples.command_no_match but matches"
                    )
                    raise ConfigError(f"{where}: example {example!r} is listed under {listed}")
        path_rules.append(path_rule)
        if on_bash:
            bash_path_rules.append(path_rule)
    for index, env_spec in enumerate(spec.env):
        where = f"{path}:{_rule_line(text, 'env', index)}: env rule {env_spec.name!r}"
        if env_spec.name in names:
            raise ConfigError(f"{where}: duplicate rule name")
        names.add(env_spec.name)
        env_rule = _env_rule(where, env_spec, path.name)
        for wanted, examples in ((True, env_spec.examples.match), (False, env_spec.examples.no_match)):
            for example in examples:
                entry = split_assignment(example)
                if entry is None:
                    raise ConfigError(f"{where}: example {example!r} is not a NAME=VALUE entry")
                if env_rule.matches(entry[0]) != wanted:
                    listed = "examples.match but does not match" if wanted else "examples.no_match but matches"
                    raise ConfigError(f"{where}: example {example!r} is listed under {listed}")
        env_rules.append(env_rule)
    digest = hashlib.sha256(raw)
    if base is not None:
        digest.update(bytes.fromhex(base.sha256))  # the extended file's rules are part of what applies
    return Policy(
        name=path.stem,
        sha256=digest.hexdigest(),
        description=spec.description,
        command_rules=tuple(command_rules),
        path_rules=tuple(path_rules),
        env_rules=tuple(env_rules),
        bash_path_rules=tuple(bash_path_rules),
        workspace=workspace.rstrip("/") or "/",
        home=home.rstrip("/") or "/",
        source=str(path) if base is None else f"{path} < {base.source}",
    )


def _load_base(
    path: Path,
    name: str,
    resolve: Callable[[str], Path] | None,
    chain: tuple[Path, ...],
    *,
    workspace: str,
    home: str,
) -> Policy:
    if not _POLICY_NAME.match(name):
        raise ConfigError(f"{path}: extends {name!r} must be a policy name like 'default'")
    base_path = resolve(name) if resolve is not None else path.with_name(f"{name}.toml")
    if base_path in chain or len(chain) > 8:
        raise ConfigError(f"{path}: extends {name!r} makes a cycle ({' -> '.join(p.name for p in chain)})")
    return load_policy(base_path, workspace=workspace, home=home, resolve=resolve, _chain=chain)


def policy_path(settings: GateSettings, name: str) -> Path:
    """The file of policy ``name``: the first ``<name>.toml`` on the search path (the operator's ``gate.policy_dir``,
    then the shipped ``policy/``).

    Raises:
        ConfigError: ``name`` is not a plain file stem (a separator or a leading dot would leave the folder), or no
            folder on the search path holds it; the message lists the folders and the policies they hold.
    """
    if not _POLICY_NAME.match(name):
        raise ConfigError(f"policy name {name!r} must be a file stem like 'default' (letters, digits, '_', '-', '.')")
    folders = settings.policy_search_path
    for folder in folders:
        candidate = folder / f"{name}.toml"
        if candidate.is_file():
            return candidate
    known = sorted({p.stem for folder in folders for p in folder.glob("*.toml")})
    searched = ", ".join(str(folder) for folder in folders) or "(no policy folder)"
    raise ConfigError(
        f"no policy named {name!r} in {searched}; known policies: {', '.join(known) or 'none'} "
        "(set the profile's 'policy' to one of them, or add the file to gate.policy_dir)"
    )


def load_profile_policy(settings: GateSettings, profile: Profile) -> Policy:
    """Load the policy a profile names (and what it extends, on the same search path), workspace and home filled."""
    return load_policy(
        policy_path(settings, profile.policy),
        workspace=profile.workspace,
        home=profile.home,
        resolve=lambda name: policy_path(settings, name),
    )
