"""Hostile uploads through the real service (real engine): archives built so that the names a gate lists look
harmless while a tar would write a repository's .git/config or a git hook. Each is refused, denied or held for an
approval, and the repository's git files are unchanged; a compression bomb is refused quickly naming its bound."""

from __future__ import annotations

import bz2
import gzip
import io
import subprocess
import tarfile
import time
from collections.abc import Callable
from typing import Any

import httpx2
import pytest

from tests.service.conftest import ServiceProcess

_HOOKS_AND_CONFIG = "sha256sum r/.git/config; ls -la --time-style=full-iso r/.git r/.git/hooks"


def _member(name: str, data: bytes = b"[core]\n\thooksPath = /tmp/evil\n") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o755
    return info, data


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, b""


def _folder(name: str) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    return info, b""


def hostile_archives() -> dict[str, bytes]:
    """Each way in, as a tar a client could send."""
    cases: dict[str, tuple[int, list[tuple[tarfile.TarInfo, bytes]]]] = {
        "dot-slash": (tarfile.PAX_FORMAT, [_member("./.git/config")]),
        "double-slash-dotdot": (tarfile.PAX_FORMAT, [_member("a//../.git/hooks/pre-commit")]),
        "dotdot-back-inside": (tarfile.PAX_FORMAT, [_member("x/../.git/config")]),
        "trailing-slash": (tarfile.USTAR_FORMAT, [_folder(".git/hooks/"), _member(".git/hooks/pre-commit")]),
        "gnu-long-name": (tarfile.GNU_FORMAT, [_member("./" + "./" * 60 + ".git/hooks/pre-commit")]),
        "pax-long-name": (tarfile.PAX_FORMAT, [_member("./" * 60 + ".git/config")]),
        "symlink-then-through": (tarfile.PAX_FORMAT, [_link("l", ".git"), _member("l/config")]),
        "hardlink-to-config": (tarfile.PAX_FORMAT, [_link("h", ".git/config", tarfile.LNKTYPE)]),
        "folder-replaced-by-link": (
            tarfile.PAX_FORMAT,
            [_folder("d"), _member("d/ok", b"ok"), _link("d", ".git"), _member("d/config")],
        ),
        "existing-symlink-in-workspace": (tarfile.PAX_FORMAT, [_member("innocent.txt", b"hi"), _member("sub/config")]),
    }
    out = {}
    for name, (fmt, members) in cases.items():
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
            for info, data in members:
                tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
        out[name] = buffer.getvalue()
    return out


def refused_or_held(response: httpx2.Response) -> bool:
    """A 4xx refusal, or a result that is a denial, an approval that nobody gave, or the agent's refusal."""
    if 400 <= response.status_code < 500:
        return True
    result = response.json()
    return response.status_code == 200 and result["outcome"] in ("denied", "blocked", "failed")


@pytest.mark.docker
@pytest.mark.timeout(400)
def test_hostile_uploads_never_write_git_files(shared_service: ServiceProcess) -> None:
    """Every archive that would write .git/config or a git hook (normalised names, long names, links, a link that
    replaces a folder, a workspace symlink to .git) is refused, denied or held, and the git files are unchanged."""
    with shared_service.client() as client:
        session = client.create_session().id
        made = client.exec(session, "git init -q r && pwd && id -u")
        assert made.exit_code == 0, made.stderr
        workspace, uid = made.stdout.decode().split()
        # The gate denies the agent a link to .git; one made from outside stands for a workspace that holds one.
        linked = subprocess.run(
            ["docker", "exec", "-u", uid, f"executor-{session}", "ln", "-s", ".git", f"{workspace}/r/sub"],
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert linked.returncode == 0, linked.stderr
        before = client.exec(session, _HOOKS_AND_CONFIG).stdout
        with httpx2.Client(transport=httpx2.HTTPTransport(uds=str(shared_service.socket)), timeout=120) as raw:
            for name, body in hostile_archives().items():
                response = raw.put(
                    f"http://x/v1/sessions/{session}/files", params={"path": "r", "approvals": "none"}, content=body
                )
                assert refused_or_held(response), (name, response.status_code, response.text)
                after = client.exec(session, _HOOKS_AND_CONFIG).stdout
                assert after == before, (name, response.text, after)
            seen = client.exec(session, "test -e r/innocent.txt")
            assert seen.exit_code == 1  # the upload with a write through r/sub wrote nothing at all
            plain = io.BytesIO()
            with tarfile.open(fileobj=plain, mode="w") as tar:
                info, data = _member("src/a.txt", b"fine\n")
                tar.addfile(info, io.BytesIO(data))
            ok = raw.put(f"http://x/v1/sessions/{session}/files", params={"path": "r"}, content=plain.getvalue())
            assert ok.status_code == 200 and ok.json()["outcome"] == "completed", ok.text
            assert client.exec(session, "cat r/src/a.txt").stdout == b"fine\n"


@pytest.mark.docker
@pytest.mark.timeout(300)
@pytest.mark.parametrize("squeeze", [bz2.compress, gzip.compress], ids=["bzip2", "gzip"])
def test_a_compression_bomb_upload_is_refused_quickly_naming_its_bound(
    service_factory: Any, squeeze: Callable[[bytes], bytes]
) -> None:
    """A small compressed archive of many zero bytes is refused with a 4xx naming archive.max_expanded_bytes, after
    bounded work on the host, and nothing is written in the session."""
    zeros = tarfile.TarInfo("zeros")
    zeros.size = 512 * 1024 * 1024
    plain = io.BytesIO()
    with tarfile.open(fileobj=plain, mode="w") as tar:
        tar.addfile(zeros, io.BytesIO(bytes(zeros.size)))
    body = squeeze(plain.getvalue())
    assert len(body) < 2 * 1024 * 1024
    service: ServiceProcess = service_factory(archive__max_expanded_bytes="16MiB")
    service.start()
    with service.client() as client:
        session = client.create_session().id
        with httpx2.Client(transport=httpx2.HTTPTransport(uds=str(service.socket)), timeout=120) as raw:
            started = time.monotonic()
            response = raw.put(f"http://x/v1/sessions/{session}/files", params={"path": "bomb"}, content=body)
            elapsed = time.monotonic() - started
        assert 400 <= response.status_code < 500, response.text
        assert "archive.max_expanded_bytes" in response.text
        assert elapsed < 10, elapsed
        assert client.exec(session, "test -e bomb/zeros").exit_code == 1
