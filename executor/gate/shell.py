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
  reading; the judge treats it so.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

__all__ = ["GIT_HOOK_NAMES", "ParsedCommand", "WriteTarget", "is_simple", "parse_command", "resolve_target"]

_PUNCTUATION = "();<>|&`\n"
_MAX_DEPTH = 4
# Past this many simple commands the reading stops and reports the command as not understood: a hostile
# string of 100k tiny commands must not make the gate slow, and "not understood" is never allowed.
_MAX_SEGMENTS = 512
_MAX_WORDS = 4096
# Characters that make a command more than one plain simple command (or hide one): control operators,
# redirections, substitutions, escapes, grouping, and every control character.
_NOT_SIMPLE = re.compile(r"[;&|<>()$`\\{}\x00-\x08\x0a-\x1f\x7f]")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\+?=")
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "busybox"})
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
}
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
# Options of wrappers that consume the next word.
_OPTION_ARGS = frozenset({"-u", "-g", "-n", "-c", "-C", "-s", "-k", "-p", "-I", "-L", "-P", "-d", "-E", "-U"})


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
    """What writes it: ``redirect`` or the tool's name."""


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

    def target(self, word: str, via: str) -> None:
        if len(self.targets) < _MAX_SEGMENTS:
            self.targets.append(WriteTarget(word=word, dirs=tuple(self.dirs), dir_unknown=self.dir_unknown, via=via))


def is_simple(command: str) -> bool:
    """True when ``command`` is one simple command without any shell metacharacter or control character."""
    if not command.strip() or _NOT_SIMPLE.search(command):
        return False
    return parse_command(command).simple


def parse_command(command: str) -> ParsedCommand:
    """Split ``command`` into every simple command it might run (see the module docstring)."""
    reading = _Reading(segments=[], redirects=[], targets=[], assignments=[], code=[], dirs=[""])
    ok = _collect(command, 0, reading)
    segments = reading.segments
    candidates: dict[tuple[str, ...], None] = {}
    for segment in segments:
        for candidate in _unwrap(segment):
            candidates[candidate] = None
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
    )


def _tokens(command: str) -> list[tuple[str, bool]]:
    """POSIX-style words and operator runs: ``[(text, is_operator)]``. Linear time (``shlex`` is quadratic
    on long words). Quoted text never forms an operator. '#' is an ordinary character: bash only starts a
    comment at a word start, and treating it as a comment could hide '; rm -rf /' after 'a#b'.

    Raises:
        ValueError: an unterminated quote.
    """
    tokens: list[tuple[str, bool]] = []
    word: list[str] = []
    in_word = False
    index, length = 0, len(command)
    while index < length:
        char = command[index]
        if char in " \t\r":
            if in_word:
                tokens.append(("".join(word), False))
                word, in_word = [], False
            index += 1
        elif char in _PUNCTUATION:
            if in_word:
                tokens.append(("".join(word), False))
                word, in_word = [], False
            end = index
            while end < length and command[end] in _PUNCTUATION and command[end] != "\n":
                end += 1
            end = max(end, index + 1)
            tokens.append((command[index:end], True))
            index = end
        elif char == "\\":
            in_word = True
            if index + 1 < length and command[index + 1] != "\n":
                word.append(command[index + 1])
            index += 2
        elif char == "'":
            end = command.find("'", index + 1)
            if end == -1:
                raise ValueError("no closing single quote")
            word.append(command[index + 1 : end])
            in_word = True
            index = end + 1
        elif char == '"':
            in_word = True
            index += 1
            while True:
                if index >= length:
                    raise ValueError("no closing double quote")
                char = command[index]
                if char == '"':
                    index += 1
                    break
                if char == "\\" and index + 1 < length and command[index + 1] in '"\\$`\n':
                    if command[index + 1] != "\n":
                        word.append(command[index + 1])
                    index += 2
                    continue
                word.append(char)
                index += 1
        else:
            word.append(char)
            in_word = True
            index += 1
    if in_word:
        tokens.append(("".join(word), False))
    return tokens


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
    for token, operator in tokens:
        if operator:
            if "<" in token or ">" in token:
                expect_target = True
                target_written = ">" in token
                if current and current[-1].isdigit():
                    current.pop()  # an fd number such as the 2 in 2>&1
                if token.endswith("("):  # process substitution <( ... )
                    expect_target = False
                    ok &= _flush(current, depth, reading)
                    current = []
                continue
            ok &= _flush(current, depth, reading)
            current = []
            expect_target = False
            continue
        if expect_target:
            expect_target = False
            if target_written and not token.lstrip("&-").isdigit():
                reading.redirects.append(token)
                reading.target(token, "redirect")
            continue
        current.append(token)
    ok &= _flush(current, depth, reading)
    return ok


