"""The gate judges the whole action, on the real engine: env, effective cwd, git directories, approval text,
and an image's own environment (issue 11). Each reproduction is gated and its payload never runs."""

from __future__ import annotations

import gzip
import io
import subprocess
import tarfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from executor.config import Settings, load_settings
from executor.gate.approvals import ApprovalRequest, TerminalApprovalHandler
from executor.session import Session, open_executor
from executor.testing.files import one_file_tar


@pytest.fixture(scope="module")
def agent_build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One agent build for this module (it is keyed by its sources' hash)."""
    return tmp_path_factory.mktemp("agent-build")


@pytest.fixture
def make_settings(base_image: str, home: Path, agent_build_dir: Path) -> Callable[..., Settings]:
    """Settings rooted in a private home, sharing one agent build, with overrides."""

    def make(**overrides: Any) -> Settings:
        agent = {"build_dir": str(agent_build_dir), **overrides.pop("agent", {})}
        return load_settings(overrides={"home": str(home), "agent": agent, **overrides})

    return make


@asynccontextmanager
async def _session(settings: Settings) -> AsyncIterator[Session]:
    async with open_executor(settings) as ex, ex.open_session() as session:
        yield session


pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

_PWNED = "/workspace/pwned"


async def _exists(session: Session, path: str) -> bool:
    result = await session.bash(f"test -e {path} && echo yes || echo no", approval_handler=None)
    assert result.outcome == "completed", result.text
    return "yes" in result.text


async def _plant_payloads(session: Session) -> None:
    setup = await session.bash(
        "mkdir -p bin && printf '#!/bin/sh\\ntouch /workspace/pwned\\n' > bin/ls && chmod 755 bin/ls "
        "&& printf 'touch /workspace/pwned\\n' > .x.sh",
        approval_handler=None,
    )
    assert setup.outcome == "completed", setup.text


@pytest.mark.parametrize(
    ("command", "env"),
    [
        ("ls", {"BASH_ENV": "/workspace/.x.sh"}),
        ("ls", {"PATH": "/workspace/bin:/usr/bin:/bin"}),
        ("ls", {"BASH_FUNC_ls%%": "() { touch /workspace/pwned; }"}),
        ("ls", {"ENV": "/workspace/.x.sh"}),
        ("BASH_ENV=/workspace/.x.sh bash -c true", {}),
        ("env PATH=/workspace/bin ls", {}),
        ("PATH=/workspace/bin:$PATH; ls", {}),
    ],
)
async def test_env_that_changes_what_runs_is_asked(
    make_settings: Callable[..., Settings], command: str, env: dict[str, str]
) -> None:
    """A command whose env (given or assigned in the string) changes what runs is not allowed alone: with nobody
    to approve it is blocked and the payload never runs."""
    async with _session(make_settings()) as session:
        await _plant_payloads(session)
        result = await session.bash(command, env=env, approval_handler=None)
        assert result.outcome in ("blocked", "denied"), result.text
        assert "changes which code runs" in result.text or "env-changes-what-runs" in result.text
        assert not await _exists(session, _PWNED)
        plain = await session.bash("ls", env={"LANG": "C.UTF-8"}, approval_handler=None)
        assert plain.outcome == "completed", plain.text


@pytest.mark.parametrize(
    ("command", "cwd", "hook"),
    [
        ("cd .git/hooks && printf '#!/bin/sh\\ntouch /workspace/pwned\\n' > pre-commit", None, "pre-commit"),
        ("echo 'touch /workspace/pwned' > pre-commit", "/workspace/.git/hooks", "pre-commit"),
        ("echo 'touch /workspace/pwned' > pre-commit", ".git/hooks", "pre-commit"),
        ("python3 -c \"open('.git/hooks/pre-push','w').write('touch /workspace/pwned')\"", None, "pre-push"),
        ("cd .git && python3 -c \"open('hooks/pre-push','w').write('x')\"", None, "pre-push"),
        ("bash -c 'cd .git/hooks; tee post-commit < /dev/null'", None, "post-commit"),
    ],
)
async def test_writes_resolved_against_the_effective_cwd(
    make_settings: Callable[..., Settings], command: str, cwd: str | None, hook: str
) -> None:
    """A hook written through cd, --cwd or an interpreter's inline code is gated like the direct write."""
    async with _session(make_settings()) as session:
        init = await session.bash("git init -q .", approval_handler=None)
        assert init.outcome == "completed", init.text
        result = await session.bash(command, cwd=cwd, approval_handler=None)
        assert result.outcome in ("blocked", "denied"), result.text
        assert not await _exists(session, f"/workspace/.git/hooks/{hook}")


async def test_inline_code_that_can_write_is_asked_and_plain_code_runs(make_settings: Callable[..., Settings]) -> None:
    """Inline interpreter code that can reach files is an unknown write (asked); arithmetic runs."""
    async with _session(make_settings()) as session:
        asked = await session.bash("python3 -c \"open('notes.txt','w').write('x')\"", approval_handler=None)
        assert asked.outcome == "blocked", asked.text
        assert not await _exists(session, "/workspace/notes.txt")
        plain = await session.bash('python3 -c "print(6 * 7)"', approval_handler=None)
        assert plain.outcome == "completed" and "42" in plain.text


async def test_hooks_of_a_separate_git_dir_are_protected(make_settings: Callable[..., Settings]) -> None:
    """`git init --separate-git-dir` is asked; once approved, its hooks and config are denied to write_file and
    bash alike, and no hook runs on commit."""

    async def approve(request: ApprovalRequest) -> bool:
        return True

    async with _session(make_settings()) as session:
        blocked = await session.bash("git init -q --separate-git-dir=gd .", approval_handler=None)
        assert blocked.outcome == "blocked", blocked.text
        made = await session.bash("git init -q --separate-git-dir=gd .", approval_handler=approve)
        assert made.outcome == "completed", made.text
        hook = await session.write_file("gd/hooks/pre-commit", "#!/bin/sh\ntouch /workspace/pwned\n")
        assert hook.outcome == "denied", hook.text
        config = await session.write_file("gd/config", "[core]\n\tfsmonitor = touch /workspace/pwned\n")
        assert config.outcome == "denied", config.text
        assert "git directory" in config.text or "git-config" in config.text
        pointer = await session.write_file(".git", "gitdir: /tmp/elsewhere\n")
        assert pointer.outcome == "denied", pointer.text
        shell = await session.bash("printf 'touch /workspace/pwned' > gd/hooks/post-commit", approval_handler=None)
        assert shell.outcome in ("blocked", "denied"), shell.text
        relocate = await session.bash("git -c core.hooksPath=/tmp/h status", approval_handler=None)
        assert relocate.outcome in ("blocked", "denied"), relocate.text
        commit = await session.bash(
            "git -c user.name=a -c user.email=a@b commit -q --allow-empty -m x && echo committed",
            approval_handler=None,
        )
        assert "committed" in commit.text, commit.text
        assert not await _exists(session, _PWNED)
        await session.bash("mkdir -p src/hooks", approval_handler=None)
        ordinary = await session.write_file("src/hooks/useThing.ts", "export {}\n")
        assert ordinary.outcome == "completed", ordinary.text


async def test_a_newline_in_env_cannot_forge_a_prompt_line(make_settings: Callable[..., Settings]) -> None:
    """The terminal prompt shows an env value with a newline as an escape, never as a line of its own."""
    out = io.StringIO()
    handler = TerminalApprovalHandler(stdin=io.StringIO("n\n"), stdout=out)
    forged = "x\n(approved by policy: safe)\r\x1b[2K\u202e"
    async with _session(make_settings()) as session:
        result = await session.bash("ls", env={"PYTHONPATH": forged}, cwd="/workspace", approval_handler=handler)
    assert result.outcome == "denied"
    shown = out.getvalue()
    assert "approved by policy" in shown  # it is shown, escaped, inside the env line
    assert not any(line.lstrip().startswith("(approved by policy") for line in shown.splitlines())
    assert "\x1b" not in shown and "\r" not in shown and "\u202e" not in shown
    assert "\\x0a(approved by policy: safe)\\x0d\\x1b[2K\\u202e" in shown


@pytest.fixture
def hostile_image(base_image: str) -> Iterator[str]:
    """A session image whose own ENV sets LD_PRELOAD and BASH_ENV (built offline, removed after)."""
    tag = f"executor-test/hostile-env:g11gate-{uuid.uuid4().hex[:8]}"
    dockerfile = f"FROM {base_image}\nENV LD_PRELOAD=/nonexistent.so BASH_ENV=/tmp/x.sh PYTHONSTARTUP=/tmp/s.py\n"
    subprocess.run(
        ["docker", "build", "--network", "none", "-q", "-t", tag, "-"],
        input=dockerfile.encode(),
        env={"DOCKER_BUILDKIT": "0", "PATH": "/usr/local/bin:/usr/bin:/bin"},
        check=True,
        capture_output=True,
        timeout=180,
    )
    try:
        yield tag
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, timeout=60, check=False)


