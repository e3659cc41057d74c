"""The embedded, offline, deterministic judge of the ``gate`` reflex (pure).

It answers :data:`~executor.gate.decision.GATE_TABLE` from the whole action: destructive operations,
network exfiltration, privilege changes, obfuscation (base64-to-shell, eval, ``$(printf ...)``, hex
escapes, quoting tricks, unparseable shell, an environment that changes which code runs) and writes to
sensitive areas, with every written path resolved against the command's effective working directory (its
cwd and any ``cd`` before the write). Code handed to an interpreter on its command line (``python3 -c``,
``perl -e``, ``node -e`` ...) may write anything: when it can reach files or programs it counts as an
unknown write (``sensitive_path`` 1), and as a hook or start-up file write when it names one.
It is the floor under every other judge: the gate always runs it, and another judge can only make the
verdict stricter.

Sandbox material (``sandbox_data``: command output, file content) is only ever scanned for text that
tries to instruct the reviewer; nothing in it can lower a level. Every pattern is bounded so that a
hostile 256 KiB command cannot make the scan slow.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from executor.gate.env import risky_env
from executor.gate.policy import git_dir_alias
from executor.gate.shell import (
    GIT_HOOK_NAMES,
    GIT_TREE_WRITERS,
    PROGRAM_SHELLS,
    STARTUP_NAMES,
    ParsedCommand,
    judged_written,
    parse_command,
    path_under,
    resolve_target,
    target_variants,
)
from executor.models import Answer, JudgmentRequest

__all__ = ["Findings", "answer", "assess_command", "assess_path", "find_instructions"]

_ROOTISH = re.compile(
    r"^(/+|/+\*|~/?|~/\*|\$\{?HOME\}?/?|\$\{?HOME\}?/\*|"
    r"/+(bin|boot|dev|etc|home|lib|lib32|lib64|opt|root|sbin|srv|usr|var|proc|sys)/*\*?)$"
)
_DISK = re.compile(r"^/dev/(sd|hd|vd|xvd|nvme|mmcblk|disk|mapper|md|loop)")
_NET_TOOLS = frozenset(
    {"curl", "wget", "nc", "ncat", "netcat", "socat", "ssh", "scp", "sftp", "rsync", "ftp", "telnet", "fetch"}
)
_PRIV_TOOLS = frozenset(
    {
        "sudo",
        "su",
        "doas",
        "pkexec",
        "setcap",
        "chroot",
        "nsenter",
        "unshare",
        "capsh",
        "mount",
        "umount",
        "useradd",
        "usermod",
        "userdel",
        "groupadd",
        "passwd",
        "chpasswd",
        "visudo",
        "docker",
        "kubectl",
        "podman",
    }
)
_PACKAGE_TOOLS = frozenset({"pip", "pip3", "npm", "yarn", "pnpm", "cargo", "gem", "go", "apt", "apt-get", "apk"})
_KERNEL_TOOLS = frozenset({"insmod", "modprobe", "rmmod", "kexec", "sysctl"})
_DISK_TOOLS = frozenset({"mkfs", "mke2fs", "mkswap", "wipefs", "fdisk", "sfdisk", "parted", "blkdiscard"})
_INTERPRETERS = re.compile(r"^(python[0-9.]*|perl|ruby|node|php)$")
_UPLOAD_FLAGS = re.compile(
    r"^(-d|--data.*|-F|--form.*|-T|--upload-file|--post-data.*|--post-file.*|-X|--request|--json)(=.*)?$"
    r"|^-[a-zA-Z]*[dFT]$"
)
_SECRET_WORDS = re.compile(
    r"(\.ssh/|id_rsa|id_ed25519|id_ecdsa|\.aws/|\.netrc|\.git-credentials|/etc/shadow|\.env\b|credentials|"
    r"\$\{?[A-Z_]*(KEY|TOKEN|SECRET|PASSWORD)[A-Z_]*\}?|\bprintenv\b|\benv\s*\|)",
    re.IGNORECASE,
)
_DECODE_TO_SHELL = re.compile(
    r"\b(base64|base32|xxd|openssl\s{1,8}(enc|base64)|gunzip|zcat|rev)\b[^;&\n]{0,512}\|\s{0,8}(sudo\s{1,8})?"
    r"(\S{0,64}/)?((ba|da|z|k|a)?sh|python[0-9.]*|perl|ruby|node)\b"
)
_FETCH_TO_SHELL = re.compile(
    r"\b(curl|wget|fetch)\b[^|;&\n]{0,512}\|\s{0,8}(sudo\s{1,8})?(\S{0,64}/)?((ba|da|z|k|a)?sh|python[0-9.]*|perl|ruby"
    r"|node|php)\b|\b((ba|da|z|k)?sh|source|\.)\s{1,8}<\(\s{0,8}(curl|wget)|(\$\(|`)\s{0,8}(curl|wget)"
)
_DECODE_SUBST = re.compile(r"\$\([^)]{0,512}\b(base64|xxd|printf|rev|openssl)\b")
_PIPE_TO_SHELL = re.compile(r"\|\s{0,8}(sudo\s{1,8})?(\S{0,64}/)?(ba|da|z|k|a)?sh(\s|$)")
_ESCAPES = re.compile(r"\\x[0-9a-fA-F]{2}|\\[0-7]{3}|\\u[0-9a-fA-F]{4}|\$'[^']{0,512}\\")
_IFS = re.compile(r"\$\{?IFS\}?")
_PROMPT_EXPANSION = re.compile(r"\$\{[^{}]*@P\}")
"""``${x@P}``: the value expanded as a prompt string, command substitutions in it included."""
_DYNAMIC_CODE = re.compile(r"\b(exec|eval|compile|__import__|b64decode|fromhex|pack|decode)\s{0,4}\(")
_CODE_DELETE = re.compile(r"\b(unlink|rmtree|remove|rmdir|os\.system|subprocess|shutil)\b")
_FORK_BOMB = re.compile(r"(?<![\w:.-])([\w:.-]{1,64})\s{0,8}\(\)\s{0,8}\{[^}]{0,512}?\1\s{0,8}\|\s{0,8}\1\s{0,8}&")
_DEV_TCP = re.compile(r"/dev/(tcp|udp)/")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")
_INSTRUCTIONS = re.compile(
    r"(ignore\s{1,8}(all\s{1,8})?(the\s{1,8})?(previous|prior|above)\s{1,8}(instructions|rules)|"
    r"pre-?approved|answer\s{1,8}\W?allow|auto-?approve|you\s{1,8}are\s{1,8}now|"
    r"(^|\n)\s{0,16}(system|assistant|developer)\s{0,4}:|"
    r"<\|?(im_start|system)\|?>|\bdisregard\b.{0,64}\b(instructions|policy)|do\s{1,8}not\s{1,8}ask\s{1,8}the\s{1,8}user)",
    re.IGNORECASE,
)
# What inline interpreter code needs to reach a file or a program (any language): over-approximate on purpose.
_CODE_REACH = re.compile(
    r"\b(import|require|include|use|open|exec|eval|compile|system|spawn|popen|fork|write|unlink|remove|rename|"
    r"symlink|link|chmod|chown|mkdir|rmdir|copy|move|File|IO|Dir|Path|fs|os|sys|shutil|subprocess|process|"
    r"Kernel|send|getattr|setattr|globals|vars|locals|breakpoint|help|input|load|dlopen|ctypes|socket|syscall|"
    r"qx|Function|constructor|globalThis|module|builtins|Deno|Bun|getline|print\s*>|printf\s*>)\b"
    r"|__|`|%x|\$\(|[<>|]|\\[0-7xuU]|\bchr\b|\bord\b|\bdo\b",
)
_RUNS_CODE = re.compile(
    r"^(python[0-9.]*|pypy[0-9.]*|perl[0-9.]*|ruby[0-9.]*|node|nodejs|deno|bun|php[0-9.]*|"
    r"lua[0-9.]*|(ba|da|z|k)?sh|make|awk|gawk|Rscript|tclsh[0-9.]*|\./.*|/.*)$"
)
_CODE_SENSITIVE = re.compile(r"\.git\b|\bhooks\b|core\.hookspath|gitdir", re.IGNORECASE)
_CODE_STARTUP = re.compile(
    r"\.(bashrc|bash_profile|bash_login|profile|zshrc|zshenv|zprofile|gitconfig)\b|\.ssh\b|authorized_keys",
    re.IGNORECASE,
)
_GIT_OPTION_ARGS = frozenset({"-c", "-C", "--git-dir", "--work-tree", "--namespace", "--config-env", "--exec-path"})
_GIT_PROGRAM_KEYS = re.compile(
    r"(?i)^(core\.(hookspath|fsmonitor|sshcommand|pager|editor|askpass|gitproxy|worktree)|alias\.|credential\.|"
    r"include|diff\.external|gpg\.(.*\.)?program|uploadpack\.|receive\.|web\.browser|browser\.|man\.|"
    r"sequence\.editor|sendemail\.|pager\.|remote\..*\.(uploadpack|receivepack|vcs)|protocol\.|url\.|"
    r".*\.(command|textconv|clean|smudge|process|driver|cmd|program|path|tool)\b)"
)
"""Git config keys whose values git runs as programs, or that point git at other code or places."""
_SCAN_LIMIT = 1_000_000
"""Characters of sandbox material scanned for instructions (the rest is not read)."""


@dataclass
class Findings:
    """Levels per gate question plus the reasons behind them."""

    levels: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ("destructive", "exfiltration", "privilege", "obfuscation", "sensitive_path"), 0
        )
    )
    instructions: bool = False
    reasons: list[str] = field(default_factory=list)

    def raise_to(self, question: str, level: int, reason: str) -> None:
        """Record ``reason`` and raise ``question`` to at least ``level``."""
        if level > self.levels[question]:
            self.levels[question] = level
        if reason not in self.reasons:
            self.reasons.append(reason)

    def answers(self) -> dict[str, Answer]:
        """The findings as gate-table answers."""
        out: dict[str, Answer] = dict(self.levels)
        out["instructions_in_material"] = self.instructions
        return out


def assess_path(path: str, findings: Findings, *, workspace: str, home: str, writing: bool = True) -> None:
    """Raise ``sensitive_path`` (and ``privilege``) for a path a command or write may write."""
    if path.startswith("~"):
        path = home + path[1:]
    path = path.replace("$HOME", home).replace("${HOME}", home)
    if not path.startswith("/"):
        path = posixpath.join(workspace, path)
    path = posixpath.normpath(path)
    parts = path.split("/")
    name = parts[-1]
    if ".git" in parts:
        rest = parts[parts.index(".git") + 1 :]
        if (
            "hooks" in rest
            or rest[-1:] in (["config"], ["config.worktree"], ["commondir"], ["gitdir"], ["*"])
            or not rest
        ):
            findings.raise_to("sensitive_path", 3, f"writes git hooks or git config ({path}), which run on the host")
            return
        # Anything else in the git directory (info/attributes, info/exclude, refs...) is git's own state: git
        # writes it; a person reviews a direct write.
        findings.raise_to("sensitive_path", 1, f"writes inside the git directory ({path})")
        return
    if len(parts) >= 2 and parts[-2] == "hooks" and name == "*":
        findings.raise_to("sensitive_path", 2, f"writes files it cannot name into a hooks folder ({path})")
        return
    if len(parts) >= 2 and parts[-2] == "hooks" and name in GIT_HOOK_NAMES:
        findings.raise_to("sensitive_path", 3, f"writes a git hook by name ({path}); git may be pointed at it")
        return
    if path.startswith("/etc/sudoers"):
        findings.raise_to("sensitive_path", 3, f"writes {path}")
        findings.raise_to("privilege", 3, "changes sudo rules")
        return
    if name in STARTUP_NAMES or ".ssh" in parts:
        findings.raise_to("sensitive_path", 2, f"writes a start-up, ssh or git config file ({path})")
        return
    top = parts[1] if len(parts) > 1 else ""
    if top in {"etc", "usr", "bin", "sbin", "lib", "lib64", "boot", "var", "opt", "root", "proc", "sys"}:
        findings.raise_to("sensitive_path", 2, f"writes a system folder ({path})")
        return
    if (
        name in {".envrc", ".gitattributes", ".gitmodules", ".gitlab-ci.yml", ".pre-commit-config.yaml"}
        or any(part in {".vscode", ".idea"} for part in parts)
        or "/.github/workflows/" in path
    ):
        findings.raise_to("sensitive_path", 1, f"writes host tool or CI configuration ({path})")
        return
    if path.startswith("/dev/"):
        if _DISK.match(path):
            findings.raise_to("destructive", 3, f"writes the raw device {path}")
        return
    if writing and not path_under(path, workspace) and not path_under(path, "/tmp"):
        findings.raise_to("sensitive_path", 1, f"writes outside the workspace ({path})")


def _git_subcommand(args: tuple[str, ...], findings: Findings) -> tuple[str, tuple[str, ...]]:
    """Git's subcommand and its arguments, past global options (``-c KEY=VALUE``, ``-C DIR`` ...)."""
    index = 0
    while index < len(args) and args[index].startswith("-"):
        option = args[index]
        value = args[index + 1] if option in _GIT_OPTION_ARGS and index + 1 < len(args) else None
        if option in ("-c", "--config-env") and value is not None and _GIT_PROGRAM_KEYS.match(value):
            findings.raise_to("obfuscation", 2, f"git -c sets {value.split('=')[0][:60]!r}, which runs programs")
        if option.startswith("--config-env="):
            findings.raise_to(
                "obfuscation", 2, "git --config-env takes config (possibly programs) from the environment"
            )
        index += 2 if value is not None else 1
    if index >= len(args):
        return "", ()
    return args[index], args[index + 1 :]


