"""The shell reading's effects: assignments, write targets in their effective directory, inline code (pure)."""

from __future__ import annotations

import pytest

from executor.gate.shell import WriteTarget, parse_command, resolve_target


@pytest.mark.parametrize(
    ("command", "assigned"),
    [
        ("LD_PRELOAD=/w/x.so ls", ["LD_PRELOAD"]),
        ("env PATH=/w:$PATH ls", ["PATH"]),
        ("env -u X BASH_ENV=/x bash -c ls", ["BASH_ENV"]),
        ("env -S 'LD_PRELOAD=/x id'", ["LD_PRELOAD"]),
        ("export BASH_ENV=/x; ls", ["BASH_ENV"]),
        ("PATH=/w/bin:$PATH; ls", ["PATH"]),
        ("declare -x PS4='$(id)'; set -x; ls", ["PS4"]),
        ("X=1; export X", ["X", "X"]),
        ("printf -v PATH %s /w; ls", ["PATH"]),
        ("read PATH < f; ls", ["PATH"]),
        ("sudo env LD_PRELOAD=x id", ["LD_PRELOAD"]),
        ('echo "$(LD_PRELOAD=x ls)"', ["LD_PRELOAD"]),
        ("for PATH in /w/bin; do ls; done", ["PATH"]),
        ("select HOME in /a /b; do ls; done", ["HOME"]),
        ("declare -n r=PATH; r=/x", ["r", "PATH", "r"]),
        (": ${BASH_ENV:=/tmp/x}", ["BASH_ENV"]),
        ('echo "${LD_PRELOAD=/x.so}"', ["LD_PRELOAD"]),
        ("ls -la", []),
        ("echo PATH=x", []),
        ("echo ${X:-default}", []),
    ],
)
def test_assignments_are_found(command: str, assigned: list[str]) -> None:
    """Every way the string sets or exports a variable is reported; words that only look like one are not."""
    assert [name for name, _ in parse_command(command).assignments] == assigned


def _paths(command: str, cwd: str = "/workspace") -> set[str]:
    out: set[str] = set()
    for target in parse_command(command).write_targets:
        out.update(resolve_target(target, cwd=cwd, home="/home/agent")[0])
    return out


@pytest.mark.parametrize(
    ("command", "cwd", "expected"),
    [
        ("cd .git/hooks && printf x > pre-commit", "/workspace", "/workspace/.git/hooks/pre-commit"),
        ("cd .git; cd hooks; echo x >> pre-push", "/workspace", "/workspace/.git/hooks/pre-push"),
        ("pushd /tmp/h && tee pre-commit", "/workspace", "/tmp/h/pre-commit"),
        ("echo x > pre-commit", "/workspace/.git/hooks", "/workspace/.git/hooks/pre-commit"),
        ("cd .. && echo x > f", "/workspace/a", "/workspace/f"),
        ("cd ~ && echo x > .bashrc", "/workspace", "/home/agent/.bashrc"),
        ("bash -c 'cd .git/hooks; cp /tmp/p pre-commit'", "/workspace", "/workspace/.git/hooks/pre-commit"),
        ("cd .git && dd of=config if=/tmp/x", "/workspace", "/workspace/.git/config"),
        ("cd .git && sed -i s/a/b/ config", "/workspace", "/workspace/.git/config"),
        ("echo x > $HOME/.profile", "/workspace", "/home/agent/.profile"),
    ],
)
def test_write_targets_resolve_against_the_effective_cwd(command: str, cwd: str, expected: str) -> None:
    """A target is placed in the command's cwd and in every directory an earlier cd may have entered."""
    assert expected in _paths(command, cwd)


def test_the_directory_before_a_cd_stays_a_candidate() -> None:
    """`cd x || true` may not have moved: both places are candidates (the reading over-approximates)."""
    assert _paths("cd sub || true; echo x > f") == {"/workspace/f", "/workspace/sub/f"}


