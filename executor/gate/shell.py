"""A conservative reading of a bash command string, for policy rules and the rules judge (pure).

This is not a shell parser. It answers two questions safely:

* :func:`is_simple` — is the command one simple command with no shell metacharacter at all? Only such a
  command may be *allowed* by a rule; anything compound, redirected, substituted or escaped is not simple.
* :func:`parse_command` — which simple commands might run? The reading over-approximates: it splits on every
  control operator, also inside quotes, descends into ``$(...)``, backticks, ``bash -c``/``eval`` strings,
  and strips wrappers (``sudo``, ``env``, ``nohup``, ``xargs`` ...), so that deny and ask rules see every
  command a hostile string could hide. Seeing too many segments only makes a verdict stricter.

Beyond the commands, the reading reports what else decides the action's effect:

* ``assignments``: every ``NAME=VALUE`` the string sets (prefix assignments, bare ones, ``env NAME=VALUE``,
  ``export``/``declare``/``local``/``readonly``/``typeset`` arguments, ``printf -v NAME``, ``read NAME``), so the
  environment classification (:mod:`executor.gate.env`) sees ``LD_PRELOAD=x ls`` as it sees ``--env LD_PRELOAD=x``;
* ``write_targets``: every file the string may write (output redirections and the operands of writing tools such
  as ``tee``, ``cp``, ``mv``, ``dd of=``, ``sed -i``), each with the working directories it may be resolved in:
  a ``cd DIR`` (or ``pushd``) earlier in the string adds ``DIR`` to the candidates (the reading over-approximates
  control flow: the directory before the ``cd`` stays a candidate), and a ``cd`` to a computed directory makes the
  directory unknown. :func:`resolve_target` turns a target into absolute paths;
* ``inline_code``: code given to an interpreter on its command line (``python3 -c``, ``perl -e``, ``node -e``,
  ``ruby -e``, ``php -r``, ``lua -e``, ``python3 -`` reading stdin ...). What such code writes is unknown to a text
  reading; the judge treats it so;
* ``generated_code``: a shell (or ``source``/``.``, or an interpreter) that reads its program from text the string
  itself makes: from a pipe (``... | sh``, also behind wrappers and groups: ``| command sh``, ``| env bash``,
  ``| (bash)``, ``| { bash; }``, ``| exec sh``) or from a process substitution (``bash <(...)``, ``. <(...)``,
  ``bash < <(...)``), with the commands that make that text, so a judge can tell a download or a decoded payload
  run unseen from a plain pipe into a shell.
"""

from __future__ import annotations

import collections
import fnmatch
import itertools
import posixpath
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "AGENT_PATH",
    "GIT_HOOK_NAMES",
    "GIT_TREE_WRITERS",
    "LINK_SOURCE",
    "PROGRAM_SHELLS",
    "SHELLS",
    "STARTUP_NAMES",
    "UNPACKERS",
    "GeneratedCode",
    "ParsedCommand",
    "WriteTarget",
    "expand_braces",
    "is_simple",
    "judged_written",
    "parse_command",
    "path_under",
    "resolve_target",
    "target_variants",
]