def _git_config_values(sub: str, rest: tuple[str, ...]) -> list[str]:
    """``KEY=VALUE`` settings a git subcommand's own options make (``clone --config``/``-c``)."""
    values: list[str] = []
    for index, arg in enumerate(rest):
        if arg.startswith("--config="):
            values.append(arg.removeprefix("--config="))
        elif (arg == "--config" or (arg == "-c" and sub == "clone")) and index + 1 < len(rest):
            values.append(rest[index + 1])
    return values


def _assess_candidate(argv: tuple[str, ...], findings: Findings, workspace: str, home: str) -> None:
    name = argv[0]
    args = argv[1:]
    flags = [arg for arg in args if arg.startswith("-")]
    operands = [arg for arg in args if not arg.startswith("-")]
    if name == "rm":
        recursive = any(
            flag in ("--recursive", "-R") or (not flag.startswith("--") and ("r" in flag or "R" in flag))
            for flag in flags
        )
        if "--no-preserve-root" in flags or (recursive and any(_ROOTISH.match(op) for op in operands)):
            findings.raise_to("destructive", 3, "recursively deletes /, a system folder or the home folder")
        elif recursive:
            outside = [
                op
                for op in operands
                if op.startswith("/")
                and not path_under(posixpath.normpath(op), workspace)
                and not path_under(posixpath.normpath(op), "/tmp")
            ]
            if outside:
                findings.raise_to("destructive", 2, f"recursively deletes outside the workspace ({outside[0]})")
            else:
                findings.raise_to("destructive", 1, "recursively deletes files")
    elif name in _DISK_TOOLS or name.startswith("mkfs."):
        findings.raise_to("destructive", 3, f"{name} destroys a filesystem or disk")
    elif name == "shred":
        findings.raise_to("destructive", 3 if any(_DISK.match(op) for op in operands) else 2, "shreds data")
    elif name == "find":
        if "-delete" in args or any(a in ("rm", "/bin/rm") for a in args):
            if any(_ROOTISH.match(op) for op in operands[:1]):
                findings.raise_to("destructive", 3, "find deletes from / or the home folder")
            else:
                findings.raise_to("destructive", 1, "find deletes what it matches")
    elif name == "git" and args:
        sub, rest = _git_subcommand(args, findings)
        if any(arg.startswith(("--separate-git-dir", "--template", "--git-dir")) for arg in args):
            findings.raise_to(
                "sensitive_path", 1, "moves the git directory or its templates; hooks then live somewhere else"
            )
        if sub == "push":
            if any(a.startswith(("--force", "+")) or a in ("-f", "--delete", "--mirror") for a in rest):
                findings.raise_to("destructive", 2, "force-pushes or deletes remote history")
            findings.raise_to("exfiltration", 1, "pushes code to a remote")
        elif sub == "reset" and "--hard" in rest:
            findings.raise_to("destructive", 1, "discards uncommitted work (reset --hard)")
        elif sub == "clean" and any(a.startswith("-") and "f" in a for a in rest):
            findings.raise_to("destructive", 1, "deletes untracked files (clean -f)")
        elif sub == "config":
            joined = " ".join(rest).lower()
            if re.search(r"hookspath|fsmonitor|pager|editor|sshcommand|alias\.|filter\.|credential", joined) or any(
                _GIT_PROGRAM_KEYS.match(arg) for arg in rest if not arg.startswith("-")
            ):
                findings.raise_to("sensitive_path", 3, "sets a git config key that runs programs on the host")
            elif "--global" in rest or "--system" in rest:
                findings.raise_to("sensitive_path", 2, "changes global git configuration")
        for value in _git_config_values(sub, rest):
            if _GIT_PROGRAM_KEYS.match(value):
                findings.raise_to("obfuscation", 2, f"git {sub} sets {value.split('=')[0][:60]!r}, which runs programs")
    elif name in ("kill", "pkill", "killall") and (name != "kill" or "-1" in args):
        findings.raise_to("destructive", 1, "kills processes beyond its own")
    if name in _NET_TOOLS:
        findings.raise_to("exfiltration", 1, f"uses the network ({name})")
        uploads = any(_UPLOAD_FLAGS.match(arg) for arg in args) or (
            name in ("scp", "rsync") and operands and ":" in operands[-1]
        )
        if uploads:
            findings.raise_to("exfiltration", 2, f"uploads data ({name})")
    elif name in _PACKAGE_TOOLS and any(arg in ("install", "add", "get", "update", "upgrade") for arg in args):
        findings.raise_to("exfiltration", 1, f"downloads packages ({name})")
    if name in _PRIV_TOOLS:
        findings.raise_to("privilege", 2, f"changes privileges or confinement ({name})")
    elif name in _KERNEL_TOOLS:
        findings.raise_to("privilege", 3, f"changes the kernel ({name})")
    elif name == "chmod":
        mode = operands[0] if operands else ""
        recursive = any((flag.startswith("-") and "R" in flag) or flag == "--recursive" for flag in flags)
        if recursive and any(_ROOTISH.match(op) for op in operands[1:]):
            findings.raise_to("privilege", 3, "changes permissions of / or a system folder recursively")
        elif re.fullmatch(r"[0-7]?[2467][0-7]{3}", mode) or re.search(r"[ugoa]*[+=][rwxXt]*s", mode):
            findings.raise_to("privilege", 2, "sets a setuid or setgid bit")
        elif "777" in mode or "o+w" in mode or "a+w" in mode:
            findings.raise_to("privilege", 1, "makes files world-writable")
    elif name == "chown":
        recursive = any(flag.startswith("-") and "R" in flag for flag in flags)
        if recursive and any(_ROOTISH.match(op) for op in operands[1:]):
            findings.raise_to("privilege", 3, "changes ownership of / or a system folder recursively")
        else:
            findings.raise_to("privilege", 1, "changes file ownership")
    if name == "eval" or (name in ("source", ".") and args):
        findings.raise_to("obfuscation", 2 if name == "eval" else 1, f"runs text as code ({name})")
    elif _INTERPRETERS.match(name) and any(flag in ("-c", "-e", "-E", "-r") for flag in flags):
        code = " ".join(operands)
        if _DYNAMIC_CODE.search(code):
            findings.raise_to("obfuscation", 2, f"{name} builds code at run time (exec/eval/decode)")
        if _CODE_DELETE.search(code):
            findings.raise_to("destructive", 1, f"{name} one-liner deletes files or runs commands")


