"""The one session API: the classes and the shipped fake agree with it, names and defaults included."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import pytest

import executor.session as session_package
from executor.session import USE_DEFAULT, Executor, ExecutorAPI, Session, SessionAPI
from executor.testing import FakeExecutor, FakeSession


def _public_methods(protocol: type) -> list[str]:
    return sorted(
        name for name, value in vars(protocol).items() if not name.startswith("_") and inspect.isfunction(value)
    )


def _shape(function: Callable[..., object]) -> list[tuple[str, object, object]]:
    """Names, kinds and defaults of a callable's parameters (mypy checks the types)."""
    signature = inspect.signature(inspect.unwrap(function))
    return [(p.name, p.kind, p.default) for p in signature.parameters.values()]


@pytest.mark.parametrize(
    ("protocol", "implementations"),
    [(SessionAPI, (Session, FakeSession)), (ExecutorAPI, (Executor, FakeExecutor))],
)
def test_every_implementation_has_the_api_s_parameters_and_defaults(
    protocol: type, implementations: tuple[type, ...]
) -> None:
    """Session, Executor and the fakes take the API's parameters with the API's defaults."""
    methods = _public_methods(protocol)
    assert methods, "the protocol declares methods"
    for implementation in implementations:
        for name in methods:
            assert _shape(getattr(implementation, name)) == _shape(getattr(protocol, name)), (implementation, name)


def test_the_approval_default_is_the_executor_s_handler_everywhere() -> None:
    """Every gated tool defaults to the executor's handler (USE_DEFAULT), never to "nobody"."""
    for owner in (SessionAPI, Session, FakeSession):
        for name in ("bash", "write_file", "start_task"):
            default = inspect.signature(getattr(owner, name)).parameters["approval_handler"].default
            assert default is USE_DEFAULT, (owner, name)


def test_the_package_exports_what_it_documents() -> None:
    """Every name in executor.session.__all__ exists, and the API's parts are re-exported."""
    for name in session_package.__all__:
        assert hasattr(session_package, name), name
    assert {"Session", "Executor", "SessionAPI", "ExecutorAPI", "ToolResult", "TaskInfo", "open_executor"} <= set(
        session_package.__all__
    )