_PUNCTUATION = "();<>|&`\n"
_MAX_DEPTH = 4
_MAX_NESTING = 64
"""Most substitutions inside one another the tokenizer follows (deeper: not understood, never allowed)."""
# Past this many simple commands the reading stops and reports the command as not understood: a hostile
# string of 100k tiny commands must not make the gate slow, and "not understood" is never allowed.
_MAX_SEGMENTS = 512
_MAX_WORDS = 4096
# Characters that make a command more than one plain simple command (or hide one): control operators,
# redirections, substitutions, escapes, grouping, and every control character.
_NOT_SIMPLE = re.compile(r"[;&|<>()$`\\{}\x00-\x08\x0a-\x1f\x7f]")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\[[^\]]*\])?\+?=")
_DEFAULT_ASSIGNMENT = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*):?=")
"""``${NAME:=VALUE}`` / ``${NAME=VALUE}``: an expansion that assigns."""
SHELLS = frozenset(
    {"sh", "bash", "dash", "zsh", "ksh", "ash", "busybox", "rbash", "mksh", "lksh", "posh", "yash", "ksh93", "pdksh"}
)
"""The shells the gate knows by name (their `-c` strings, and the programs they read, are read as commands)."""
PROGRAM_SHELLS = SHELLS | {"su", "source", "."}
"""What runs a program in shell: a program it reads (stdin, a pipe) is a command to judge as one."""
STARTUP_NAMES = frozenset(
    {".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile", ".zshrc", ".zshenv", ".zprofile",
     ".zlogin", ".kshrc", ".cshrc", ".tcshrc", ".gitconfig"}
)  # fmt: skip
"""Shell start-up and git config files of a home: what they hold runs in every later shell or git call."""
_RESERVED = frozenset({"!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "time"})
# Wrapper -> how many non-option arguments it takes before the wrapped command.
_WRAPPERS: dict[str, int] = {
    "sudo": 0,
    "doas": 0,
    "env": 0,
    "nohup": 0,
    "nice": 0,
    "ionice": 0,
    "stdbuf": 0,
    "command": 0,
    "builtin": 0,
    "exec": 0,
    "xargs": 0,
    "setsid": 0,
    "unbuffer": 0,
    "chroot": 1,
    "timeout": 1,
    "watch": 0,
    "strace": 0,
    "busybox": 0,
    "flock": 1,
    "su": 0,
    "coproc": 1,
    "taskset": 1,
    "prlimit": 0,
    "setpriv": 0,
    "chrt": 1,
    "numactl": 0,
    "fakeroot": 0,
    "eatmydata": 0,
    "ltrace": 0,
    "valgrind": 0,
    "faketime": 1,
    "systemd-run": 0,
    "runuser": 0,
    "catchsegv": 0,
    "nocache": 0,
    "cpulimit": 0,
}
# Wrappers' options that take the next word as their value (so that value is not taken for the wrapped command).
_WRAPPER_VALUES: dict[str, tuple[str, frozenset[str]]] = {
    "env": ("uCS", frozenset({"--unset", "--chdir", "--split-string"})),
    "timeout": ("ks", frozenset({"--kill-after", "--signal"})),
    "stdbuf": ("ioe", frozenset({"--input", "--output", "--error"})),
    "nice": ("n", frozenset({"--adjustment"})),
    "ionice": ("cnp", frozenset({"--class", "--classdata", "--pid"})),
    "flock": ("wEc", frozenset({"--timeout", "--wait", "--conflict-exit-code", "--command"})),
    "xargs": ("dnILPsaEe", frozenset({"--delimiter", "--max-args", "--max-lines", "--max-procs", "--max-chars",
                                      "--arg-file", "--eof", "--replace"})),
    "sudo": ("ugCDhprtUT", frozenset({"--user", "--group", "--close-from", "--chdir", "--host", "--prompt",
                                       "--role", "--type", "--other-user", "--command-timeout"})),
    "doas": ("uC", frozenset()),
    "su": ("sgGw", frozenset({"--shell", "--group", "--supp-group", "--whitelist-environment"})),
    "strace": ("eopsuPIbEX", frozenset()),
    "ltrace": ("eopsuAnl", frozenset()),
    "watch": ("nd", frozenset({"--interval"})),
    "chroot": ("", frozenset({"--userspec", "--groups"})),
    "taskset": ("", frozenset()),
    "cpulimit": ("lpe", frozenset({"--limit", "--pid", "--exe"})),
    "runuser": ("ugGs", frozenset({"--user", "--group", "--supp-group", "--shell"})),
    "systemd-run": ("pEu", frozenset({"--property", "--setenv", "--unit", "--uid", "--gid", "--working-directory"})),
}  # fmt: skip
# Builtins whose arguments may be assignments (export NAME=VALUE, declare -x NAME=VALUE ...).
_DECLARERS = frozenset({"export", "declare", "typeset", "local", "readonly"})
# Tools that write the files they name: which operands are written.
_ALL_OPERANDS = frozenset({"tee", "touch", "truncate", "install", "mkfifo", "mknod", "chmod", "chown", "chgrp"})
_LAST_OPERAND = frozenset({"cp", "mv", "ln", "rsync", "install"})
_INTERPRETER = re.compile(
    r"^(python[0-9.]*|pypy[0-9.]*|perl[0-9.]*|ruby[0-9.]*|node|nodejs|deno|bun|php[0-9.]*|lua[0-9.]*|luajit|Rscript|tclsh[0-9.]*|jshell|osascript|awk|gawk|mawk|nawk)$"
)
# Flags after which the next word is code (and combined short flags that end in one of these letters).
_CODE_FLAGS = {
    "python": "c",
    "pypy": "c",
    "perl": "eE",
    "ruby": "e",
    "node": "ep",
    "nodejs": "ep",
    "deno": "",
    "bun": "e",
    "php": "rR",
    "lua": "e",
    "luajit": "e",
    "Rscript": "e",
    "tclsh": "",
    "jshell": "",
    "osascript": "e",
}
_LONG_CODE_FLAGS = frozenset({"--eval", "--print", "--command", "--expression", "--exec"})
_MAX_DIRS = 16
_SED_W: Final = re.compile(r"[wW][ \t]*([^\s;}]+)")
_SED_FLAGS: Final = frozenset("gpIiMme0123456789")


def _sed_writes(script: str) -> list[str]:
    """The files a sed script's ``w FILE`` commands and ``s/../../w FILE`` flags write (over-approximated: more
    targets only make a verdict stricter). Linear: a regex looking back over flag runs backtracked on hostile
    scripts."""
    out: list[str] = []
    for found in _SED_W.finditer(script):
        before = found.start()
        while before > 0 and script[before - 1] in _SED_FLAGS:
            before -= 1
        if before == 0 or not script[before - 1].isalpha():
            out.append(found.group(1))
    return out


# Commands whose -o is not an output file (an option string, an operator, a flag without a value).
_NOT_OUTPUT_OPTION = frozenset(
    {"mount", "ssh", "scp", "sftp", "find", "grep", "egrep", "fgrep", "rg", "ls", "ps", "lsof", "pgrep", "pkill",
     "bash", "sh", "dash", "zsh", "ksh", "set", "shopt", "read", "getopts", "xargs", "nice", "su", "sudo", "env"}
)  # fmt: skip
GIT_HOOK_NAMES = frozenset(
    {
        "applypatch-msg", "pre-applypatch", "post-applypatch", "pre-commit", "pre-merge-commit",
        "prepare-commit-msg", "commit-msg", "post-commit", "pre-rebase", "post-checkout", "post-merge",
        "pre-push", "pre-receive", "update", "proc-receive", "post-receive", "post-update",
        "reference-transaction", "push-to-checkout", "pre-auto-gc", "post-rewrite", "sendemail-validate",
        "fsmonitor-watchman", "p4-changelist", "p4-prepare-changelist", "p4-post-changelist", "p4-pre-submit",
        "post-index-change",
    }
)  # fmt: skip
"""The file names git runs as hooks (``githooks(5)``): a file by one of these names in any ``hooks`` folder
may be a hook, whichever folder git is told to use."""
_MAX_UNWRAPPED = 96
"""Most forms one segment unwraps into."""
_CARED_NAMES = (
    ".git", "hooks", "config", "config.worktree", ".ssh", "authorized_keys", "sudoers", *sorted(STARTUP_NAMES),
    *sorted(GIT_HOOK_NAMES),
)  # fmt: skip
"""The path names a write target's glob is checked against: what it may match of them is judged as written."""


@dataclass(frozen=True)
class ParsedCommand:
    """What a command string might run."""

    parsed: bool
    """False when the string does not tokenize (unbalanced quotes) or nests too deep; then ``segments`` is
    incomplete and the command must not be treated as understood."""
    simple: bool
    """True when the command is one simple command with no shell metacharacter (see :func:`is_simple`)."""
    segments: tuple[tuple[str, ...], ...]
    """Argv of every simple command found, with argv[0] as written (quotes removed)."""
    candidates: tuple[tuple[str, ...], ...]
    """Every argv a rule should be matched against: each segment, its argv[0] reduced to a basename, and the
    command each wrapper (``sudo``, ``env``, ``xargs`` ...) would run."""
    redirect_targets: tuple[str, ...]
    """Words that follow an output redirection (``>``, ``>>``, ``>|``, ``&>``, ``<>``): files the command may write.
    Input redirections (``<``, here-documents and here-strings) only read, so their words are not listed."""
    write_targets: tuple[WriteTarget, ...] = ()
    """Every file the string may write (redirections and writing tools), with the directories it may be in."""
    assignments: tuple[tuple[str, str], ...] = ()
    """Every ``(NAME, VALUE)`` the string assigns or exports (see the module docstring)."""
    inline_code: tuple[tuple[str, str], ...] = ()
    """``(interpreter, code)`` for code given on an interpreter's command line; ``code`` is ``-`` for stdin."""
    cd_dirs: tuple[str, ...] = ()
    """Every directory a ``cd``/``pushd`` in the string may enter, relative to the start (``""``) or absolute."""
    cd_unknown: bool = False
    """True when a ``cd``/``pushd`` goes to a computed directory (``cd "$X"``, ``cd -``): later relative paths
    cannot be placed."""
    generated_code: tuple[GeneratedCode, ...] = ()
    """Every shell, ``source`` or interpreter that reads its program from text the string makes (see the module
    docstring)."""
    stdin_readers: tuple[str, ...] = ()
    """The shells, ``source``/``.`` and interpreters that may read their program from the command's own stdin (no
    pipe within the string feeds them): ``bash``, ``sh -s``, ``bash /dev/stdin``, ``python3 -``. Supplied stdin
    is then the program that runs, and is judged as one."""


@dataclass(frozen=True)
class GeneratedCode:
    """A program read from text the command string itself makes."""

    runner: str
    """What runs it: a shell's name (``bash``), ``source``/``.``, or an interpreter's (``python3``)."""
    sources: tuple[str, ...]
    """The names of the commands whose output it may read (every command earlier in its pipeline, or every
    command in the process substitution), reduced to basenames and unwrapped."""


@dataclass(frozen=True)
class WriteTarget:
    """A file a command may write."""

    word: str
    """The target as written (quotes removed)."""
    dirs: tuple[str, ...]
    """Working directories it may be resolved in: ``""`` is the command's own cwd, other entries are relative to it
    or absolute."""
    dir_unknown: bool
    """True when an earlier ``cd`` went somewhere the reading cannot know."""
    via: str
    """What writes it: ``redirect``, the tool's name, or ``link`` for what a link it makes names."""


def judged_written(target: WriteTarget, path: str, *, workspace: str, home: str) -> bool:
    """Whether ``path``, a placing of ``target``, is judged as written. What a link names counts where the session
    user writes (in the workspace or the home): a link to ``.git`` carries later writes into it, while one to
    ``/usr/bin/python3`` carries none the image would take."""
    return target.via != LINK_SOURCE or path_under(path, workspace) or path_under(path, home)


def path_under(path: str, root: str) -> bool:
    """Whether the absolute, normalised ``path`` is ``root`` or inside it."""
    root = root.rstrip("/") or "/"
    return root == "/" or path == root or path.startswith(root + "/")


def resolve_target(target: WriteTarget, *, cwd: str, home: str) -> tuple[tuple[str, ...], bool]:
    """The absolute, normalised paths ``target`` may name when the command starts in ``cwd``.

    Returns:
        ``(paths, known)``: ``known`` is False when a part cannot be placed (a ``$`` other than ``$HOME``, a
        computed ``cd``); ``paths`` then holds what could still be placed (for example ``<unknown>/pre-commit``
        is not included, only the name is meaningful).
    """
    word = _home(target.word, home)
    if "$" in word or "`" in word:
        return (), False
    if word.startswith("/"):
        return (_norm(word),), True
    out: dict[str, None] = {}
    for folder in target.dirs:
        folder = _home(folder, home)
        base = folder if folder.startswith("/") else posixpath.join(cwd, folder)
        out[_norm(posixpath.join(base, word))] = None
    return tuple(out), not target.dir_unknown


def _home(word: str, home: str) -> str:
    if word == "~" or word.startswith("~/"):
        word = home + word[1:]
    for spelling in ("${HOME}", "$HOME"):
        if word.startswith(spelling):
            word = home + word[len(spelling) :]
    return word


def _norm(path: str) -> str:
    path = posixpath.normpath(path)
    return "/" + path.lstrip("/") if path.startswith("//") else path


@dataclass
class _Reading:
    """What :func:`_collect` accumulates, in the order the string would run it."""

    segments: list[tuple[str, ...]]
    redirects: list[str]
    targets: list[WriteTarget]
    assignments: list[tuple[str, str]]
    code: list[tuple[str, str]]
    dirs: list[str]
    dir_unknown: bool = False
    generated: list[GeneratedCode] = field(default_factory=list)
    stdin_readers: list[str] = field(default_factory=list)
    fed: list[str] = field(default_factory=list)
    """Every here-string and here-document body (a pipe may carry them into a shell: ``cat <<EOF | bash``)."""

    def target(self, word: str, via: str) -> None:
        for variant in target_variants(word):
            if len(self.targets) < _MAX_SEGMENTS:
                self.targets.append(
                    WriteTarget(word=variant, dirs=tuple(self.dirs), dir_unknown=self.dir_unknown, via=via)
                )


_MAX_VARIANTS = 32
"""Most paths one written word is read as (its brace expansions, and what its glob patterns may match)."""
_BRACES = re.compile(r"\{([^{}]*)\}")
"""An innermost brace group (its content holds no brace; linear to find). A comma in it makes it an expansion."""
_MAX_BRACE_PASSES = 64
"""Most brace groups expanded in one word (hostile words of thousands are left as they are past it)."""
_GLOB = re.compile(r"[*?\[]")
_CARED_DEPTH = 4
"""How many of a target's last components are matched against the names a gate cares about."""


def expand_braces(word: str) -> list[str]:
    """The words bash's brace expansion makes of ``word`` (``{/*,x}`` -> ``/*``, ``x``; ``/{a..c}`` -> ``/a``, ``/b``,
    ``/c``), at most :data:`_MAX_VARIANTS`; ``[word]`` when it has none."""
    if "{" not in word:
        return [word]
    expanded = [word]
    for _ in range(_MAX_BRACE_PASSES):
        grown: list[str] = []
        changed = False
        for item in expanded:
            found = _next_brace(item)
            if found is None:
                grown.append(item)
                continue
            start, end, parts = found
            grown.extend(item[:start] + part + item[end:] for part in parts)
            changed = True
        expanded = list(dict.fromkeys(grown))[:_MAX_VARIANTS]
        if not changed or len(expanded) >= _MAX_VARIANTS:
            break
    return expanded


def _next_brace(item: str) -> tuple[int, int, list[str]] | None:
    """The first innermost brace group of ``item`` that expands (a comma list or a valid sequence): its span and
    its words; None when there is none."""
    for found in _BRACES.finditer(item):
        content = found.group(1)
        if "," in content:
            return found.start(), found.end(), content.split(",")
        sequence = _SEQUENCE.fullmatch(found.group(0))
        if sequence is not None:
            first, last = (sequence.group(1), sequence.group(2)) if sequence.group(1) else sequence.group(3, 4)
            return found.start(), found.end(), _sequence(first, last)
    return None


_SEQUENCE = re.compile(r"\{(?:(-?[0-9]{1,6})\.\.(-?[0-9]{1,6})|([A-Za-z])\.\.([A-Za-z]))(?:\.\.-?[0-9]{1,6})?\}")
"""A brace sequence bash expands: both ends numbers (at most six digits) or both single letters."""


def _sequence(first: str, last: str) -> list[str]:
    """A brace sequence's words (``{a..e}``, ``{1..3}``), at most :data:`_MAX_VARIANTS`."""
    if first.lstrip("-").isdigit() and last.lstrip("-").isdigit():
        low, high = int(first), int(last)
        step = 1 if high >= low else -1
        return [str(n) for n in itertools.islice(range(low, high + step, step), _MAX_VARIANTS)]
    if first.isalpha() and last.isalpha():
        low, high = ord(first), ord(last)
        step = 1 if high >= low else -1
        return [chr(n) for n in itertools.islice(range(low, high + step, step), _MAX_VARIANTS)]
    return [f"{{{first}..{last}}}"]


def target_variants(word: str) -> list[str]:
    """``word`` and the paths the shell may make of it: each brace expansion (``.git/{hooks,x}/f``), and each
    name a gate cares about that a glob component may match (``.git/hook?`` may be ``.git/hooks``)."""
    expanded = expand_braces(word)
    out = dict.fromkeys(expanded)
    for item in expanded:
        parts = item.split("/")
        # A bare '*' stays as it is: it already stands for a name nobody can know (see WriteTarget). The names a gate
        # cares about are at most three deep ('.git/hooks/pre-commit'): only the last parts are matched.
        choices = [
            [part, *(name for name in _CARED_NAMES if fnmatch.fnmatchcase(name, part))]
            if part != "*" and index >= len(parts) - _CARED_DEPTH and _GLOB.search(part)
            else [part]
            for index, part in enumerate(parts)
        ]
        if all(len(choice) == 1 for choice in choices):
            continue
        for combination in itertools.islice(itertools.product(*choices), _MAX_VARIANTS):
            out["/".join(combination)] = None
    return list(out)[:_MAX_VARIANTS]


def is_simple(command: str) -> bool:
    """True when ``command`` is one simple command without any shell metacharacter or control character."""
    if not command.strip() or _NOT_SIMPLE.search(command):
        return False
    return parse_command(command).simple


def parse_command(command: str) -> ParsedCommand:
    """Split ``command`` into every simple command it might run (see the module docstring)."""
    reading = _Reading(segments=[], redirects=[], targets=[], assignments=[], code=[], dirs=[""])
    ok = _collect(command, 0, reading)
    if any(generated.runner in PROGRAM_SHELLS for generated in reading.generated):
        # Text the string feeds a command may reach a shell down a pipe ('cat <<EOF | bash'): read as commands.
        for text in list(reading.fed):
            ok &= _collect(text, 1, reading)
    segments = reading.segments
    candidates: dict[tuple[str, ...], None] = {}
    cut: list[bool] = []
    for segment in segments:
        for form in (segment, _brace_expanded(segment)):
            for candidate in _unwrap(form, cut):
                candidates[candidate] = None
    ok = ok and not cut
    simple = ok and len(segments) == 1 and bool(command.strip()) and not _NOT_SIMPLE.search(command)
    return ParsedCommand(
        parsed=ok,
        simple=simple,
        segments=tuple(segments),
        candidates=tuple(candidates),
        redirect_targets=tuple(reading.redirects),
        write_targets=tuple(reading.targets),
        assignments=tuple(reading.assignments),
        inline_code=tuple(reading.code),
        cd_dirs=tuple(reading.dirs),
        cd_unknown=reading.dir_unknown,
        generated_code=tuple(reading.generated),
        stdin_readers=tuple(dict.fromkeys(reading.stdin_readers)),
    )


def _command_start(words: Sequence[str]) -> int:
    """The index of a simple command's program word: after reserved words (``if``, ``{``, ``!``, ``time`` and its
    ``-p``/``--``, ``function NAME``) and assignments (``A=1``, ``a[0]=1``)."""
    index, length = 0, len(words)
    while index < length:
        word = words[index]
        if word == "time":
            index += 1
            while index < length and words[index] in ("-p", "--"):
                index += 1
        elif word == "function" and index + 1 < length:
            index += 2  # 'function NAME { ...; }': the body's commands follow
        elif word in _RESERVED or _ASSIGNMENT.match(word):
            index += 1
        else:
            break
    return index


def _brace_expanded(segment: tuple[str, ...]) -> tuple[str, ...]:
    """``segment`` with each word brace-expanded in place (``rm -rf {/*,x}`` -> ``rm -rf /* x``), so rules see the
    words the command runs with; bounded by :data:`_MAX_WORDS`."""
    words: list[str] = []
    for word in segment:
        # An empty word an expansion makes is dropped ('{,rm,-rf,/}' runs rm); its first words are what a rule
        # reads first, so a hostile segment is cut, not left unexpanded.
        words.extend(item for item in (expand_braces(word) if "{" in word else (word,)) if item)
        if len(words) > _MAX_WORDS:
            return tuple(words[:_MAX_WORDS])
    return tuple(words)


def _tokens(command: str) -> list[tuple[str, bool]]:
    """POSIX-style words and operators: ``[(text, is_operator)]``, read as bash reads them so that the reading never
    goes out of step with the shell (a quote or a comment the shell does not see as one would hide what follows).
    Linear time (``shlex`` is quadratic on long words). Quoted text never forms an operator.

    * operators are bash's (``;`` then ``<`` are two: ``a;</dev/null rm x`` runs ``rm``); blanks are space and tab;
      a backslash-newline is removed (a line continuation);
    * ``#`` starts a comment only at the start of a word;
    * ``$'...'`` is ANSI-C quoting, decoded (``$'\\x72m'`` is ``rm``); ``$"..."`` is a double-quoted string;
    * ``$(...)``, backticks, ``${...}``, ``$((...))`` and ``$[...]`` are parts of the word they are in, read with
      their own quoting and nesting (``"$(echo "a b"; rm x)"`` is one word); :func:`_substitutions` reads the
      commands in them. ``<<`` inside arithmetic is a shift, not a here-document;
    * a here-document's body (``<<EOF`` ... ``EOF``) is not shell text: it becomes a ``<<<`` here-string token right
      after its delimiter (the stdin of the command that opened it); with an unquoted delimiter its backslash escapes
      are processed as bash does.

    Raises:
        ValueError: an unterminated quote, substitution or here-document (the string is then not understood).
    """
    tokens: list[tuple[str, bool]] = []
    word: list[str] = []
    in_word = False
    raw_start = 0
    # Here-documents opened on the current line: [delimiter (None until its word is read), strip tabs, the token
    # index its body goes to, whether the delimiter was quoted].
    heredocs: list[list[object]] = []
    awaiting = 0  # the first of ``heredocs`` whose delimiter word is still to come
    arithmetic = 0  # inside '(( ... ))': '<<' there is a shift
    index, length = 0, len(command)

    def end_word(raw_end: int) -> None:
        nonlocal word, in_word, awaiting
        if in_word:
            text = "".join(word)
            tokens.append((text, False))
            if awaiting < len(heredocs):
                pending = heredocs[awaiting]
                pending[0] = text  # the word after '<<' is the delimiter (quotes removed)
                pending[2] = len(tokens)  # its body goes right after it: the stdin of that command
                pending[3] = any(ch in command[raw_start:raw_end] for ch in "'\"\\")
                awaiting += 1
            word, in_word = [], False

    while index < length:
        if not in_word:
            raw_start = index
        char = command[index]
        if char in " \t":
            end_word(index)
            index += 1
        elif char == "\\" and index + 1 < length and command[index + 1] == "\n":
            index += 2  # a line continuation: gone before the line is read
        elif char == "#" and not in_word:
            end = command.find("\n", index)
            index = length if end == -1 else end  # a comment runs to the end of the line
        elif char == "\n":
            end_word(index)
            if heredocs:
                index = _heredoc_bodies(command, index + 1, heredocs, tokens)
                heredocs, awaiting = [], 0
            else:
                index += 1
            tokens.append(("\n", True))
        elif char in _OPERATOR_CHARS:
            end_word(index)
            operator = next(op for op in _OPERATORS if command.startswith(op, index))
            tokens.append((operator, True))
            index += len(operator)
            if operator == "(" and index < length and command[index] == "(" and _command_position(tokens[:-1]):
                arithmetic += 1
                tokens[-1] = ("((", True)
                index += 1
            elif operator == ")" and arithmetic and index < length and command[index] == ")":
                arithmetic -= 1
                tokens[-1] = ("))", True)
                index += 1
            elif operator == "<<" and not arithmetic:
                strip = index < length and command[index] == "-"
                index += 1 if strip else 0
                heredocs.append([None, strip, len(tokens), False])
        elif char == "\\":
            in_word = True
            if index + 1 < length:
                word.append(command[index + 1])
            index += 2
        elif char == "$" and index + 1 < length:
            follow = command[index + 1]
            if follow == "$":
                word.append("$$")  # the shell's pid: a '$' after it is its own
                index += 2
            elif follow == "'":
                text, index = _ansi_c(command, index + 2)
                word.append(text)
            elif follow == '"':
                index += 1  # a locale string: read as a double-quoted one
                continue
            elif follow in "({[":
                end = _part_end(command, index)
                word.append(command[index:end])
                index = end
            else:
                word.append(char)
                index += 1
            in_word = True
        elif char == "`":
            end = _substitution_end(command, index)
            word.append(command[index:end])
            index = end
            in_word = True
        elif char == "'":
            end = command.find("'", index + 1)
            if end == -1:
                raise ValueError("no closing single quote")
            word.append(command[index + 1 : end])
            in_word = True
            index = end + 1
        elif char == '"':
            in_word = True
            index = _double_quoted(command, index + 1, word)
        elif char == "[" and in_word and len(word) <= 64 and _IDENTIFIER.fullmatch("".join(word)):
            end = _bracket_end(command, index)  # an array subscript: 'a[1<<2]=x' ('<' there is no redirection)
            word.append(command[index:end])
            index = end
        else:
            word.append(char)
            in_word = True
            index += 1
    end_word(length)
    if heredocs:
        _heredoc_bodies(command, length, heredocs, tokens)
    return tokens


_OPERATOR_CHARS = frozenset("();<>|&")
_OPERATORS = ("<<<", "&>>", ";;&", "<<", ">>", "<&", ">&", "<>", ">|", "&>", "&&", "||", "|&", ";;", ";&", "<(",
              ">(", ";", "&", "|", "(", ")", "<", ">")  # fmt: skip
"""bash's operators, longest first (the first that the text starts with is the one)."""
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FD_VARIABLE = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*\}")
_COMMAND_START = frozenset({";", "&", "&&", "||", "|", "|&", "(", "\n", ";;", ";&", ";;&"})


def _command_position(tokens: list[tuple[str, bool]]) -> bool:
    """Whether the next token starts a command (after an operator that ends one, a reserved word, or nothing)."""
    if not tokens:
        return True
    text, operator = tokens[-1]
    return text in _COMMAND_START if operator else text in _RESERVED


def _double_quoted(command: str, index: int, word: list[str], nesting: int = 0) -> int:
    """Read a double-quoted string's text from ``index`` (after its opening quote) into ``word``; substitutions and
    parameter expansions in it are copied whole with their own quoting. Returns the index after the closing quote.

    Raises:
        ValueError: no closing quote.
    """
    length = len(command)
    while True:
        if index >= length:
            raise ValueError("no closing double quote")
        char = command[index]
        if char == '"':
            return index + 1
        if char == "\\" and index + 1 < length and command[index + 1] in '"\\$`\n':
            if command[index + 1] != "\n":
                word.append(command[index + 1])
            index += 2
            continue
        if (char == "$" and index + 1 < length and command[index + 1] in "({[") or char == "`":
            end = _part_end(command, index, nesting + 1)
            word.append(command[index:end])
            index = end
            continue
        word.append(char)
        index += 1


def _part_end(command: str, index: int, nesting: int = 0) -> int:
    """The index after the word part starting at ``index``: ``$(...)``/backticks (:func:`_substitution_end`),
    ``${...}``, ``$[...]``.

    Raises:
        ValueError: it never closes, or nests deeper than :data:`_MAX_NESTING`.
    """
    if command.startswith("${", index):
        return _param_end(command, index, nesting)
    if command.startswith("$[", index):
        return _bracket_end(command, index + 1)
    return _substitution_end(command, index, nesting)


def _bracket_end(command: str, index: int) -> int:
    """The index after the ``]`` matching the ``[`` at ``index`` (quotes and nested brackets respected).

    Raises:
        ValueError: it never closes.
    """
    depth, position, length = 0, index, len(command)
    while position < length:
        char = command[position]
        if char == "\\":
            position += 2
            continue
        if char in "'\"":
            close = command.find(char, position + 1)
            if close == -1:
                raise ValueError("no closing quote")
            position = close + 1
            continue
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth == 0:
                return position + 1
        position += 1
    raise ValueError("no closing bracket")


def _param_end(command: str, index: int, nesting: int = 0) -> int:
    """The index after the ``${...}`` starting at ``index``: quotes (bash reads them inside, also within double
    quotes), escapes, nested expansions and substitutions respected.

    Raises:
        ValueError: it never closes, or nests too deep.
    """
    if nesting > _MAX_NESTING:
        raise ValueError("expansions nest too deep to read")
    depth, position, length = 0, index + 1, len(command)
    while position < length:
        char = command[position]
        if char == "\\":
            position += 2
            continue
        if char == "'":
            close = command.find("'", position + 1)
            if close == -1:
                raise ValueError("no closing single quote")
            position = close + 1
            continue
        if char == '"':
            position = _double_quoted(command, position + 1, [], nesting + 1)
            continue
        if (char == "$" and command[position + 1 : position + 2] in ("(", "{", "[")) or char == "`":
            position = _part_end(command, position, nesting + 1)  # it sends '${' back here
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return position + 1
        position += 1
    raise ValueError("no closing brace of ${...}")


_WORD_BREAK = frozenset(" \t\n;&|()<>")


def _substitution_end(command: str, index: int, nesting: int = 0) -> int:
    """The index after the ``$(...)`` (``$((...))`` too) or backtick substitution starting at ``index``, read with
    its own quoting: nested substitutions and expansions, quotes, ``$'...'``, escapes, comments, and the unmatched
    ``)`` of a ``case`` pattern.

    Raises:
        ValueError: it never closes, or substitutions nest deeper than :data:`_MAX_NESTING` (the command is then not
            understood).
    """
    if nesting > _MAX_NESTING:
        raise ValueError("substitutions nest too deep to read")
    length = len(command)
    if command[index] == "`":
        position = index + 1
        while position < length:
            if command[position] == "\\":
                position += 2
                continue
            if command[position] == "`":
                return position + 1
            position += 1
        raise ValueError("no closing backtick")
    depth, position, cases, previous = 0, index + 1, 0, " "
    while position < length:
        char = command[position]
        if char == "\\":
            position += 2
            previous = "x"
            continue
        if char == "'":
            close = command.find("'", position + 1)
            if close == -1:
                raise ValueError("no closing single quote")
            position, previous = close + 1, "x"
            continue
        if char == '"':
            position, previous = _double_quoted(command, position + 1, [], nesting + 1), "x"
            continue
        if char == "$" and position + 1 < length:
            follow = command[position + 1]
            if follow == "'":
                position = _ansi_c(command, position + 2)[1]
                previous = "x"
                continue
            if follow in "{[" or (follow == "(" and depth > 0):
                position, previous = _part_end(command, position, nesting + 1), "x"
                continue
        if char == "`":
            position, previous = _substitution_end(command, position, nesting + 1), "x"
            continue
        if char == "#" and previous in _WORD_BREAK:
            newline = command.find("\n", position)
            position = length if newline == -1 else newline
            continue
        if previous in _WORD_BREAK and char in "ce":
            keyword = re.match(r"(case|esac)(?=[\s;&|()<>]|$)", command[position : position + 5])
            if keyword is not None:
                cases += 1 if keyword.group(1) == "case" else -1 if cases else 0
        if char == "(":
            depth += 1
        elif char == ")":
            if depth == 1 and cases > 0:
                previous = char  # a case pattern's ')', not the end
                position += 1
                continue
            depth -= 1
            if depth == 0:
                return position + 1
        previous = char
        position += 1
    raise ValueError("no closing parenthesis of $(...)")


_ANSI_C_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f",
                   "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}  # fmt: skip


def _ansi_c(command: str, index: int) -> tuple[str, int]:
    """The text of a ``$'...'`` word starting after its opening quote, and the index after its closing one.

    Raises:
        ValueError: no closing quote.
    """
    out: list[str] = []
    length = len(command)
    while index < length:
        char = command[index]
        if char == "'":
            return "".join(out), index + 1
        if char != "\\" or index + 1 >= length:
            out.append(char)
            index += 1
            continue
        code = command[index + 1]
        if code in _ANSI_C_ESCAPES:
            out.append(_ANSI_C_ESCAPES[code])
            index += 2
        elif code in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[code]
            digits = re.match(rf"[0-9A-Fa-f]{{1,{width}}}", command[index + 2 : index + 2 + width])
            if digits is None:
                out.append("\\" + code)
                index += 2
            else:
                out.append(chr(min(int(digits.group(), 16), 0x10FFFF)))
                index += 2 + len(digits.group())
        elif code in "01234567":
            digits = re.match(r"[0-7]{1,3}", command[index + 1 : index + 4])
            assert digits is not None
            out.append(chr(int(digits.group(), 8) & 0xFF))
            index += 1 + len(digits.group())
        elif code == "c" and index + 2 < length and command[index + 2] != "'":
            out.append(chr(ord(command[index + 2]) & 0x1F))
            index += 3
        else:
            out.append("\\" + code)
            index += 2
    raise ValueError("no closing quote of $'...'")


def _heredoc_bodies(command: str, index: int, heredocs: list[list[object]], tokens: list[tuple[str, bool]]) -> int:
    """Read the bodies of the here-documents opened on the line that ended before ``index`` (in order), each up to
    its delimiter line, as ``<<<`` here-string tokens right after its delimiter (so the body is the stdin of the
    command that opened it, wherever that command is on the line); returns the index after the last body. A body
    under an unquoted delimiter has its backslash escapes processed as bash does (a doubled backslash is one, a
    backslash-newline is removed).

    Raises:
        ValueError: a here-document is never ended (bash would read to the end: the string is not understood).
    """
    length = len(command)
    bodies: list[tuple[int, str]] = []
    for delimiter, strip, position, quoted in heredocs:
        lines: list[str] = []
        ended = False
        while index < length:
            end = command.find("\n", index)
            end = length if end == -1 else end
            line = command[index:end]
            index = min(end + 1, length)
            if (line.lstrip("\t") if strip else line) == delimiter:
                ended = True
                break
            lines.append(line)
        if not ended:
            raise ValueError("a here-document is not ended by its delimiter line")
        body = "\n".join(lines) + ("\n" if lines else "")
        if not quoted:
            body = _HEREDOC_ESCAPE.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), body)
        assert isinstance(position, int)
        bodies.append((position, body))
    if bodies:
        # One rebuild of the line's tokens (inserting each body in place would be quadratic in hostile input).
        start = min(position for position, _ in bodies)
        at = dict(bodies)
        tail: list[tuple[str, bool]] = []
        for offset, token in enumerate(tokens[start:], start=start):
            if offset in at:
                tail += [("<<<", True), (at.pop(offset), False)]
            tail.append(token)
        for body in at.values():  # after the line's last token
            tail += [("<<<", True), (body, False)]
        tokens[start:] = tail
    return index