def _assess_env(env: Mapping[str, str], parsed: ParsedCommand, findings: Findings) -> None:
    for found in risky_env(env, parsed.assignments):
        where = "the call's env" if found.source == "env" else "the command"
        findings.raise_to(
            "obfuscation",
            1,
            f"{where} sets {found.name[:60]!r} ({found.env_class}), which changes which code runs",
        )


def _assess_writes(parsed: ParsedCommand, findings: Findings, *, cwd: str, workspace: str, home: str) -> None:
    for target in parsed.write_targets:
        paths, known = resolve_target(target, cwd=cwd, home=home)
        for path in paths:
            if judged_written(target, path, workspace=workspace, home=home):
                assess_path(path, findings, workspace=workspace, home=home)
        if not known:
            name = posixpath.basename(target.word)
            if name in GIT_HOOK_NAMES or name in ("config", ".git"):
                findings.raise_to(
                    "sensitive_path", 2, f"writes {name!r} in a folder only known at run time (maybe a git directory)"
                )
            else:
                findings.raise_to(
                    "sensitive_path", 1, f"writes {target.word[:60]!r} in a folder only known at run time"
                )


def _assess_inline_code(parsed: ParsedCommand, findings: Findings, *, cwd: str) -> None:
    in_git = ".git" in cwd.split("/") or any(".git" in folder.split("/") for folder in parsed.cd_dirs)
    if in_git and any(_RUNS_CODE.match(candidate[0]) for candidate in parsed.candidates):
        # A script run from inside a git directory may write its hooks or config with a relative path.
        findings.raise_to("sensitive_path", 2, "runs an interpreter inside a git directory")
    for interpreter, code in parsed.inline_code:
        if code == "-":
            findings.raise_to(
                "sensitive_path", 1, f"{interpreter} reads its program from stdin; what it writes is unknown"
            )
            continue
        _assess_code(interpreter, code, findings, in_git=in_git)


