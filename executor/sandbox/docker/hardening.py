"""The hardened container a session runs in, derived from a Profile (research/security.md section 0).

Pure: builds docker-py ``containers.create`` keyword arguments and nothing else, so the defaults can be read in
one place and checked against ``docker inspect`` by the tests.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Final, Literal

from docker.types import LogConfig, Mount, Ulimit

from executor.config import AgentSettings, Profile

__all__ = [
    "AGENT_CAPS",
    "AGENT_PATH",
    "AGENT_SOCKET",
    "LABEL_CREATED",
    "LABEL_HOLDER",
    "LABEL_HOME",
    "LABEL_IDLE",
    "LABEL_NAME",
    "LABEL_OWNER",
    "LABEL_POOL",
    "LABEL_PROFILE",
    "LABEL_SESSION",
    "LABEL_TRANSPORT",
    "RUNSC_ARGS",
    "RUN_DIR",
    "RUN_TMPFS_BYTES",
    "STATE_DIR",
    "STATX_SHIM_PATH",
    "Transport",
    "agent_command",
    "container_kwargs",
    "container_name",
    "pinned_seccomp",
    "runtime_problem",
    "volume_name",
]

Transport = Literal["socket", "exec"]

AGENT_CAPS: Final[tuple[str, ...]] = ("KILL", "SETUID", "SETGID", "CHOWN", "DAC_OVERRIDE")
"""The only capabilities a session keeps (everything else is dropped). The agent (PID 1, root without other caps)
needs KILL to signal the session user's processes, SETUID/SETGID to drop to that user, CHOWN and DAC_OVERRIDE to
stage writes as that user and to reach its socket folder. Commands themselves run with none (their uid is not 0)."""

AGENT_PATH: Final = "/.executor/agent"
"""Where the agent binary sits in every session container."""
RUN_DIR: Final = "/.executor/run"
"""The agent's socket folder: a host folder (socket transport) or a small tmpfs (exec transport)."""
AGENT_SOCKET: Final = RUN_DIR + "/agent.sock"
"""The agent's listening socket inside the container."""
STATX_SHIM_PATH: Final = "/.executor/shim-statx.so"
"""Under runsc, the preload library (``LD_PRELOAD`` of every process) that lets coreutils' statx work on this
runsc, which refuses ``AT_NO_AUTOMOUNT`` (``executor/sandbox/agent/shim_statx.c``)."""
STATE_DIR: Final = "/.executor/state"
"""The agent's private tmpfs (root only, mode 0700)."""
RUN_TMPFS_BYTES: Final = 1024 * 1024
"""Size of the run-folder tmpfs under the exec transport (it holds one socket)."""

LABEL_OWNER: Final = "executor.owner"
LABEL_SESSION: Final = "executor.session"
LABEL_CREATED: Final = "executor.created"
LABEL_PROFILE: Final = "executor.profile"
LABEL_NAME: Final = "executor.name"
LABEL_TRANSPORT: Final = "executor.transport"
LABEL_HOME: Final = "executor.home"
"""The identity of the executor home that owns a session (a hash of its resolved path): listing, attaching,
stopping and clean-up act on their own home's sessions unless told otherwise (``--all``)."""
LABEL_POOL: Final = "executor.pool"
"""On a warm pool's session: the token of the process's lease (``<home>/pools/<token>.lock``, held locked)."""
LABEL_HOLDER: Final = "executor.holder"
"""On an unnamed session its process removes when done with it: the token of that process's lease (as on a pooled
session), so that gc in any process reaps it once the process is gone (killed before it could remove it)."""
LABEL_IDLE: Final = "executor.idle_limit_s"
"""A named session's idle limit: seconds (``"3600"``) or ``"none"``; absent on unnamed sessions and on sessions
made before idle limits existed (no limit)."""


REGISTER_RUNSC: Final = "images/register-runsc.sh"
"""The repository's script that registers gVisor's runsc with a local engine (idempotent; reloads dockerd)."""
RUNSC_ARGS: Final[tuple[str, ...]] = ("--network=none", "--oci-seccomp")
"""Runtime arguments runsc must be registered with: this runsc (2022) cannot start a container without a network
unless told so, and applies the container's seccomp profile inside the sandbox only with ``--oci-seccomp``."""