def _flush(words: list[str], depth: int, reading: _Reading) -> bool:
    ok = True
    segments = reading.segments
    # A substitution kept inside one word (double quotes) still runs: read what it contains.
    for word in words:
        for inner in _substitutions(word):
            ok &= _collect(inner, depth + 1, reading)
    while words and (words[0] in _RESERVED or _ASSIGNMENT.match(words[0])):
        if words[0] not in _RESERVED:
            _assign(words[0], reading)
        words = words[1:]
    if not words:
        return ok
    if len(segments) >= _MAX_SEGMENTS or sum(map(len, segments)) + len(words) > _MAX_WORDS:
        return False
    segment = tuple(words)
    segments.append(segment)
    for candidate in _unwrap(segment):
        name = candidate[0]
        _effects(candidate, reading)
        if name == "eval" and len(candidate) > 1:
            ok &= _collect(" ".join(candidate[1:]), depth + 1, reading)
            continue
        if name not in _SHELLS and name != "su":
            continue
        # 'bash -c CMD', 'bash -lc CMD', 'su -c CMD user': the string after the option holding 'c' runs.
        for index, word in enumerate(candidate[1:], start=1):
            if word.startswith("-") and not word.startswith("--") and "c" in word and index + 1 < len(candidate):
                ok &= _collect(candidate[index + 1], depth + 1, reading)
                break
    return ok


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
        for index, arg in enumerate(args):
            if skip:
                skip = False
            elif _ASSIGNMENT.match(arg):
                _assign(arg, reading)
            elif arg in ("-u", "--unset", "-C", "--chdir"):
                skip = True
            elif arg in ("-S", "--split-string") or arg.startswith(("-S", "--split-string=")):
                # env -S 'NAME=VALUE cmd' splits one word into more: read its assignments too.
                text = arg.split("=", 1)[1] if arg.startswith("--split-string=") else arg[2:]
                text = text or (args[index + 1] if index + 1 < len(args) else "")
                for word in text.split():
                    if _ASSIGNMENT.match(word):
                        _assign(word, reading)
                skip = not arg[2:] and "=" not in arg
            elif not arg.startswith("-"):
                break
    elif name in _DECLARERS:
        for arg in operands:
            if _ASSIGNMENT.match(arg):
                _assign(arg, reading)
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
        if any(arg.startswith("-i") or arg.startswith("--in-place") for arg in args):
            for arg in operands[1:]:
                reading.target(arg, "sed")
    elif name in _LAST_OPERAND and operands:
        reading.target(operands[-1], name)
    elif name in _ALL_OPERANDS:
        for arg in operands[1:] if name in ("chmod", "chown", "chgrp") else operands:
            reading.target(arg, name)
    match = _INTERPRETER.match(name)
    if match is not None:
        _inline_code(name, args, reading)


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
    family = re.sub(r"[0-9.]+$", "", name)
    if family in ("awk", "gawk", "mawk", "nawk"):
        program = next((arg for arg in args if not arg.startswith("-")), None)
        if program is not None and len(reading.code) < _MAX_SEGMENTS:
            reading.code.append((name, program))
        return
    letters = _CODE_FLAGS.get(family, "")
    for index, arg in enumerate(args):
        if arg == "-" or (arg.startswith("-") and index == len(args) - 1 and arg[-1:] in letters and arg[1:2] != "-"):
            code = "-"
        elif arg.split("=", 1)[0] in _LONG_CODE_FLAGS:
            code = arg.split("=", 1)[1] if "=" in arg else (args[index + 1] if index + 1 < len(args) else "-")
        elif arg.startswith("-") and not arg.startswith("--") and letters and arg[-1] in letters:
            code = args[index + 1] if index + 1 < len(args) else "-"
        elif not arg.startswith("-"):
            return  # a script file or module argument: its code is not on the command line
        else:
            continue
        if len(reading.code) < _MAX_SEGMENTS:
            reading.code.append((name, code))
        return
    # No script and no code flag: the interpreter reads its program from stdin (a here-document, a pipe).
    if len(reading.code) < _MAX_SEGMENTS:
        reading.code.append((name, "-"))


def _substitutions(word: str) -> list[str]:
    found: list[str] = []
    start = 0
    while (index := word.find("$(", start)) != -1:
        level, end = 0, index + 1
        while end < len(word):
            if word[end] == "(":
                level += 1
            elif word[end] == ")":
                level -= 1
                if level == 0:
                    break
            end += 1
        found.append(word[index + 2 : end])
        start = end + 1
    parts = word.split("`")
    found.extend(parts[1::2])
    return found


def _unwrap(segment: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The segment, its basename form, and every command a chain of wrappers would run."""
    out: list[tuple[str, ...]] = []
    current = segment
    for _ in range(8):
        if not current:
            break
        base = (posixpath.basename(current[0]) or current[0], *current[1:])
        for form in (current, base):
            if form not in out:
                out.append(form)
        name = base[0]
        if name not in _WRAPPERS:
            break
        rest = list(base[1:])
        while rest and (rest[0].startswith("-") or _ASSIGNMENT.match(rest[0])):
            option = rest.pop(0)
            if option in _OPTION_ARGS and rest:
                rest.pop(0)
        if name in ("timeout", "chroot", "flock") and rest:
            rest = rest[_WRAPPERS[name] :]
        current = tuple(rest)
    return out