_JOINED_LITERALS: Final = re.compile(r"""(["'])\s{0,8}(?:\+|\.\.?|,|\s)?\s{0,8}["']""")
"""Where two string literals meet (``'.gi' + 't'``, perl's ``.``, lua's ``..``, awk's and C's juxtaposition, a
list for ``join``): removed, the code reads as the name its parts spell."""
_SPELLED_CHARS: Final = re.compile(
    r"\\x[2-7][0-9a-fA-F]|\\(?:0?[4-7][0-7]|1[0-7][0-7])|\\u00[2-7][0-9a-fA-F]|\bchr\s{0,4}\(|fromCharCode|\[::-1\]"
)
"""Printable characters spelled by number (``\\x2e``, ``chr(46)``) or text reversed: a name built so that no
literal shows it. Escapes of control characters (``\\x1b`` for colours) are ordinary and not counted."""


def _assess_code(interpreter: str, code: str, findings: Findings, *, in_git: bool) -> None:
    """Raise levels for a program an interpreter runs, by what its text names, read also with its string literals
    joined (``'.gi' + 't/hooks'`` names ``.git/hooks``); code that can write and spells characters by number or
    reverses text hides what it names."""
    joined = _JOINED_LITERALS.sub("", code)
    if _CODE_REACH.search(code) and _SPELLED_CHARS.search(code):
        findings.raise_to("obfuscation", 2, f"{interpreter} code spells characters by number or reverses text")
    if _CODE_SENSITIVE.search(joined) or (in_git and _CODE_REACH.search(code)):
        findings.raise_to("sensitive_path", 3, f"{interpreter} code names git hooks, git config or a git directory")
    elif _CODE_STARTUP.search(joined):
        findings.raise_to("sensitive_path", 2, f"{interpreter} code names shell start-up or ssh files")
    elif _CODE_REACH.search(code):
        findings.raise_to(
            "sensitive_path", 1, f"{interpreter} code can write files or run programs; what it writes is unknown"
        )