@pytest.mark.parametrize("command", ['cd "$D" && echo x > pre-commit', "cd - && echo x > f", "cd $(mktemp -d); tee f"])
def test_a_computed_cd_makes_later_relative_targets_unknown(command: str) -> None:
    """After cd to a computed folder a relative target cannot be placed, and says so."""
    targets = parse_command(command).write_targets
    assert targets and all(not resolve_target(t, cwd="/workspace", home="/h")[1] for t in targets)


def test_a_computed_target_is_unknown() -> None:
    """A target spelled with a variable other than $HOME cannot be placed."""
    target = WriteTarget(word="$X/f", dirs=("",), dir_unknown=False, via="redirect")
    assert resolve_target(target, cwd="/workspace", home="/h") == ((), False)


@pytest.mark.parametrize(
    ("command", "code"),
    [
        ("python3 -c 'print(1)'", [("python3", "print(1)")]),
        ("python -Ic 'x'", [("python", "x")]),
        ("perl -e 'unlink q(x)'", [("perl", "unlink q(x)")]),
        ("perl -pi -e s/a/b/ f", [("perl", "s/a/b/")]),
        ("node -e 'require(1)'", [("node", "require(1)")]),
        ("node --eval=1", [("node", "1")]),
        ("ruby -e 'File.write(1)'", [("ruby", "File.write(1)")]),
        ("php -r 'x();'", [("php", "x();")]),
        ("cat x.py | python3", [("python3", "-")]),
        ("python3 - <<EOF\nprint(1)\nEOF", [("python3", "print(1)\n"), ("python3", "-")]),
        ("awk '{print > \"f\"}' in", [("awk", '{print > "f"}')]),
        ("bash -c \"python3 -c 'x'\"", [("python3", "x")]),
        ("python3 script.py -c x", []),
        ("python3 -m pytest -q", []),
        ("node app.js", []),
        # An option's value is not the script: the program still comes from stdin or the code flag.
        ("python3 -W ignore", [("python3", "-")]),
        ("python3 -W ignore script.py", []),
        ("python3 -X dev -c 'x'", [("python3", "x")]),
        ("perl -I lib", [("perl", "-")]),
        ("node -r ./hook.js", [("node", "-")]),
        ("awk -F : '{system(\"id\")}' f", [("awk", '{system("id")}')]),
        ("awk -f prog.awk f", []),
        ("python3 <<< 'import os'", [("python3", "import os"), ("python3", "-")]),
    ],
)
def test_inline_code_is_found(command: str, code: list[tuple[str, str]]) -> None:
    """Code on an interpreter's command line (or read from stdin) is reported; a script file is not."""
    assert list(parse_command(command).inline_code) == code


@pytest.mark.parametrize(
    ("command", "runner", "sources"),
    [
        ("curl x | command sh", "sh", ("curl",)),
        ("a | b | (cd y; bash)", "bash", ("a", "b", "cd")),
        ("bash <(base64 -d <<< X)", "bash", ("base64",)),
        (". <(curl x)", ".", ("curl",)),
        ("bash < <(curl x)", "bash", ("curl",)),
        ("cat s | sh -s -- arg", "sh", ("cat",)),
        ("curl x | env python3", "python3", ("curl",)),
    ],
)
def test_programs_read_from_generated_text_are_found(command: str, runner: str, sources: tuple[str, ...]) -> None:
    assert [(g.runner, g.sources) for g in parse_command(command).generated_code] == [(runner, sources)]


@pytest.mark.parametrize(
    "command",
    [
        "curl x | { cd y; }; bash",
        "ls | grep x; bash",
        "bash script.sh",
        "echo hi | bash -c cat",
        "cat a | python3 x.py",
    ],
)
def test_a_shell_that_reads_no_generated_text_is_not_reported(command: str) -> None:
    assert parse_command(command).generated_code == ()