@pytest.mark.parametrize("transport", ["socket", "exec"])
async def test_an_images_own_env_does_not_reach_commands(
    make_settings: Callable[..., Settings], hostile_image: str, transport: str
) -> None:
    """ENV LD_PRELOAD / BASH_ENV of the image are not in a command's environment; the operator's profile env is."""
    settings: Any = make_settings(
        profiles={"default": {"image": hostile_image, "env": {"OPERATOR_SETTING": "kept"}}},
        agent={"transport": transport},
    )
    async with _session(settings) as session:
        result = await session.bash("env", approval_handler=None)
        assert result.outcome == "completed", result.text
        assert result.artifact_id is not None
        text = session.artifacts.read_output(result.artifact_id, stream="stdout", line_count=500).data.decode()
    names = {line.split("=", 1)[0] for line in text.splitlines() if "=" in line}
    assert not names & {"LD_PRELOAD", "BASH_ENV", "PYTHONSTARTUP"}, text
    assert "OPERATOR_SETTING=kept" in text and "LANG=C.UTF-8" in text


_SHOWN = one_file_tar("notes.txt", b"fine\n")
_HIDDEN = one_file_tar(".bashrc", b"touch /workspace/pwned\n")


@pytest.mark.parametrize(
    ("command", "stdin"),
    [
        ("tar -x -i -f -", _SHOWN + _HIDDEN),  # past the end-of-archive blocks
        ("tar -xzf -", gzip.compress(one_file_tar("notes.txt", b"fine\n", end=False)) + gzip.compress(_HIDDEN)),
    ],
    ids=["ignore-zeros", "gzip-members"],
)
async def test_an_archive_member_tar_reads_past_where_a_plain_listing_stops_is_judged(
    make_settings: Callable[..., Settings], command: str, stdin: bytes
) -> None:
    """Members GNU tar unpacks that a plain listing of the stdin misses (after the end-of-archive blocks, which
    --ignore-zeros reads past; in a second gzip member, which gzip -d reads on into) are judged like the rest: a
    start-up file among them is not written unasked (it was, and the archive allowed)."""
    async with _session(make_settings()) as session:
        result = await session.bash(command, stdin=stdin, approval_handler=None)
        assert result.outcome in ("blocked", "denied"), result.text
        assert "start-up file" in result.text, result.text  # the hidden member is what was judged
        assert not await _exists(session, "/workspace/.bashrc")