def _assess_stdin_program(
    parsed: ParsedCommand,
    program: object,
    findings: Findings,
    *,
    workspace: str,
    home: str,
    cwd: str,
    env: Mapping[str, str],
) -> None:
    """Judge the supplied stdin as the program the command's shells and interpreters read from it: a shell's as a
    command of its own, an interpreter's by what its text names; one nobody can read (too large, not text) asks."""
    if not isinstance(program, str):
        findings.raise_to(
            "obfuscation",
            1,
            f"{parsed.stdin_readers[0]} reads its program from stdin, which is too large or not text to review",
        )
        return
    in_git = ".git" in cwd.split("/")
    for reader in parsed.stdin_readers:
        if reader in PROGRAM_SHELLS:
            assess_command(program, findings, workspace=workspace, home=home, cwd=cwd, env=env)
        else:
            _assess_code(reader, program, findings, in_git=in_git)


_FETCHERS = frozenset({"curl", "wget", "fetch", "aria2c", "lynx", "links", "w3m", "http", "https", "nc", "ncat"})
_DECODERS = frozenset(
    {"base64", "base32", "basenc", "xxd", "openssl", "gunzip", "zcat", "gzip", "bunzip2", "bzcat", "xz", "xzcat",
     "unxz", "zstd", "zstdcat", "rev", "uudecode"}
)  # fmt: skip