_HEREDOC_ESCAPE = re.compile(r"\\([\\$`\n])")
"""What a backslash escapes in the body of a here-document whose delimiter is unquoted."""


def _collect(command: str, depth: int, reading: _Reading) -> bool:
    if depth > _MAX_DEPTH:
        return False
    try:
        tokens = _tokens(command)
    except ValueError:
        return False
    ok = True
    current: list[str] = []
    expect_target = False
    target_written = False
    pipeline_start = len(reading.segments)  # the first segment of the pipeline being read
    piped = False  # the words being gathered read a pipe
    parens = 0
    # Groups opened while reading a pipe ('| (cd x; bash)', '| { cd x; bash; }'): every command in them reads it.
    # Each entry is the paren depth a '(' group closes at, or -1 for a '{' group.
    piped_groups: list[int] = []
    # Process substitutions still open: (the paren depth they close at, the segment index they start at, the
    # programs of the command they feed that read their program from it).
    open_substitutions: list[tuple[int, int, list[str]]] = []
    # Here-strings ('<<< TEXT') of the simple command being gathered: its stdin, so the program a shell or an
    # interpreter among its words reads.
    fed: list[str] = []
    here_string = False
    for token, operator in tokens:
        if operator:
            parens += token.count("(") - token.count(")")
            if "<" in token or ">" in token:
                expect_target = True
                target_written = ">" in token
                here_string = token.rstrip("(").endswith("<<<")
                if current and (current[-1].isdigit() or _FD_VARIABLE.fullmatch(current[-1])):
                    current.pop()  # an fd number such as the 2 in 2>&1, or a variable one gets ('{fd}>file')
                if token.endswith("("):  # process substitution <( ... )
                    expect_target = False
                    flushed = len(reading.segments)
                    ok &= _flush(current, depth, reading, pipeline_start if piped else None, fed)
                    current, fed = [], []
                    runners = _program_readers(reading.segments[flushed:], substituted=True)
                    open_substitutions.append((parens - 1, len(reading.segments), runners))
                continue
            if piped and current and current[0] == "{":
                piped_groups.append(-1)
            ok &= _flush(current, depth, reading, pipeline_start if piped else None, fed)
            if piped_groups and piped_groups[-1] == -1 and current and current[0] == "}":
                piped_groups.pop()
            current, fed = [], []
            expect_target = False
            while open_substitutions and parens <= open_substitutions[-1][0]:
                _, start, runners = open_substitutions.pop()
                _generated(runners, reading.segments[start:], reading)
            while piped_groups and piped_groups[-1] >= 0 and parens <= piped_groups[-1]:
                piped_groups.pop()
            if "|" in token and "||" not in token:
                piped = True
            elif token.strip("(") == "":
                if piped:  # a subshell opened on a pipe: everything in it reads the pipe
                    piped_groups.append(parens - token.count("("))
            elif not piped_groups:
                piped = False
                pipeline_start = len(reading.segments)
            continue
        if expect_target:
            expect_target = False
            # A substitution in a redirection's word runs before the command does ('cat < "$(rm -rf /)"').
            for inner in _substitutions(token):
                ok &= _collect(inner, depth + 1, reading)
            if here_string:
                fed.append(token)
            elif target_written and not token.lstrip("&-").isdigit():
                reading.redirects.append(token)
                reading.target(token, "redirect")
            continue
        current.append(token)
    ok &= _flush(current, depth, reading, pipeline_start if piped else None, fed)
    for _, start, runners in open_substitutions:
        _generated(runners, reading.segments[start:], reading)
    return ok


