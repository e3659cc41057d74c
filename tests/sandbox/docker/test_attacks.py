"""Attacks from research/security.md §4, run as the session user in a real hardened session, under runc and runsc."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from executor.config import load_settings
from executor.gate.approvals import ApprovalRequest
from executor.session import Session, open_executor

pytestmark = pytest.mark.docker

_SYSCALLS = r"""
import ctypes, errno, socket
libc = ctypes.CDLL(None, use_errno=True)
def probe(name, number, *args):
    rc = libc.syscall(number, *args)
    print(name, "ALLOWED" if rc >= 0 else errno.errorcode.get(ctypes.get_errno(), "E?"))
probe("io_uring_setup", 425, 8, ctypes.create_string_buffer(120))
probe("unshare_user", 272, 0x10000000)
probe("unshare_net", 272, 0x40000000)
probe("mount", 165, b"none", b"/tmp", b"tmpfs", 0, None)
probe("bpf", 321, 0, None, 0)
probe("keyctl", 250, 0, 0, 0, 0, 0)
for family, kind, proto, label in [(socket.AF_INET, socket.SOCK_RAW, 1, "raw_socket")]:
    try:
        socket.socket(family, kind, proto).close()
        print(label, "ALLOWED")
    except OSError as exc:
        print(label, errno.errorcode.get(exc.errno, "E?"))
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2).close()
    print("egress ALLOWED")
except OSError as exc:
    print("egress", errno.errorcode.get(exc.errno, type(exc).__name__))
"""


@pytest.fixture
async def session(
    runtime: str, base_image: str, home: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Session]:
    """A default (hardened) session with a small file-size limit, under each runtime."""
    build = tmp_path_factory.getbasetemp() / "agent-build-shared"
    settings = load_settings(
        overrides={
            "home": str(home),
            "agent": {"build_dir": str(build)},
            "profiles": {"default": {"file_size": "1m", "runtime": runtime}},
            "gate": {"trust": 3},
        }
    )

    async def approve_everything(request: ApprovalRequest) -> bool:
        # These tests attack the sandbox, not the gate: every attempt must reach the container.
        return True

    async with open_executor(settings, approval_handler=approve_everything) as ex, ex.open_session() as opened:
        yield opened


async def test_privileged_syscalls_and_egress_are_refused(session: Session) -> None:
    """io_uring (pinned seccomp), user/net namespaces, mount, bpf, keyctl, raw sockets and egress all fail."""
    await session.write_file("probe.py", _SYSCALLS)
    result = await session.bash("python3 probe.py")
    assert result.outcome == "completed", result.text
    lines = dict(line.split(" ", 1) for line in result.text.splitlines() if " " in line and line.split(" ", 1)[0])
    for name in ("io_uring_setup", "unshare_user", "unshare_net", "mount", "bpf", "keyctl", "raw_socket"):
        assert lines.get(name) in ("EPERM", "EACCES", "ENOSYS"), (name, result.text)
    assert lines.get("egress") in ("ENETUNREACH", "EHOSTUNREACH", "EPERM", "timeout"), result.text


async def test_setuid_binaries_grant_nothing(session: Session) -> None:
    """no-new-privileges: a setuid-root binary (su) does not raise the effective uid."""
    # PR_GET_NO_NEW_PRIVS (39) rather than /proc/self/status, whose NoNewPrivs line gVisor does not print.
    result = await session.bash(
        "su -c id root </dev/null 2>&1; grep -E '^CapEff' /proc/self/status; "
        "python3 -c 'import ctypes; print(\"nnp\", ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))'"
    )
    assert "uid=0" not in result.text
    assert "nnp 1" in result.text and "CapEff:\t0000000000000000" in result.text


async def test_a_file_past_the_size_limit_is_cut_by_sigxfsz(session: Session) -> None:
    """Writing past profiles.file_size kills the writer with SIGXFSZ and the file stops at the limit."""
    result = await session.bash("head -c 3000000 /dev/zero > big.bin; echo rc=$?; wc -c < big.bin")
    assert "rc=153" in result.text
    assert "\n1048576\n" in result.text