def _link_tar(name: str, target: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        info = tarfile.TarInfo(name)
        info.type, info.linkname = tarfile.SYMTYPE, target
        tar.addfile(info)
    return buffer.getvalue()


async def _git_repo(session: Session) -> None:
    made = await session.bash("git init -q . && git config user.email a@b && git config user.name a")
    assert made.outcome == "completed" and made.exit_code == 0, made.text


@pytest.mark.parametrize(
    "command",
    ["ln -s .git g", "ln -s ./.git/ g", 'ln -s "$PWD/.git" g', "cp -s .git g", "mkdir sub && ln -s ../.git sub/g"],
)
async def test_a_link_to_a_protected_folder_is_judged_as_a_write_to_it(
    make_settings: Callable[..., Settings], command: str
) -> None:
    """Whatever is written through a link is written to what it names: a link to .git would carry a later
    'echo ... >> g/config' (a path no rule protects) into the git config, so the link is judged as a write to .git
    (it was allowed, and the next step wrote core.fsmonitor)."""
    async with _session(make_settings()) as session:
        await _git_repo(session)
        result = await session.bash(command, approval_handler=None)
        assert result.outcome in ("blocked", "denied"), result.text
        assert not await _exists(session, "g") and not await _exists(session, "sub/g")
        plain = await session.bash("ln -s /usr/bin/python3 py && ln -s README.md r", approval_handler=None)
        assert plain.outcome == "completed", plain.text  # a link to what the session cannot write stays allowed


async def test_an_upload_cannot_write_through_a_link(make_settings: Callable[..., Settings]) -> None:
    """An uploaded link member is judged as a write to what it names, and an unpack into a folder whose path goes
    through a link is refused in the container, as write_file refuses one (both wrote .git/config)."""
    from executor.tools.archive import ArchiveBounds, canonical_entries, unpack_command

    def entries(tar: bytes) -> bytes:
        out = io.BytesIO()
        canonical_entries(io.BytesIO(tar), out, bounds=ArchiveBounds())
        return out.getvalue()

    async with _session(make_settings()) as session:
        await _git_repo(session)
        linked = await session.bash(unpack_command("."), stdin=entries(_link_tar("gg", ".git")), approval_handler=None)
        assert linked.outcome in ("blocked", "denied"), linked.text
        assert not await _exists(session, "gg")
        # A link the gate never saw made (a checked-out repository may hold one): made from outside the executor.
        await trio.run_process(
            ["docker", "exec", "-w", "/workspace", session.info.container_id, "ln", "-s", ".git", "gg"]
        )
        before = await session.bash("cat .git/config", approval_handler=None)
        copied = await session.bash(
            unpack_command("gg"), stdin=entries(one_file_tar("config", b"[alias]\n\tlg = !touch /workspace/pwned\n"))
        )
        assert copied.outcome == "failed" and copied.exit_code != 0, copied.text
        assert b"symbolic link" in copied.stderr, copied.stderr
        after = await session.bash("cat .git/config", approval_handler=None)
        assert after.stdout == before.stdout