_STDIN_NAMES = frozenset({"-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"})
_FD_NAME = re.compile(r"/dev/fd/\S+|/proc/(self|thread-self|[0-9]+|\$\S*)/fd/\S+")
"""A descriptor's file: what a redirection ('3<<< CMD') or a substitution feeds a program named so."""


def _from_stdin(operand: str) -> bool:
    """Whether a program operand names the command's stdin or another descriptor a redirection feeds."""
    return operand in _STDIN_NAMES or _FD_NAME.fullmatch(operand) is not None


def _program_readers(segments: list[tuple[str, ...]], *, substituted: bool = False) -> list[str]:
    """The shells, ``source``/``.`` and interpreters among ``segments`` (unwrapped) that read their program from
    stdin, or (``substituted``: their words were cut at a process substitution) from the substitution."""
    runners: list[str] = []
    for segment in segments:
        for candidate in _unwrap(segment):
            name = candidate[0]
            if name in SHELLS or name == "su":
                if _shell_reads_stdin(name, candidate[1:]):
                    runners.append(name)
            elif name in ("source", "."):
                if len(candidate) == 1 or _from_stdin(candidate[1]):
                    runners.append(name)
            elif _INTERPRETER.match(name) and not substituted and _interpreter_program(name, candidate[1:]) == "-":
                runners.append(name)
    return runners