def runtime_problem(
    runtime: str, profile_name: str, base_url: str, registered: Mapping[str, Mapping[str, Any]]
) -> str | None:
    """Why the engine cannot run ``profile_name``'s runtime as the executor needs it, or None when it can.

    Args:
        runtime: the profile's runtime.
        profile_name: for the message.
        base_url: the engine address, for the message.
        registered: ``docker info``'s Runtimes (name -> {path, runtimeArgs}).
    """
    how = (
        f"install gVisor (Debian: apt-get install runsc) and register it with {REGISTER_RUNSC}, which adds "
        f'"runsc" with the runtime arguments {" ".join(RUNSC_ARGS)} to the runtimes of /etc/docker/daemon.json '
        "and reloads dockerd (SIGHUP)"
        if runtime == "runsc"
        else "register it under the runtimes key of the engine's daemon.json and reload dockerd (SIGHUP)"
    )
    entry = registered.get(runtime)
    if entry is None:
        listed = ", ".join(sorted(registered)) or "none"
        return (
            f"profile {profile_name!r} asks for runtime {runtime!r}, which the Docker engine at {base_url} does not "
            f"have (its runtimes: {listed}); {how}, or pick a profile with runtime 'runc'"
        )
    if runtime == "runsc":
        missing = [arg for arg in RUNSC_ARGS if arg not in (entry.get("runtimeArgs") or [])]
        if missing:
            return (
                f"profile {profile_name!r} asks for runtime 'runsc', which the Docker engine at {base_url} has "
                f"without {' '.join(missing)} (without them sessions would not start, or would run without their "
                f"seccomp profile); {how}"
            )
    return None


def container_name(session_id: str) -> str:
    """The container of a session (the id is validated by the caller)."""
    return f"executor-{session_id}"


def volume_name(session_id: str) -> str:
    """The workspace volume of a session."""
    return f"executor-{session_id}-workspace"


@cache
def pinned_seccomp(runtime: str = "runc") -> str:
    """The shipped seccomp profile as compact JSON, ready for ``seccomp=<json>``.

    Passed inline: a path given through the SDK fails only at start and leaves a Created container behind.
    Under ``runsc`` (which applies it inside the sandbox with ``--oci-seccomp``) ``clone3`` is allowed instead of
    refused with ENOSYS: this runsc ignores ``errnoRet`` and would answer EPERM, which glibc does not fall back
    from (no thread could start), while gVisor itself answers clone3 with ENOSYS.
    """
    text = resources.files("executor.sandbox.docker").joinpath("seccomp.json").read_text(encoding="utf-8")
    profile = json.loads(text)
    if runtime == "runsc":
        profile["syscalls"] = [rule for rule in profile["syscalls"] if rule["names"] != ["clone3"]]
        profile["syscalls"].append({"names": ["clone3"], "action": "SCMP_ACT_ALLOW"})
    return json.dumps(profile, separators=(",", ":"))


def agent_command(profile: Profile, agent: AgentSettings, *, ephemeral: bool = False) -> list[str]:
    """The container's entrypoint: the agent as PID 1, told where everything is.

    An ephemeral (unnamed) session also gets ``--orphan-exit-ms``: with no host connection for
    ``agent.orphan_exit_s`` it sweeps its processes and exits, so a killed executor leaves no running container.
    """
    orphan_exit_ms = round(agent.orphan_exit_s * 1000) if ephemeral else 0
    # The executor's own entries pass too: under runsc, LD_PRELOAD names the statx shim (set by container_kwargs,
    # which replaces any image ENV of that name).
    passed = sorted({*profile.env, *(["LD_PRELOAD"] if profile.runtime == "runsc" else [])})
    return [
        AGENT_PATH,
        "init",
        "--listen",
        AGENT_SOCKET,
        "--uid",
        str(profile.uid),
        "--gid",
        str(profile.gid),
        "--workspace",
        profile.workspace,
        "--home",
        profile.home,
        "--state-dir",
        STATE_DIR,
        "--detached-buffer",
        str(agent.detached_buffer_bytes),
        "--max-frame",
        str(agent.max_frame_bytes),
        "--orphan-exit-ms",
        str(orphan_exit_ms),
        # Commands get the image's environment only through the agent's allow-list (PROTOCOL.md, "Runs"); the
        # operator's own profile env is named here so it still reaches them.
        *(["--pass-env", ",".join(passed)] if passed else []),
    ]


