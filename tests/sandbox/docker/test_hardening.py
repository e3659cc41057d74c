"""A session container carries every hardened default, a profile's explicit override shows up, and settings that
would weaken the sandbox are refused at load."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import trio

from executor.config import Profile, load_settings
from executor.errors import ConfigError
from executor.ids import new_session_id
from executor.sandbox.agent.client import open_agent_client
from executor.sandbox.base import Backend
from executor.sandbox.docker import AGENT_CAPS, DockerBackend
from executor.sandbox.docker.hardening import AGENT_PATH, RUN_DIR, STATE_DIR, agent_command

MIB = 1024 * 1024


async def _inspect(backend: Backend, container_id: str) -> dict[str, Any]:
    assert isinstance(backend, DockerBackend)
    data: dict[str, Any] = await trio.to_thread.run_sync(backend.engine.client.api.inspect_container, container_id)
    return data


async def _exec(backend: Backend, container_id: str, script: str, user: str) -> str:
    assert isinstance(backend, DockerBackend)
    client = backend.engine.client

    def run() -> str:
        result = client.containers.get(container_id).exec_run(["bash", "-c", script], user=user)
        assert isinstance(result.output, bytes)
        return result.output.decode()

    return await trio.to_thread.run_sync(run)


@pytest.mark.docker
async def test_session_container_has_every_hardened_default(backend_factory: Any) -> None:
    """docker inspect of a default session shows caps, nnp, pinned seccomp, read-only root, sized tmpfs, limits,
    no log, no restart, no network, labels and the agent as PID 1; inside, the session user is confined."""
    with trio.fail_after(60):
        async with backend_factory() as backend:
            info = await backend.open_session(profile=load_settings().profile(), profile_name="default", owner="t-h")
            try:
                data = await _inspect(backend, info.container_id)
                probe = await _exec(
                    backend,
                    info.container_id,
                    "grep -E '^(NoNewPrivs|Seccomp|CapEff):' /proc/self/status; id -u; "
                    "touch /x 2>&1 | grep -o 'Read-only file system'; touch /tmp/ok && echo tmp-ok; "
                    "touch /workspace/ok && echo ws-ok; ulimit -c; ulimit -n",
                    user="1000:1000",
                )
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(30):
                    await backend.stop_session(info.id)
    host, config = data["HostConfig"], data["Config"]
    assert host["CapDrop"] == ["ALL"]
    assert sorted(host["CapAdd"]) == sorted(AGENT_CAPS)
    assert host["Privileged"] is False
    assert "no-new-privileges" in host["SecurityOpt"]
    seccomp = [opt for opt in host["SecurityOpt"] if opt.startswith("seccomp=")]
    assert len(seccomp) == 1
    profile = json.loads(seccomp[0].removeprefix("seccomp="))
    allowed = {name for rule in profile["syscalls"] for name in rule["names"] if rule["action"] == "SCMP_ACT_ALLOW"}
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"
    assert not {"io_uring_setup", "io_uring_enter", "io_uring_register"} & allowed
    assert host["ReadonlyRootfs"] is True
    assert host["Tmpfs"]["/tmp"] == f"size={256 * MIB},mode=1777,nosuid,nodev"
    assert host["Tmpfs"]["/home/agent"] == f"size={64 * MIB},uid=1000,gid=1000,mode=0700,nosuid,nodev"
    assert host["Tmpfs"][STATE_DIR].startswith(f"size={64 * MIB},mode=0700")
    assert host["ShmSize"] == 64 * MIB
    assert host["PidsLimit"] == 512
    assert host["Memory"] == host["MemorySwap"] == 1024 * MIB
    assert host["NanoCpus"] == 1_000_000_000
    ulimits = {u["Name"]: (u["Soft"], u["Hard"]) for u in host["Ulimits"]}
    assert ulimits == {"fsize": (1024 * MIB, 1024 * MIB), "nofile": (4096, 4096), "core": (0, 0)}
    assert host["LogConfig"]["Type"] == "none"
    assert host["RestartPolicy"]["Name"] in ("", "no")
    assert host["NetworkMode"] == "none"
    assert host["PidMode"] == "" and host["IpcMode"] in ("private", "")
    assert not host.get("Devices")
    assert host.get("Init") in (None, False)
    assert config["User"] == "0:0"
    assert config["Entrypoint"] == agent_command(
        load_settings().profile(), load_settings().agent, ephemeral=info.name is None
    )
    assert "HOME=/home/agent" in config["Env"]
    labels = config["Labels"]
    assert labels["executor.session"] == info.id and labels["executor.owner"] == "t-h"
    assert labels["executor.profile"] == "default" and labels["executor.created"] and "executor.name" in labels
    mounts = {m["Destination"]: m for m in data["Mounts"]}
    assert mounts["/workspace"]["Type"] == "volume" and mounts["/workspace"]["Name"] == f"executor-{info.id}-workspace"
    assert mounts[AGENT_PATH]["Type"] == "bind" and mounts[AGENT_PATH]["RW"] is False
    assert mounts[RUN_DIR]["Type"] == "bind"
    assert not any("docker.sock" in (m.get("Source") or "") for m in data["Mounts"])
    lines = probe.split()
    assert lines[lines.index("NoNewPrivs:") + 1] == "1"
    assert lines[lines.index("Seccomp:") + 1] == "2"
    assert lines[lines.index("CapEff:") + 1] == "0000000000000000"
    assert lines[6:] == ["1000", "Read-only", "file", "system", "tmp-ok", "ws-ok", "0", "4096"]


@pytest.mark.docker
async def test_profile_override_shows_up_and_exec_transport_mounts_nothing(backend_factory: Any) -> None:
    """An explicit loosening in a profile reaches the container; the exec transport uses no host mount and the
    agent answers through its bridge."""
    settings = load_settings(
        overrides={
            "profiles": {
                "loose": {
                    "memory": "256m",
                    "cpus": 0.5,
                    "pids": 64,
                    "tmp_size": "16m",
                    "network": "bridge",
                    "log_driver": "capped",
                    "read_only_root": False,
                    "seccomp": "engine-default",
                    "env": {"LANG": "C.UTF-8"},
                }
            }
        }
    )
    with trio.fail_after(60):
        async with backend_factory(agent={"transport": "exec"}) as backend:
            info = await backend.open_session(profile=settings.profile("loose"), profile_name="loose", owner="t-h")
            try:
                data = await _inspect(backend, info.container_id)
                async with open_agent_client(await backend.connect(info.id)) as client:
                    echoed = await client.ping(b"ping\x00\xff")
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(30):
                    await backend.stop_session(info.id)
    host = data["HostConfig"]
    assert info.transport == "exec" and info.profile == "loose"
    assert host["Memory"] == host["MemorySwap"] == 256 * MIB
    assert host["NanoCpus"] == 500_000_000 and host["PidsLimit"] == 64
    assert host["Tmpfs"]["/tmp"].startswith(f"size={16 * MIB},")
    assert host["NetworkMode"] == "bridge"
    assert host["LogConfig"] == {"Type": "json-file", "Config": {"max-file": "1", "max-size": "1m"}}
    assert host["ReadonlyRootfs"] is False
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["CapDrop"] == ["ALL"]
    assert "LANG=C.UTF-8" in data["Config"]["Env"]
    assert all(m["Type"] != "bind" for m in data["Mounts"])
    assert RUN_DIR in host["Tmpfs"]
    assert echoed == b"ping\x00\xff"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"profiles": {"default": {"pids": 0}}}, "profiles.default.pids"),
        ({"profiles": {"default": {"pids": -1}}}, "profiles.default.pids"),
        ({"profiles": {"default": {"memory": "3m"}}}, "profiles.default.memory"),
        ({"profiles": {"default": {"network": "host"}}}, "profiles.default.network"),
        ({"profiles": {"default": {"privileged": True}}}, "profiles.default.privileged"),
        ({"profiles": {"x": {"volumes": {"/var/run/docker.sock": "/var/run/docker.sock"}}}}, "profiles.x.volumes"),
        ({"profiles": {"default": {"bogus": 1}}}, "profiles.default.bogus"),
        ({"docker": {"gc_min_age_s": -1}}, "docker.gc_min_age_s"),
        ({"images": {"pull_timeout_s": 0}}, "images.pull_timeout_s"),
    ],
)
def test_weakening_settings_are_refused_at_load(overrides: dict[str, Any], field: str) -> None:
    """Each bad setting fails at load with the field named."""
    with pytest.raises(ConfigError, match=r"(?m)^  " + re.escape(field) + ": "):
        load_settings(overrides=overrides)


def test_new_tunables_have_their_documented_defaults() -> None:
    """gc spares Created leftovers younger than 5 minutes; a pull is bounded by 30 s."""
    settings = load_settings()
    assert settings.docker.gc_min_age_s == 300.0
    assert settings.images.pull_timeout_s == 30.0


@pytest.mark.docker
async def test_an_unnamed_session_without_a_host_ends_itself(backend_factory: Any) -> None:
    """With no host connection for agent.orphan_exit_s an unnamed session exits; a named one keeps running."""
    assert load_settings().agent.orphan_exit_s == 600.0
    with pytest.raises(ConfigError, match=r"agent\.orphan_exit_s"):
        load_settings(overrides={"agent": {"orphan_exit_s": -1}})
    async with backend_factory(agent={"orphan_exit_s": 1.0}) as backend:
        ephemeral = await backend.open_session(profile=Profile(), profile_name="default", owner="t-h")
        named = await backend.open_session(profile=Profile(), profile_name="default", name="t-h-kept", owner="t-h")
        try:
            with trio.fail_after(30):
                while True:
                    if await backend.status(ephemeral.id) != "running":
                        break
                    await trio.sleep(0.25)
            assert await backend.status(named.id) == "running"
            assert (
                ephemeral.id in " ".join((await backend.gc()).removed)
                or await backend.status(ephemeral.id) == "missing"
            )
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(30):
                await backend.stop_session(ephemeral.id)
                await backend.stop_session(named.id)


@pytest.mark.docker
async def test_an_images_healthcheck_never_runs_in_a_session(backend_factory: Any, base_image: str) -> None:
    """An image that declares a HEALTHCHECK (run as root by the engine) gets none in a session container."""
    import io
    import tarfile

    tag = "executor-test/healthcheck:" + new_session_id()
    dockerfile = f"FROM {base_image}\nHEALTHCHECK --interval=1s CMD touch /tmp/hc-ran\n".encode()
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        member = tarfile.TarInfo("Dockerfile")
        member.size = len(dockerfile)
        tar.addfile(member, io.BytesIO(dockerfile))
    context.seek(0)
    with trio.fail_after(120):
        async with backend_factory() as backend:
            assert isinstance(backend, DockerBackend)
            api = backend.engine.client.api

            def build() -> None:
                for _ in api.build(fileobj=context, custom_context=True, tag=tag, network_mode="none", rm=True):
                    pass

            await trio.to_thread.run_sync(build)
            try:
                declared = await trio.to_thread.run_sync(api.inspect_image, tag)
                assert declared["Config"]["Healthcheck"]["Test"][0] == "CMD-SHELL"
                profile = load_settings().profile().model_copy(update={"image": tag})
                info = await backend.open_session(profile=profile, profile_name="default", owner="t-hc")
                try:
                    data = await _inspect(backend, info.container_id)
                finally:
                    with trio.CancelScope(shield=True), trio.move_on_after(30):
                        await backend.stop_session(info.id)
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(30):
                    await trio.to_thread.run_sync(lambda: api.remove_image(tag, force=True))
    assert data["Config"]["Healthcheck"]["Test"] == ["NONE"]
    assert "Health" not in data["State"]


def _mount_roots(mountinfo: str) -> dict[str, str]:
    """Mount point -> the path inside its filesystem that the mount shows (mountinfo's 5th and 4th fields)."""
    roots: dict[str, str] = {}
    for line in mountinfo.splitlines():
        fields = line.split()
        roots[fields[4]] = fields[3]
    return roots


@pytest.mark.docker
@pytest.mark.parametrize("transport", ["socket", "exec"])
async def test_what_mountinfo_shows_a_session_of_the_host(backend_factory: Any, home: Path, transport: str) -> None:
    """/proc/self/mountinfo shows the session user exactly the host paths the README lists: under the socket transport
    the agent binary's and the session's run folder (so the executor home's path), the workspace volume's folder and
    the engine's per-container files; under the exec transport no path of the home at all."""
    with trio.fail_after(90):
        async with backend_factory(agent={"transport": transport}) as backend:
            info = await backend.open_session(profile=load_settings().profile(), profile_name="default", owner="t-m")
            try:
                data = await _inspect(backend, info.container_id)
                mountinfo = await _exec(backend, info.container_id, "cat /proc/self/mountinfo", user="1000:1000")
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(30):
                    await backend.stop_session(info.id)
    roots = _mount_roots(mountinfo)
    # mountinfo gives a path inside the mount's own filesystem: the host path itself, or its tail when the host
    # path lies on a filesystem mounted below / (then the tail is what shows)
    shown = {point: root for point, root in roots.items() if root != "/"}
    engine_files = {
        f"/etc/{name}": f"/var/lib/docker/containers/{info.container_id}/{name}"
        for name in ("resolv.conf", "hostname", "hosts")
    }
    expected = {"/workspace": f"/var/lib/docker/volumes/executor-{info.id}-workspace/_data", **engine_files}
    if transport == "socket":
        sources = {m["Destination"]: m["Source"] for m in data["Mounts"] if m["Type"] == "bind"}
        expected[AGENT_PATH] = sources[AGENT_PATH]
        expected[RUN_DIR] = sources[RUN_DIR]
        assert sources[RUN_DIR] == str(home / "run" / info.id)
    cgroups = {p: r for p, r in shown.items() if p.startswith("/sys/fs/cgroup/")}
    assert cgroups and set(cgroups.values()) == {f"/docker/{info.container_id}"}
    proc_masks = {p: r for p, r in shown.items() if p.startswith("/proc/")}  # the engine's masks of /proc files
    assert set(proc_masks.values()) <= {"/null", "/bus", "/fs", "/irq", "/sys", "/sysrq-trigger"}
    rest = {p: r for p, r in shown.items() if p not in cgroups and p not in proc_masks}
    assert set(rest) == set(expected), rest
    for point, root in rest.items():
        assert expected[point].endswith(root), (point, root)
    # the home's path shows in the run folder's line (and the agent's when it is built under the home), nowhere else
    showing_home = {line.split()[4] for line in mountinfo.splitlines() if str(home) in line}
    if transport == "socket":
        assert RUN_DIR in showing_home and showing_home <= {AGENT_PATH, RUN_DIR}, showing_home
    else:
        assert showing_home == set()
        assert AGENT_PATH not in roots