_SHELL_VALUE_OPTIONS = frozenset({"--rcfile", "--init-file"})
_SU_VALUE_LETTERS = "sgGw"


def _shell_reads_stdin(name: str, args: tuple[str, ...]) -> bool:
    """Whether a shell (or ``su``) started with ``args`` reads its program from stdin: no ``-c``, and ``-s`` or no
    script operand (``bash``, ``bash -o posix``, ``bash +x``, ``sh -s -- arg``, ``bash /dev/stdin``). ``su`` runs
    a shell reading stdin unless given ``-c``; its operand is a user, not a script."""
    index, from_stdin = 0, False
    while index < len(args):
        word = args[index]
        if word in ("-", "--"):
            index += 1
            break
        if word.startswith("--"):
            if word == "--command" or word.startswith("--command="):
                return False
            index += 2 if word in _SHELL_VALUE_OPTIONS else 1
            continue
        if len(word) > 1 and word[0] in "-+":
            letters = word[1:]
            if word[0] == "-" and "c" in letters:
                return False  # 'bash -c CMD': its program is on the command line (read as such)
            from_stdin = from_stdin or (word[0] == "-" and "s" in letters and name != "su")
            value_letters = _SU_VALUE_LETTERS if name == "su" else "oO"
            index += 2 if letters[-1] in value_letters else 1
            continue
        break
    if name == "su":
        return True
    operands = args[index:]
    return from_stdin or not operands or _from_stdin(operands[0])