def container_kwargs(
    *,
    profile: Profile,
    agent: AgentSettings,
    image: str,
    session_id: str,
    labels: dict[str, str],
    transport: Transport,
    agent_host_path: Path | None,
    run_host_dir: Path | None,
    ephemeral: bool = False,
) -> dict[str, Any]:
    """Keyword arguments for docker-py ``containers.create`` of one session.

    Args:
        profile: limits and hardening (already validated: no privileged mode, host namespaces, devices or sockets).
        agent: the agent section (frame and buffer sizes, private tmpfs size).
        image: the image to run (for the exec transport, the derived image that carries the agent).
        session_id: the validated session id.
        labels: ownership labels (owner, session, created, profile, name).
        transport: ``socket`` bind-mounts the agent and a host run folder; ``exec`` mounts nothing from the host.
        agent_host_path: the agent binary on the host (socket transport only).
        run_host_dir: the host folder that receives the agent's socket (socket transport only).
        ephemeral: an unnamed session, which ends itself once no host has been connected for a while.
    """
    tmpfs = {
        "/tmp": f"size={profile.tmp_size},mode=1777,nosuid,nodev",
        profile.home: f"size={profile.home_size},uid={profile.uid},gid={profile.gid},mode=0700,nosuid,nodev",
        STATE_DIR: f"size={agent.private_tmpfs_bytes},mode=0700,nosuid,nodev,noexec",
    }
    mounts = [Mount(target=profile.workspace, source=volume_name(session_id), type="volume")]
    mounts += [Mount(target=target, source=source, type="volume") for source, target in profile.volumes.items()]
    if transport == "socket":
        if agent_host_path is None or run_host_dir is None:
            raise ValueError("the socket transport needs the agent's host path and the host run folder")
        mounts.append(Mount(target=AGENT_PATH, source=str(agent_host_path), type="bind", read_only=True))
        mounts.append(Mount(target=RUN_DIR, source=str(run_host_dir), type="bind"))
    else:
        tmpfs[RUN_DIR] = f"size={RUN_TMPFS_BYTES},mode=0700,nosuid,nodev,noexec"
    security_opt = ["no-new-privileges"]
    if profile.seccomp == "pinned":
        security_opt.append("seccomp=" + pinned_seccomp(profile.runtime))
    if profile.log_driver == "none":
        log_config = LogConfig(type="none")
    else:
        log_config = LogConfig(type="json-file", config={"max-size": "1m", "max-file": "1"})
    environment = {**profile.env, "HOME": profile.home}
    if profile.runtime == "runsc":
        environment["LD_PRELOAD"] = STATX_SHIM_PATH
    return {
        "image": image,
        "name": container_name(session_id),
        "entrypoint": agent_command(profile, agent, ephemeral=ephemeral),
        "command": [],
        # The agent is PID 1 and root (it drops to the session user for every command); docker's own init
        # would sit between it and the orphans it must see.
        "user": "0:0",
        "init": False,
        "working_dir": profile.workspace,
        "hostname": session_id,
        "environment": environment,
        "labels": labels,
        "detach": True,
        "network_mode": profile.network,
        "cap_drop": ["ALL"],
        "cap_add": list(AGENT_CAPS),
        "security_opt": security_opt,
        "privileged": False,
        "read_only": profile.read_only_root,
        "tmpfs": tmpfs,
        "mounts": mounts,
        "shm_size": profile.shm_size,
        "pids_limit": profile.pids,
        "mem_limit": profile.memory,
        "memswap_limit": profile.memory,
        "nano_cpus": int(profile.cpus * 1_000_000_000),
        "ulimits": [
            Ulimit(name="fsize", soft=profile.file_size, hard=profile.file_size),
            Ulimit(name="nofile", soft=profile.nofile, hard=profile.nofile),
            Ulimit(name="core", soft=0, hard=0),
        ],
        "runtime": profile.runtime,
        "log_config": log_config,
        "restart_policy": {"Name": "no"},
        "stop_signal": "SIGTERM",
        # An image's HEALTHCHECK would run as the image's user (often root) beside the agent, outside every run's
        # supervision and pids accounting of a command; sessions never run one.
        "healthcheck": {"test": ["NONE"]},
    }