def _assess_members(members: list[str], findings: Findings) -> None:
    """The files an unpacked archive writes (their destination folder is judged with the command): git hooks or
    config, start-up or ssh files among them; an archive with more members than were listed is judged unseen."""
    for member in members:
        found = _mentioned(member)
        if found is not None:
            findings.raise_to("sensitive_path", found[0], f"unpacks {found[1]} ({member[:60]})")
            return
    if members == ["..."]:
        findings.raise_to(
            "sensitive_path",
            1,
            "unpacks an archive the gate cannot read (not a tar, a compression it does not decode, or damaged)",
        )
    elif members and members[-1] == "...":
        findings.raise_to(
            "sensitive_path", 1, "unpacks an archive the gate cannot list whole (more files than it lists, or damaged)"
        )


def _assess_generated_code(parsed: ParsedCommand, findings: Findings) -> None:
    """A program read from text the command makes (a pipe, a process substitution), whatever wraps the reader."""
    for generated in parsed.generated_code:
        sources = set(generated.sources)
        if sources & _FETCHERS:
            findings.raise_to("obfuscation", 3, "runs code fetched from the network without showing it")
        elif sources & _DECODERS:
            findings.raise_to("obfuscation", 3, "decodes a payload straight into a shell or interpreter")
        elif generated.runner in PROGRAM_SHELLS:
            findings.raise_to("obfuscation", 2, "pipes generated text into a shell")