# Per interpreter family: short options whose value is the next word, short options that name the program (a
# module, a file: not stdin), and long options that take the next word.
_INTERPRETER_OPTIONS: dict[str, tuple[str, str, frozenset[str]]] = {
    "python": ("WXQ", "m", frozenset({"--check-hash-based-pycs"})),
    "pypy": ("WXQ", "m", frozenset()),
    "perl": ("IMmx", "", frozenset()),
    "ruby": ("IrCEFTx", "", frozenset({"--encoding", "--external-encoding", "--internal-encoding"})),
    "node": ("rC", "", frozenset({"--require", "--import", "--loader", "--experimental-loader", "--input-type",
                                  "--conditions", "--env-file", "--title"})),
    "nodejs": ("rC", "", frozenset({"--require", "--import", "--loader", "--input-type"})),
    "deno": ("", "", frozenset()),
    "bun": ("r", "", frozenset({"--preload", "--require", "--cwd", "--config"})),
    "php": ("dcz", "f", frozenset()),
    "lua": ("l", "", frozenset()),
    "luajit": ("lj", "", frozenset()),
    "awk": ("vF", "f", frozenset({"--assign", "--field-separator", "--file", "--include", "--load"})),
    "gawk": ("vFiEl", "f", frozenset({"--assign", "--field-separator", "--file", "--include", "--load"})),
    "mawk": ("vF", "f", frozenset({"--assign", "--field-separator"})),
    "nawk": ("vF", "f", frozenset()),
}  # fmt: skip


def _interpreter_program(name: str, args: tuple[str, ...]) -> str | None:
    """Where an interpreter started with ``args`` reads its program: the code given on its command line (``-c``,
    ``-e``, ``--eval``; awk's first operand), ``"-"`` for stdin (no program named: ``python3``,
    ``python3 -W ignore``, ``python3 -``, ``perl /dev/stdin``), or None for a script file or module."""
    family = re.sub(r"[0-9.]+$", "", name)
    awk = family in ("awk", "gawk", "mawk", "nawk")
    values, program_letters, long_values = _INTERPRETER_OPTIONS.get(family, ("", "", frozenset()))
    code_letters = _CODE_FLAGS.get(family, "")
    index = 0
    while index < len(args):
        arg = args[index]
        following = args[index + 1] if index + 1 < len(args) else "-"
        if arg == "--":
            index += 1
            break
        if arg == "-" or _from_stdin(arg):
            return "-"
        if arg.startswith("--"):
            key, equals, value = arg.partition("=")
            if key in _LONG_CODE_FLAGS:
                return value if equals else following
            if key in ("--file", "--module"):
                return None
            index += 2 if key in long_values and not equals else 1
            continue
        if arg.startswith("-") and len(arg) > 1:
            for position, letter in enumerate(arg[1:], start=1):
                rest = arg[position + 1 :]
                if letter in code_letters:
                    return rest or following
                if letter in program_letters:
                    return None
                if letter in values:
                    index += 1 if rest else 2  # the value is the rest of the word, or the next word
                    break
            else:
                index += 1
            continue
        break
    operands = args[index:]
    if not operands:
        return "-"
    if awk:
        return operands[0]  # awk's first operand is its program (no -f was given)
    return "-" if _from_stdin(operands[0]) else None


def _generated(runners: list[str], sources: list[tuple[str, ...]], reading: _Reading) -> None:
    if not runners:
        return
    names = tuple(dict.fromkeys(c[0] for segment in sources for c in _unwrap(segment) if c[0] not in _WRAPPERS))
    for runner in dict.fromkeys(runners):
        if len(reading.generated) < _MAX_SEGMENTS:
            reading.generated.append(GeneratedCode(runner=runner, sources=names))


def _flush(
    words: list[str], depth: int, reading: _Reading, piped_from: int | None = None, fed: list[str] | None = None
) -> bool:
    """Read one simple command; ``piped_from``: the index of the first segment of the pipeline it reads; ``fed``:
    its here-strings (its stdin)."""
    ok = True
    segments = reading.segments
    # A substitution kept inside one word (double quotes) still runs: read what it contains.
    for word in words:
        for inner in _substitutions(word):
            ok &= _collect(inner, depth + 1, reading)
    if len(words) >= 2 and words[0] in ("for", "select"):
        _assign(words[1] + "=", reading)  # 'for PATH in /w/bin; do ls; done' sets PATH
    first = _command_start(words)
    for word in words[:first]:
        if word not in _RESERVED and _ASSIGNMENT.match(word):
            _assign(word, reading)
    words = words[first:]
    for word in words:
        for found in _DEFAULT_ASSIGNMENT.finditer(word):  # '${BASH_ENV:=/x}' assigns when unset
            _assign(found.group(1) + "=", reading)
    if fed and (words == ["exec"] or (not words and _program_readers(segments[-_MAX_SEGMENTS:]))):
        # 'exec <<< CMD' feeds every later command; a here-string on a group ('{ bash; } <<< CMD', '(sh) <<< CMD',
        # '... fi <<< CMD') feeds every command in it, read as a program when a shell that reads stdin came before
        # ('while read l; do ...; done <<< "$x"' has none: its text is data).
        for text in fed:
            ok &= _collect(text, depth + 1, reading)
        return ok
    if not words:
        return ok
    if len(segments) >= _MAX_SEGMENTS or sum(map(len, segments)) + len(words) > _MAX_WORDS:
        return False
    segment = tuple(words)
    readers = _program_readers([segment])
    if fed and len(reading.fed) < _MAX_SEGMENTS:
        reading.fed.extend(fed)
    if fed:
        # 'bash <<< CMD', 'python3 <<< CODE': the here-string is the program its reader runs.
        for runner in dict.fromkeys(readers):
            for text in fed:
                if runner in PROGRAM_SHELLS:
                    ok &= _collect(text, depth + 1, reading)
                elif len(reading.code) < _MAX_SEGMENTS:
                    reading.code.append((runner, text))
    elif piped_from is not None:
        _generated(readers, segments[piped_from:], reading)
    elif len(reading.stdin_readers) < _MAX_SEGMENTS:
        reading.stdin_readers.extend(readers)
    segments.append(segment)
    for candidate in _unwrap(segment):
        name = candidate[0]
        _effects(candidate, reading)
        if name == "eval" and len(candidate) > 1:
            ok &= _collect(" ".join(candidate[1:]), depth + 1, reading)
            continue
        for text in _command_strings(candidate):
            ok &= _collect(text, depth + 1, reading)
        if name not in SHELLS and name != "su":
            continue
        # 'bash -c CMD', 'bash -lc CMD', 'bash -c -e -- CMD', 'su -c CMD user': the first word that is no option
        # after the option holding 'c' runs.
        for index, word in enumerate(candidate[1:], start=1):
            if word.startswith("-") and not word.startswith("--") and "c" in word:
                rest = candidate[index + 1 :]
                script = next((w for w in rest if w == "--" or not w.startswith(("-", "+"))), None)
                if script == "--":
                    script = rest[rest.index("--") + 1] if rest.index("--") + 1 < len(rest) else None
                if script is not None:
                    ok &= _collect(script, depth + 1, reading)
                break
    return ok


_COMMAND_OPTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "script": ("c", ("--command",)),
    "flock": ("c", ("--command",)),
    "runuser": ("c", ("--command",)),
    "su": ("c", ("--command",)),
    "env": ("S", ("--split-string",)),
}
"""Tools that run a command string given as an option's value (``script -qc CMD``, ``env -S 'CMD'``)."""
_FIND_RUNS = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
_SED_EXEC = re.compile(r"(?:^|[;\n{}])[ \t]*(?:[0-9]+|\$)?(?:,[ \t]*(?:[0-9]+|\$))?[ \t]*!?[ \t]*e[ \t]+([^\n;}]+)")
"""The ``e COMMAND`` command of a sed script (over-approximated: more command strings only make a verdict
stricter)."""


