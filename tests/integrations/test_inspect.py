"""inspect_ai's own sandbox self-check against the executor provider, and an inspect eval end to end (real engine).

The checks are inspect's (``inspect_ai.util._sandbox.self_check``), collected the way inspect's own runner does: a
function-scoped ``sandbox_env`` fixture over one module-scoped session, marking what the provider deliberately does
not support as xfail (the same list as the README's).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest

pytest.importorskip("inspect_ai", reason="the inspect extra is not installed (pip install -e '.[inspect]')")

from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import Score, Scorer, Target, accuracy, scorer
from inspect_ai.solver import TaskState, generate, use_tools
from inspect_ai.tool import bash
from inspect_ai.util import SandboxEnvironment, SandboxEnvironmentSpec, sandbox
from inspect_ai.util._sandbox.self_check import *  # noqa: F403

from executor.integrations.inspect import ExecutorSandboxConfig, ExecutorSandboxEnvironment

pytestmark = pytest.mark.docker

UNSUPPORTED = {
    "test_exec_as_user": "commands never run as root or as another user than the session's one",
}
"""Checks the executor deliberately does not pass, with the reason (the README lists the same)."""


@pytest.fixture(scope="module")
def shared_env(tmp_path_factory: pytest.TempPathFactory, base_image: str) -> Iterator[ExecutorSandboxEnvironment]:
    """One session for every check of this module (inspect's runner shares one environment the same way)."""
    config = ExecutorSandboxConfig(home=str(tmp_path_factory.mktemp("inspect-home")), gate_mode="observe")

    async def start() -> ExecutorSandboxEnvironment:
        environments = await ExecutorSandboxEnvironment.sample_init("self-check", config, {})
        environment = environments["default"]
        assert isinstance(environment, ExecutorSandboxEnvironment)
        return environment

    environment = anyio.run(start)
    try:
        yield environment
    finally:

        async def stop() -> None:
            await ExecutorSandboxEnvironment.sample_cleanup("self-check", config, {"default": environment}, False)
            await ExecutorSandboxEnvironment.task_cleanup("self-check", config, True)

        anyio.run(stop)


@pytest.fixture
async def sandbox_env(
    shared_env: ExecutorSandboxEnvironment, request: pytest.FixtureRequest
) -> AsyncIterator[SandboxEnvironment]:
    """The shared session; a deliberately unsupported check is marked xfail with its reason."""
    name = request.node.originalname
    if name in UNSUPPORTED:
        request.node.add_marker(pytest.mark.xfail(reason=UNSUPPORTED[name], strict=True))
    yield shared_env


def test_every_unsupported_check_is_listed_in_the_readme() -> None:
    """The README's list of unsupported self-checks is this module's."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    for name, reason in UNSUPPORTED.items():
        assert f"`{name}`: {reason}" in readme


def test_the_provider_behaves_as_inspects_docker_sandbox_where_its_contract_is_loose(
    shared_env: ExecutorSandboxEnvironment,
) -> None:
    """What inspect's self-check leaves out but its docker sandbox does: links are read through, a folder alias is
    IsADirectoryError, a timeout above the executor's cap runs to the cap, a TimeoutError carries the partial output,
    a write through a link is PermissionError, and an anyio cancel scope (inspect's time limits) cancels an exec at
    once. Run on trio too, after the asyncio runs above (the provider's lock was bound to the first backend)."""
    env = shared_env

    async def checks() -> None:
        assert "ID=" in await env.read_file("/etc/os-release")  # a symlink to ../usr/lib/os-release
        for alias in (".", "..", "sub/"):
            with pytest.raises(IsADirectoryError):
                await env.read_file(alias)
        assert (await env.exec(["true"], timeout=100_000)).success
        with pytest.raises(TimeoutError) as timed_out:
            await env.exec(["sh", "-c", "echo partial; sleep 30"], timeout=1)
        assert "partial" in getattr(timed_out.value, "truncated_output", ""), timed_out.value
        await env.exec(["sh", "-c", "mkdir -p links && ln -sf /tmp/elsewhere links/out"])
        with pytest.raises(PermissionError):
            await env.write_file("links/out", "x")
        began = anyio.current_time()
        with anyio.move_on_after(1) as scope:
            await env.exec(["sleep", "20"], timeout=60)
        assert scope.cancelled_caught and anyio.current_time() - began < 10

    anyio.run(checks)
    anyio.run(checks, backend="trio")


@scorer(metrics=[accuracy()])
def _file_written() -> Scorer:
    async def score(state: TaskState, target: Target) -> Score:
        content = await sandbox().read_file("answer.txt")
        listing = await sandbox().exec(["ls", "-1"])
        ok = content == target.text and "answer.txt" in listing.stdout
        return Score(value=1 if ok else 0, answer=content)

    return score


# inspect's own retry setup uses a deprecated tenacity parameter, and its eval loop leaves an anyio memory stream
# unclosed (a ResourceWarning at garbage collection); both warnings are inspect's, not the provider's
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_inspect_eval_runs_commands_and_writes_files_in_the_sandbox(base_image: str, home: Path) -> None:
    """A scripted model's bash tool calls run in an executor session and a scorer reads the file back."""
    # usage given, so that mockllm does not count tokens (tiktoken would download its encoding)
    usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    outputs = [
        ModelOutput.for_tool_call(
            "mockllm/model", "bash", {"command": "mkdir -p out && echo 42 > answer.txt && cat answer.txt"}
        ).model_copy(update={"usage": usage}),
        ModelOutput.from_content("mockllm/model", "done").model_copy(update={"usage": usage}),
    ]
    task = Task(
        dataset=[Sample(input="write 42 to answer.txt", target="42\n")],
        solver=[use_tools(bash()), generate()],
        scorer=_file_written(),
        sandbox=SandboxEnvironmentSpec("executor", ExecutorSandboxConfig(home=str(home), gate_mode="observe")),
    )
    logs = eval(
        task,
        model=get_model("mockllm/model", custom_outputs=outputs),
        log_dir=str(home / "inspect-logs"),
        display="none",
    )
    assert logs[0].status == "success", logs[0].error
    assert logs[0].results is not None
    assert logs[0].results.scores[0].metrics["accuracy"].value == 1.0