_MENTION = re.compile(r"[^\s'\"<>|;&()=`]+")
"""A word of a command's text that may be a path (inside quotes and option values too)."""
_WRITERS = frozenset(
    {"cp", "mv", "ln", "install", "rsync", "tee", "touch", "truncate", "chmod", "chown", "chgrp", "rm", "dd", "tar",
     "bsdtar", "unzip", "cpio", "patch", "ed", "ex", "vi", "vim", "nano", "emacs", "xargs", "make", "shred",
     "mkfifo", "mknod", "curl", "wget", "split", "csplit", "gzip", "gunzip", "zip", "agent"}
)  # fmt: skip
"""Commands that write files their arguments, their stdin or their options may name (making or removing a folder
writes no content: ``mkdir -p .git/hooks`` is no hook)."""
_GIT_WRITERS = GIT_TREE_WRITERS | {"config", "init", "submodule", "mv", "rm", "update-index", "hook", "archive"}
"""Git subcommands that write files: into the work tree, or git's own (config, hooks)."""


def _mentioned(word: str) -> tuple[int, str] | None:
    """How sensitive a path ``word`` may name is (brace and glob forms included): 2 for git hooks or git config
    and start-up or ssh files; None for anything else."""
    for variant in target_variants(word):
        parts = [part for part in variant.split("/") if part not in ("", ".")]
        for index, part in enumerate(parts):
            after = parts[index + 1 : index + 2]
            if part == ".git" and after and after[0] in ("hooks", "config", "config.worktree"):
                return 2, "git hooks or git config"
            if part == "hooks" and after and after[0] in GIT_HOOK_NAMES:
                return 2, "a git hook"
        if parts and (parts[-1] in STARTUP_NAMES or ".ssh" in parts):
            return 2, "a start-up or ssh file"
    return None


def _assess_mentions(command: str, parsed: ParsedCommand, findings: Findings) -> None:
    """A command that can write and names git hooks, git config or a start-up file anywhere in its text (an
    argument handed on by xargs, a path inside a string run by another tool) may write it in a way the reading
    above does not follow: a floor under those ways, not a reading of them."""
    writes = any(not target.word.startswith("/dev/") for target in parsed.write_targets) or any(
        name in _WRITERS
        or _INTERPRETERS.match(name)
        or name in PROGRAM_SHELLS
        or (name == "git" and any(arg in _GIT_WRITERS for arg in args))
        for name, *args in parsed.candidates
    )
    if not writes:
        return
    words = _MENTION.findall(command[:_SCAN_LIMIT])
    for word in words:
        found = _mentioned(word)
        if found is not None:
            findings.raise_to(
                "sensitive_path",
                found[0],
                f"names {found[1]} ({word[:60]}) and can write files in ways the gate cannot follow",
            )
            return
    # The folder and the hook's name in separate words ('find .git -name pre-commit -exec chmod +x {} +').
    parts = {part for word in words for variant in target_variants(word) for part in variant.split("/")}
    hooks = sorted(parts & GIT_HOOK_NAMES)
    if hooks and parts & {".git", "hooks"}:
        findings.raise_to(
            "sensitive_path",
            2,
            f"names a git folder and a git hook's name ({hooks[0]}) and can write files in ways the gate cannot follow",
        )