def _command_strings(argv: tuple[str, ...]) -> list[str]:
    """The command strings ``argv`` runs through a shell or as a command of its own, other than a shell's ``-c``:
    option values (``script -qc``, ``flock -c``, ``env -S``), ``watch``'s words, ``find -exec ... ;``, and git's
    ``rebase -x``, ``bisect run`` and ``submodule foreach``."""
    name, args = argv[0], argv[1:]
    if name in _COMMAND_OPTIONS:
        letters, long_names = _COMMAND_OPTIONS[name]
        return _option_values(args, letters, long_names)
    if name == "sed":  # 'sed 1e CMD': the e command runs CMD
        scripts = _option_values(args, "e", ("--expression",)) or [arg for arg in args if not arg.startswith("-")][:1]
        return [found.group(1) for script in scripts for found in _SED_EXEC.finditer(script)]
    if name in ("tar", "bsdtar"):  # programs tar runs: checkpoint actions, filters, volume scripts
        actions = [arg.split("=exec=", 1)[1] for arg in args if arg.startswith("--checkpoint-action=exec=")]
        long_names = ("--to-command", "--use-compress-program", "--info-script", "--new-volume-script", "--rsh-command")
        return actions + _option_values(args, "IF", long_names, combined=False)
    if name == "trap":  # 'trap CMD SIGNAL...': CMD runs when the signal comes (EXIT, DEBUG: always)
        handlers = [arg for arg in args if arg not in ("-p", "-l", "--")]
        return handlers[:1] if len(handlers) >= 2 else []
    if name in ("mapfile", "readarray"):  # '-C CALLBACK': run for every few lines read
        return _option_values(args, "C", ())
    if name == "alias":  # 'alias x=CMD' (with expand_aliases, x runs CMD)
        return [arg.partition("=")[2] for arg in args if "=" in arg]
    if name in ("complete", "compgen"):
        return _option_values(args, "C", ())
    if name == "watch":
        words = [arg for arg in args if not arg.startswith("-")]
        return [" ".join(words)] if words else []
    if name == "find":
        found: list[str] = []
        index = 0
        while index < len(args):
            if args[index] in _FIND_RUNS:
                end = next((i for i in range(index + 1, len(args)) if args[i] in (";", "+")), len(args))
                if end > index + 1:
                    found.append(shlex.join(args[index + 1 : end]))
                index = end
            index += 1
        return found
    if name == "git":
        values = _option_values(args, "x", ("--exec",)) if "rebase" in args else []
        for index, arg in enumerate(args[:-1]):
            if (arg, args[index - 1] if index else "") in (("run", "bisect"), ("foreach", "submodule")):
                values.append(" ".join(args[index + 1 :]))
        return values
    return []


def _assign(word: str, reading: _Reading) -> None:
    name, _, value = word.partition("=")
    if len(reading.assignments) < _MAX_SEGMENTS:
        reading.assignments.append((name.removesuffix("+"), value))


def _effects(argv: tuple[str, ...], reading: _Reading) -> None:
    """Record what one candidate argv assigns, writes, enters (cd) or hands to an interpreter."""
    name, args = argv[0], argv[1:]
    operands = [arg for arg in args if not arg.startswith("-")]
    if name == "env":
        skip = False
        for arg in args:
            if skip:
                skip = False
            elif _ASSIGNMENT.match(arg):
                _assign(arg, reading)
            elif arg in ("-u", "--unset", "-C", "--chdir"):
                skip = True
            elif arg in ("-S", "--split-string") or arg.startswith(("-S", "--split-string=")):
                # env -S 'NAME=VALUE cmd' splits one word into more: read as a command string of its own (its
                # assignments included, see _command_strings).
                skip = not arg[2:] and "=" not in arg
            elif not arg.startswith("-"):
                break
    elif name in _DECLARERS:
        nameref = any(arg.startswith("-") and "n" in arg for arg in args)
        for arg in operands:
            if _ASSIGNMENT.match(arg):
                _assign(arg, reading)
                if nameref:  # 'declare -n r=PATH': assigning r later assigns PATH
                    _assign(arg.partition("=")[2] + "=", reading)
            elif name == "export" and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", arg):
                _assign(arg + "=", reading)  # exports a value set elsewhere: the name still counts
    elif name == "printf" and len(args) >= 2 and args[0] == "-v":
        _assign(args[1] + "=", reading)
    elif name in ("read", "mapfile", "readarray"):
        for arg in operands:
            if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", arg):
                _assign(arg + "=", reading)
    elif name in ("cd", "pushd"):
        _enter("-" if "-" in args else operands[0] if operands else "~", reading)
    elif name == "dd":
        for arg in args:
            if arg.startswith("of="):
                reading.target(arg[3:], "dd")
    elif name == "sed":
        if any(_IN_PLACE.match(arg) or arg.startswith("--in-place") for arg in args):
            for arg in operands[1:]:
                reading.target(arg, "sed")
        scripts = [value for value in _option_values(args, "e", ("--expression",))] or operands[:1]
        for script in scripts:
            for written in _sed_writes(script):  # the 'w FILE' command and the s///w flag write FILE
                reading.target(written, "sed")
    elif name in _LAST_OPERAND and operands:
        folder = None if name == "rsync" else next(iter(_option_values(args, "t", ("--target-directory",))), None)
        if folder is None:
            reading.target(operands[-1], name)
        else:  # 'cp -t DIR SRC...': every source lands in DIR under its own name
            for source in operands:
                if source != folder:
                    reading.target(posixpath.join(folder, posixpath.basename(source.rstrip("/")) or "*"), name)
        if _makes_links(name, args):
            _link_sources(reading, name, operands, folder)
    elif name == "uniq":
        files = _operands(args, "fsw", ("--skip-fields", "--skip-chars", "--check-chars"))
        if len(files) >= 2:  # 'uniq [INPUT [OUTPUT]]'
            reading.target(files[1], name)
    elif name in _COMPRESSORS and not any(
        arg in ("--stdout", "--to-stdout", "--test", "--list")
        or (arg[:1] == "-" and arg[1:2] != "-" and set(arg[1:]) & set("ctl"))
        for arg in args
    ):
        # '(un)xz FILE', 'gzip -d FILE.gz': the file is replaced by one with its suffix added or removed.
        for arg in operands:
            reading.target(arg, name)
            stem, dot, suffix = arg.rpartition(".")
            if dot and stem and "/" not in suffix:
                reading.target(stem, name)
    elif name in _ALL_OPERANDS:
        for arg in operands[1:] if name in ("chmod", "chown", "chgrp") else operands:
            reading.target(arg, name)
    elif name == AGENT_PATH and args[:1] in (("fs-unpack",), ("fs-write",)):
        # The agent's file operations (the upload's unpack and the write tool's staged write), run from a shell:
        # 'fs-unpack [--] DEST' writes the entries of the stream on its stdin under DEST (listed from that stdin,
        # as a 'tar -x' is); 'fs-write PATH ...' writes PATH.
        words = [arg for arg in args[1:] if arg != "--"]
        if args[0] == "fs-unpack":
            for dest in words[:1]:
                reading.target(posixpath.join(dest, "*"), "fs-unpack")
        else:
            for path in [arg for arg in operands[1:] if arg.startswith("/")][:1]:
                reading.target(path, "fs-write")
    elif name == "unzip" or (name in ("tar", "bsdtar") and _extracts(args)):
        # Extracting writes files whose names the archive holds, into the folder named by -C (tar) or -d (unzip),
        # or else the current one.
        for folder in _option_values(args, "d" if name == "unzip" else "C", ("--directory",)) or ["."]:
            reading.target(posixpath.join(folder, "*"), name)
    elif re.sub(r"[0-9.]+$", "", name) in ("perl", "ruby") and any(_IN_PLACE.match(arg) for arg in args):
        # 'perl -pi -e CODE FILE...', 'ruby -i -pe CODE FILE': the files are rewritten (the code is read as one too;
        # that only makes a verdict stricter).
        for arg in operands:
            reading.target(arg, name)
    elif name == "find":
        for index, arg in enumerate(args[:-1]):
            if arg in ("-fprint", "-fprint0", "-fprintf", "-fls"):
                reading.target(args[index + 1], "find")
    elif name == "git":
        # 'git --work-tree=DIR checkout ...' writes the checked-out files into DIR.
        trees = _option_values(args, "", ("--work-tree",))
        if trees and any(arg in GIT_TREE_WRITERS for arg in args):
            for tree in trees:
                reading.target(posixpath.join(tree, "*"), "git")
    if name not in _NOT_OUTPUT_OPTION:
        # '-o FILE' / '--output FILE' / '--output=FILE' name the file written by most tools (sort, git log and
        # format-patch, compilers, curl, wget -O ...); reading too many targets only makes a verdict stricter.
        long_names = ("--output", "--output-document", "--output-file", "--out-file")
        letters, combined = ("oO", False) if name == "wget" else ("o", name in _COMBINED_OUTPUT)
        for value in _option_values(args, letters, long_names, combined=combined):
            reading.target(value, name)
    match = _INTERPRETER.match(name)
    if match is not None:
        _inline_code(name, args, reading)


_COMPRESSORS = frozenset(
    {"gzip", "gunzip", "xz", "unxz", "lzma", "unlzma", "bzip2", "bunzip2", "zstd", "unzstd", "lz4", "lzip",
     "brotli", "compress", "uncompress", "pigz", "unpigz"}
)  # fmt: skip
"""Tools that replace each named file by its (de)compressed form."""
_COMBINED_OUTPUT = frozenset({"sort", "gcc", "cc", "clang", "ld"})
"""Tools whose ``-o FILE`` may close a cluster of short flags (``sort -uo FILE``)."""


