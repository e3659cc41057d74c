"""profiles.<name>.runtime: its default, its rejection at load, the shipped ``untrusted`` profile, and its effect on
the real engine (the container's runtime, the agent's transport, a runtime the engine lacks)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from executor.config import Profile, load_settings
from executor.errors import AgentError, ConfigError, EngineError
from executor.ids import new_session_id
from executor.sandbox.docker import DockerBackend
from executor.sandbox.docker.hardening import (
    RUNSC_ARGS,
    STATX_SHIM_PATH,
    container_kwargs,
    pinned_seccomp,
    runtime_problem,
)
from executor.testing.runtimes import require_runtime


def test_runtime_defaults_to_runc_and_rejects_others_at_load() -> None:
    """The default profile runs under runc; a runtime other than runc or runsc fails at load, naming the field."""
    assert load_settings().profile().runtime == "runc"
    with pytest.raises(ConfigError, match=r"profiles\.x\.runtime"):
        load_settings(overrides={"profiles": {"x": {"runtime": "kata"}}})


def test_runsc_with_the_engine_default_seccomp_is_refused_at_load() -> None:
    """runsc answers the engine default's ENOSYS rules with EPERM (no thread could start): refused, naming why."""
    with pytest.raises(ConfigError, match=r"profiles\.x: .*runtime 'runsc' needs seccomp 'pinned'"):
        load_settings(overrides={"profiles": {"x": {"runtime": "runsc", "seccomp": "engine-default"}}})


def test_untrusted_profile_is_shipped_on_runsc_and_refined_field_by_field() -> None:
    """`untrusted` exists on runsc; a source that names it changes only the fields it gives."""
    assert load_settings().profile("untrusted").runtime == "runsc"
    refined = load_settings(overrides={"profiles": {"untrusted": {"memory": "2g"}}}).profile("untrusted")
    assert (refined.runtime, refined.memory) == ("runsc", 2 * 1024**3)
    assert load_settings(overrides={"profiles": {"untrusted": {"runtime": "runc"}}}).profile("untrusted").runtime == (
        "runc"
    )


def test_runtime_and_its_seccomp_variant_reach_the_create_call() -> None:
    """The profile's runtime is the container's; under runsc clone3 is allowed (gVisor answers it with ENOSYS) and
    the statx shim is preloaded."""
    for runtime in ("runc", "runsc"):
        kwargs = container_kwargs(
            profile=Profile(runtime=runtime),
            agent=load_settings().agent,
            image="executor/base:latest",
            session_id=new_session_id(),
            labels={},
            transport="exec",
            agent_host_path=None,
            run_host_dir=None,
        )
        assert kwargs["runtime"] == runtime
        assert "seccomp=" + pinned_seccomp(runtime) in kwargs["security_opt"]
        assert kwargs["environment"].get("LD_PRELOAD") == (STATX_SHIM_PATH if runtime == "runsc" else None)
    rules = {json.dumps(r["names"]): r for r in json.loads(pinned_seccomp("runsc"))["syscalls"]}
    assert rules['["clone3"]']["action"] == "SCMP_ACT_ALLOW"
    assert json.loads(pinned_seccomp("runc"))["syscalls"][-1]["errnoRet"] == 38


def test_runtime_problem_names_the_runtime_and_how_to_register_it() -> None:
    """A missing runtime, or runsc without its arguments, is explained with the registration script."""
    missing = runtime_problem("runsc", "untrusted", "unix:///x.sock", {"runc": {"path": "runc"}})
    assert missing is not None and "'runsc'" in missing and "images/register-runsc.sh" in missing
    assert "its runtimes: runc" in missing
    bare = runtime_problem("runsc", "untrusted", "unix:///x.sock", {"runsc": {"path": "/usr/bin/runsc"}})
    assert bare is not None and "without --network=none --oci-seccomp" in bare
    ready = {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": list(RUNSC_ARGS)}}
    assert runtime_problem("runsc", "untrusted", "unix:///x.sock", ready) is None


@pytest.mark.docker
async def test_a_runtime_the_engine_lacks_fails_before_anything_is_created(
    base_image: str, home: Path, backend_factory: Any
) -> None:
    """Opening a profile whose runtime the real engine does not have raises EngineError and leaves nothing behind."""
    # Only runc and runsc load; model_construct stands for an engine that lacks the one asked for.
    profile = Profile.model_construct(**{**Profile().model_dump(), "runtime": "nosuch"})
    with trio.fail_after(60):
        async with backend_factory() as backend:
            assert isinstance(backend, DockerBackend)
            with pytest.raises(EngineError, match=r"runtime 'nosuch', which the Docker engine .* does not have"):
                await backend.open_session(profile=profile, profile_name="odd", owner="t-runtime-" + new_session_id())
            assert [s for s in await backend.list_sessions() if s.profile == "odd"] == []


@pytest.mark.docker
async def test_runsc_sessions_take_the_exec_bridge_and_refuse_the_socket(
    engine_runtimes: frozenset[str], backend_factory: Any
) -> None:
    """Under runsc `auto` picks the exec bridge, the container runs on gVisor, and `socket` is refused up front."""
    require_runtime("runsc", engine_runtimes)
    profile = load_settings().profile("untrusted")
    with trio.fail_after(90):
        async with backend_factory() as backend:
            assert isinstance(backend, DockerBackend)
            assert backend.transport_for(profile) == "exec"
            info = await backend.open_session(profile=profile, profile_name="untrusted", owner="t-runsc")
            try:
                data = await trio.to_thread.run_sync(backend.engine.client.api.inspect_container, info.container_id)
                kernel = await trio.to_thread.run_sync(
                    lambda: backend.engine.client.containers.get(info.container_id).exec_run(["dmesg"], user="1000")
                )
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(30):
                    await backend.stop_session(info.id)
        assert info.transport == "exec"
        assert data["HostConfig"]["Runtime"] == "runsc"
        assert b"gVisor" in kernel.output
        async with backend_factory(agent={"transport": "socket"}) as backend:
            assert isinstance(backend, DockerBackend)
            with pytest.raises(AgentError, match=r"'socket' cannot reach an agent under runtime 'runsc'"):
                await backend.open_session(profile=profile, profile_name="untrusted", owner="t-runsc")


@pytest.mark.docker
async def test_out_of_memory_under_runsc_ends_the_session_as_sandbox_lost(
    engine_runtimes: frozenset[str], base_image: str, home: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Under gVisor the host's OOM killer takes the whole sandbox: the run ends `sandbox_lost` at once, never hangs."""
    from executor.session import open_executor

    require_runtime("runsc", engine_runtimes)
    build = tmp_path_factory.getbasetemp() / "agent-build-shared"
    settings = load_settings(
        overrides={
            "home": str(home),
            "agent": {"build_dir": str(build)},
            "profiles": {"untrusted": {"memory": "96m"}},
        }
    )
    with trio.fail_after(90):
        async with open_executor(settings) as ex, ex.open_session(profile="untrusted") as session:
            result = await session.bash("python3 -c 'a = bytearray(400 * 1024 * 1024)'", timeout_ms=60_000)
            assert result.run is not None and result.run.cause == "sandbox_lost", result.text
            assert result.outcome == "error"