def assess_command(
    command: str,
    findings: Findings,
    *,
    workspace: str,
    home: str,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
) -> ParsedCommand:
    """Raise levels for everything a bash command string might do, run in ``cwd`` with ``env`` added."""
    parsed = parse_command(command)
    cwd = cwd or workspace
    _assess_env(env or {}, parsed, findings)
    _assess_writes(parsed, findings, cwd=cwd, workspace=workspace, home=home)
    _assess_inline_code(parsed, findings, cwd=cwd)
    if not parsed.parsed:
        findings.raise_to("obfuscation", 2, "the command does not parse cleanly or nests too deep to read")
    _assess_generated_code(parsed, findings)
    _assess_mentions(command, parsed, findings)
    if _FETCH_TO_SHELL.search(command):
        findings.raise_to("obfuscation", 3, "runs code fetched from the network without showing it")
    if _DECODE_TO_SHELL.search(command):
        findings.raise_to("obfuscation", 3, "decodes a payload straight into a shell or interpreter")
    if _DECODE_SUBST.search(command):
        findings.raise_to("obfuscation", 2, "builds words from decoded or printf output")
    if _PIPE_TO_SHELL.search(command):
        findings.raise_to("obfuscation", 2, "pipes generated text into a shell")
    if _ESCAPES.search(command):
        # Escapes alone are common (colours, binary test data): a risk a person can review. Escapes that reach
        # a shell or eval are caught above (pipe to shell) and below (computed command names) at level 2.
        findings.raise_to("obfuscation", 1, "uses hex, octal or unicode escapes")
    if _IFS.search(command):
        findings.raise_to("obfuscation", 2, "uses $IFS to hide word boundaries")
    if _PROMPT_EXPANSION.search(command):
        findings.raise_to("obfuscation", 2, "expands a variable as a prompt (${x@P} runs the substitutions it holds)")
    if _CONTROL.search(command):
        findings.raise_to("obfuscation", 2, "contains control or invisible characters")
    if "`" in command:
        findings.raise_to("obfuscation", 1, "uses backtick substitution")
    if _FORK_BOMB.search(command):
        findings.raise_to("destructive", 3, "defines a fork bomb")
    if _DEV_TCP.search(command):
        findings.raise_to("exfiltration", 2, "opens a raw /dev/tcp or /dev/udp socket")
    network = any(candidate[0] in _NET_TOOLS for candidate in parsed.candidates) or bool(_DEV_TCP.search(command))
    if network and _SECRET_WORDS.search(command):
        findings.raise_to("exfiltration", 3, "sends secrets (keys, tokens, credentials) over the network")
    for segment in parsed.segments:
        word = segment[0]
        if "$" in word or "`" in word or word.startswith(("(", "{")):
            findings.raise_to("obfuscation", 2, "the command name itself is computed at run time")
        elif word not in command:
            findings.raise_to("obfuscation", 2, f"the command name {word[:40]!r} is spelled with quotes or escapes")
    for candidate in parsed.candidates:
        name = candidate[0]
        if name not in ("[", "[[") and _GLOBBED.search(name):
            findings.raise_to(
                "obfuscation", 2, f"the program is named by a pattern ({name[:40]!r}): which one runs is unknown"
            )
        if name == "hash" and "-p" in candidate[1:]:
            findings.raise_to("obfuscation", 2, "gives a program another name (hash -p)")
        _assess_candidate(candidate, findings, workspace, home)
    return parsed


_GLOBBED = re.compile(r"[*?]|\[.*\]")
"""A program named by a glob pattern (``/bin/r?``, ``/???/rm``, ``/bin/[r]m``)."""


def find_instructions(texts: Iterable[str]) -> bool:
    """True when any text (bounded scan) tries to instruct the reviewer or claims pre-approval."""
    budget = _SCAN_LIMIT
    for text in texts:
        if budget <= 0:
            break
        if _INSTRUCTIONS.search(text[:budget]):
            return True
        budget -= len(text)
    return False


def _strings(value: object, depth: int = 0) -> Iterable[str]:
    if depth > 8:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item, depth + 1)


def judge_material(material: Mapping[str, object]) -> Findings:
    """Findings for gate material as :class:`~executor.gate.gate.Gate` builds it."""
    findings = Findings()
    action = material.get("action")
    workspace = str(material.get("workspace") or "/workspace")
    home = str(material.get("home") or "/home/agent")
    if not isinstance(action, Mapping):
        findings.raise_to("obfuscation", 2, "the material holds no action to judge")
        return findings
    if action.get("kind") == "bash":
        command = action.get("command")
        cwd = action.get("cwd")
        env = action.get("env")
        if not isinstance(command, str):
            findings.raise_to("obfuscation", 2, "the action has no command string")
        else:
            where = cwd if isinstance(cwd, str) and cwd.startswith("/") else workspace
            added = {str(k): str(v) for k, v in env.items()} if isinstance(env, Mapping) else {}
            parsed = assess_command(command, findings, workspace=workspace, home=home, cwd=where, env=added)
            members = action.get("stdin_members")
            if isinstance(members, list):
                _assess_members([str(member) for member in members], findings)
            if action.get("stdin_supplied") is True and parsed.stdin_readers:
                _assess_stdin_program(
                    parsed,
                    action.get("stdin_program"),
                    findings,
                    workspace=workspace,
                    home=home,
                    cwd=where,
                    env=added,
                )
    elif action.get("kind") == "write":
        path = action.get("path")
        git_dir = action.get("git_dir")
        if not isinstance(path, str):
            findings.raise_to("sensitive_path", 2, "the write has no path")
        else:
            assess_path(path, findings, workspace=workspace, home=home)
            alias = git_dir_alias(path, git_dir if isinstance(git_dir, str) else None)
            if alias is not None:
                assess_path(alias, findings, workspace=workspace, home=home)
    else:
        findings.raise_to("obfuscation", 2, "unknown action kind")
    findings.instructions = find_instructions(_strings(material.get("sandbox_data"))) or find_instructions(
        _strings(action)
    )
    return findings


def answer(request: JudgmentRequest) -> dict[str, Answer]:
    """Answers to the gate table for ``request`` (the rules provider's entry point)."""
    return judge_material(request.material).answers()