_CP_LINK_FLAGS: Final = frozenset({"--link", "--symbolic-link"})
LINK_SOURCE: Final = "link"
""":attr:`WriteTarget.via` of what a link names (see :func:`_link_sources`)."""


def _makes_links(name: str, args: tuple[str, ...]) -> bool:
    """Whether the command makes links (``ln``; ``cp -s``/``-l``) rather than copies: whatever is later written
    through such a link is written to what it names."""
    if name == "ln":
        return True
    return name == "cp" and any(
        arg in _CP_LINK_FLAGS or (arg[:1] == "-" and arg[1:2] != "-" and set(arg[1:]) & set("sl")) for arg in args
    )


def _link_sources(reading: _Reading, name: str, operands: list[str], folder: str | None) -> None:
    """Judge what a link names as written, since every later write through the link writes it: ``ln -s .git g``
    then ``echo x >> g/config`` writes ``.git/config``, which no later command names. A symbolic link's text is
    read from the link's folder (``ln -s ../.git sub/g``) and, as written, from here (over-approximated: more
    targets only make a verdict stricter)."""
    sources = operands if folder is not None else operands[:-1]
    link_folder = folder if folder is not None else posixpath.dirname(operands[-1]) if len(operands) > 1 else ""
    for source in sources:
        if source == folder:
            continue
        reading.target(source, LINK_SOURCE)
        if link_folder and not source.startswith("/"):
            reading.target(posixpath.normpath(posixpath.join(link_folder, source)), LINK_SOURCE)


def _operands(args: tuple[str, ...], letters: str, long_names: tuple[str, ...]) -> list[str]:
    """The operands of a command line whose short options in ``letters`` (and ``long_names``) take the next word
    as their value when none is attached."""
    out: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            out.extend(args[index + 1 :])
            break
        if arg in long_names or (len(arg) == 2 and arg[0] == "-" and arg[1] in letters):
            index += 2
            continue
        if not arg.startswith("-") or arg == "-":
            out.append(arg)
        index += 1
    return out


_IN_PLACE = re.compile(r"^-(?!-)[A-Za-z]*i")
"""A short option cluster holding ``-i`` (sed, perl, ruby: edit the named files in place)."""
AGENT_PATH: Final = "/.executor/agent"
"""The in-container agent (its ``fs-*`` file operations write files; a shell can run them too)."""
UNPACKERS: Final = frozenset({"tar", "bsdtar", "fs-unpack"})
"""The ``via`` of a write target whose files are the members of an archive read from stdin, placed in its folder
(:attr:`~executor.models.BashAction.stdin_members`)."""

GIT_TREE_WRITERS = frozenset(
    {"checkout", "switch", "restore", "reset", "stash", "merge", "pull", "apply", "am", "cherry-pick", "revert",
     "read-tree", "checkout-index", "rebase", "worktree", "clone"}
)  # fmt: skip
"""Git subcommands that write files into the work tree."""


def _extracts(args: tuple[str, ...]) -> bool:
    """Whether a tar command line extracts (``-x``, ``--extract``, ``--get``, or ``x`` in the leading bundle)."""
    for index, arg in enumerate(args):
        if arg in ("--extract", "--get"):
            return True
        if not arg.startswith("--") and (arg.startswith("-") or index == 0) and "x" in arg.lstrip("-"):
            return True
    return False


def _option_values(
    args: tuple[str, ...], letters: str, long_names: tuple[str, ...], *, combined: bool = True
) -> list[str]:
    """The values of an option given as ``-X VALUE``, ``-XVALUE``, combined short flags ending in it (``-vX VALUE``,
    with ``combined``) or a long name (``--name VALUE``, ``--name=VALUE``), ``X`` being one of ``letters``."""
    values: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        following = args[index + 1] if index + 1 < len(args) else None
        if arg == "--":
            break
        name, equals, value = arg.partition("=")
        if name in long_names:
            if equals:
                values.append(value)
            elif following is not None:
                values.append(following)
                index += 1
        elif arg.startswith("-") and not arg.startswith("--") and len(arg) >= 2:
            flags = arg[1:] if combined else arg[1:2]
            position = next((i for i, letter in enumerate(flags) if letter in letters), None)
            if position is not None:
                rest = flags[position + 1 :] if combined else arg[2:]
                if rest:
                    values.append(rest)
                elif following is not None:
                    values.append(following)
                    index += 1
        index += 1
    return values


def _enter(folder: str, reading: _Reading) -> None:
    if (
        folder == "-"
        or "$" in folder
        or "`" in folder
        or any(ch in folder for ch in "*?[")
        or (folder.startswith("~") and not (folder == "~" or folder.startswith("~/")))
    ):
        reading.dir_unknown = True
        return
    entered = [folder if folder.startswith(("/", "~")) else posixpath.join(base, folder) for base in reading.dirs]
    merged = list(dict.fromkeys([*reading.dirs, *entered]))
    if len(merged) > _MAX_DIRS:
        reading.dir_unknown = True
        merged = merged[:_MAX_DIRS]
    reading.dirs = merged


def _inline_code(name: str, args: tuple[str, ...], reading: _Reading) -> None:
    code = _interpreter_program(name, args)
    if code is not None and len(reading.code) < _MAX_SEGMENTS:
        reading.code.append((name, code))


def _substitutions(word: str, nesting: int = 0) -> list[str]:
    """The command strings the substitutions in ``word`` run: ``$(...)`` and backticks (with their own quoting and
    nesting, as :func:`_substitution_end` reads them), also inside ``${...}``, ``$((...))`` and ``$[...]``."""
    found: list[str] = []
    if nesting > _MAX_NESTING:
        return found
    index, length = 0, len(word)
    while index < length:
        char = word[index]
        if char == "\\":
            index += 2
            continue
        if char == "`" or (char == "$" and word[index + 1 : index + 2] in ("(", "{", "[")):
            try:
                end = _part_end(word, index)
            except ValueError:
                end = length  # never closed (or too deep): what follows is read as its text
            part = word[index:end]
            if part.startswith("$((") or part.startswith(("${", "$[")):
                found.extend(_substitutions(part[2:-1] if not part.startswith("$((") else part[3:-2], nesting + 1))
            elif part.startswith("$("):
                found.append(part[2:-1] if part.endswith(")") else part[2:])
            else:
                inner = part[1:-1] if part.endswith("`") and len(part) > 1 else part[1:]
                found.append(re.sub(r"\\([\\`$])", r"\1", inner))  # inside backticks a backslash escapes these
            index = max(end, index + 1)
            continue
        index += 1
    return found


def _unwrap(segment: tuple[str, ...], cut: list[bool] | None = None) -> list[tuple[str, ...]]:
    """The segment, its basename form, and every command a chain of wrappers may run.

    Which words of a wrapper are its options' values depends on the wrapper (``timeout --signal KILL 5 cmd``,
    ``exec -a NAME cmd``, ``command -p cmd``), so the wrapped command is read from each of the first few words
    that are not options: one of them is where it starts, and reading the others as commands too only makes a
    verdict stricter.
    """
    out: dict[tuple[str, ...], None] = {}
    queue = collections.deque([segment])
    queued = {len(segment)}  # every form is a suffix of the segment: one per length is ever read
    while queue and len(out) < _MAX_UNWRAPPED:
        current = queue.popleft()
        current = current[_command_start(current) :]  # 'coproc N { rm x; }': the group's words go first
        if not current:
            continue
        base = (posixpath.basename(current[0]) or current[0], *current[1:])
        out.setdefault(current, None)
        out.setdefault(base, None)
        name = base[0]
        if name not in _WRAPPERS:
            continue
        rest = base[1:]
        starts = [i for i, word in enumerate(rest) if not word.startswith("-") and not _ASSIGNMENT.match(word)]
        chosen = set(starts[: _WRAPPERS[name] + 2])
        wrapped = _wrapped_start(name, rest)
        if wrapped is not None:
            chosen.add(wrapped)
        for start in sorted(chosen):
            if len(rest) - start not in queued:
                queued.add(len(rest) - start)
                queue.append(rest[start:])
    if queue and cut is not None:
        cut.append(True)  # a chain of wrappers longer than can be followed: what runs at its end is unknown
    return list(out)


def _wrapped_start(name: str, args: tuple[str, ...]) -> int | None:
    """Where the command a wrapper runs starts in its arguments, its options' values skipped (``env -u A -u B rm``,
    ``timeout -k 1 -s KILL 5 rm``); None when it runs none."""
    letters, long_names = _WRAPPER_VALUES.get(name, ("", frozenset()))
    positional = _WRAPPERS.get(name, 0)
    index = 0
    while index < len(args):
        word = args[index]
        if word == "--":
            index += 1
            break
        if word.startswith("--"):
            index += 2 if word in long_names else 1
        elif word.startswith("-") and len(word) > 1:
            index += 2 if word[-1] in letters and len(word) == 2 else 1
        elif _ASSIGNMENT.match(word) and name == "env":
            index += 1
        elif positional > 0:
            positional -= 1
            index += 1
        else:
            break
    while positional > 0 and index < len(args):
        positional, index = positional - 1, index + 1
    return index if index < len(args) else None