@pytest.mark.parametrize(
    ("command", "targets"),
    [
        ("cp -t .git/hooks pre-commit", [".git/hooks/pre-commit"]),
        ("mv -vt ~/.ssh a b", ["~/.ssh/a", "~/.ssh/b"]),
        ("sort -o out.txt in.txt", ["out.txt"]),
        ("git log --output=log.txt", ["log.txt"]),
        ("tar -xf a.tar -C dest", ["dest/*"]),
        ("unzip a.zip -d dest", ["dest/*"]),
        ("sed -n 'w copy.txt' in.txt", ["copy.txt"]),
        ("tar -C src -cf - .", []),
        ("rsync -t a b", ["b"]),
    ],
)
def test_writes_named_by_options_are_targets(command: str, targets: list[str]) -> None:
    assert [target.word for target in parse_command(command).write_targets] == targets


@pytest.mark.parametrize(
    ("command", "readers"),
    [
        ("bash", ("bash",)),
        ("bash -o posix", ("bash",)),
        ("bash -euo pipefail", ("bash",)),
        ("bash +x", ("bash",)),
        ("dash +e", ("dash",)),
        ("bash -O extglob", ("bash",)),
        ("bash --rcfile f", ("bash",)),
        ("sh -s -- arg", ("sh",)),
        ("bash /dev/stdin", ("bash",)),
        ("su agent", ("su",)),
        ("python3 -W ignore", ("python3",)),
        ("bash script.sh", ()),
        ("bash -euo pipefail build.sh", ()),
        ("bash -o posix -c ls", ()),
        ("su -c id agent", ()),
        ("python3 -m http.server", ()),
        ("bash <<< 'ls'", ()),
    ],
)
def test_what_reads_its_program_from_stdin(command: str, readers: tuple[str, ...]) -> None:
    """A shell or interpreter with no script operand reads the supplied stdin as its program, whatever options
    (with their values) come first; a here-string replaces that stdin."""
    assert parse_command(command).stdin_readers == readers


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("bash <<< 'rm -rf /'", ("rm", "-rf", "/")),
        ("<<< 'curl x' sh", ("curl", "x")),
        ('cat < "$(rm -rf ~)"', ("rm", "-rf", "~")),
        ("echo x > `id`", ("id",)),
    ],
)
def test_here_strings_fed_to_a_shell_and_redirection_substitutions_are_read(
    command: str, expected: tuple[str, ...]
) -> None:
    assert expected in parse_command(command).segments


def test_a_here_string_fed_to_a_tool_is_not_read_as_a_command() -> None:
    assert parse_command("grep -c x <<< 'rm -rf /'").segments == (("grep", "-c", "x"),)


@pytest.mark.parametrize(
    ("command", "candidate"),
    [
        ("rm -rf {/*,x}", ("rm", "-rf", "/*", "x")),
        ("rm -rf /{etc,usr}/x", ("rm", "-rf", "/etc/x", "/usr/x")),
        ("rm -rf /{a..c}", ("rm", "-rf", "/a", "/b", "/c")),
        ("sudo rm -rf {~,x}", ("rm", "-rf", "~", "x")),
    ],
)
def test_brace_expansions_are_candidates(command: str, candidate: tuple[str, ...]) -> None:
    assert candidate in parse_command(command).candidates


@pytest.mark.parametrize(
    ("command", "targets"),
    [
        ("uniq in .git/hooks/pre-commit", [".git/hooks/pre-commit"]),
        ("uniq -f 1 in out", ["out"]),
        ("uniq in", []),
        ("sort -uo out in", ["out"]),
        ("xz -d a/pre-commit.xz", ["a/pre-commit.xz", "a/pre-commit"]),
        ("gzip -c big > big.gz", ["big.gz"]),
    ],
)
def test_more_writing_tools_are_read(command: str, targets: list[str]) -> None:
    assert [target.word for target in parse_command(command).write_targets] == targets
