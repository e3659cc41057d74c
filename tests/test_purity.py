"""Pure modules are pure at import time too: importing one in a fresh interpreter loads neither trio nor docker."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

_PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
_PURE_CONTRACT = "Pure logic imports neither trio nor docker"


def _pure_modules() -> list[str]:
    contracts = tomllib.loads(_PYPROJECT.read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c["name"] == _PURE_CONTRACT]
    assert "allow_indirect_imports" not in contract, "the pure contract must check indirect imports too"
    modules: list[str] = contract["source_modules"]
    return modules


def test_the_contract_names_the_pure_modules() -> None:
    """The layering contract lists at least the modules the architecture calls pure."""
    assert {"executor.gate.policy", "executor.artifacts.paging", "executor.focus.sections"} <= set(_pure_modules())


@pytest.mark.parametrize("module", _pure_modules())
def test_importing_a_pure_module_loads_neither_trio_nor_docker(module: str) -> None:
    """A module the contract calls pure (with its packages' __init__) imports without trio or docker."""
    code = (
        f"import sys, {module}\n"
        "loaded = sorted(m for m in ('trio', 'docker') if m in sys.modules)\n"
        "assert not loaded, f'loaded {loaded}'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize(
    "package", ["executor", "executor.gate", "executor.focus", "executor.artifacts", "executor.journal"]
)
def test_lazy_re_exports_are_their_home_objects_after_every_import(package: str) -> None:
    """Each name a package re-exports is the object its home module defines, even once every submodule has been
    imported (a submodule of the same name must not shadow a re-exported function)."""
    code = (
        "import importlib, pkgutil, types\n"
        f"pkg = importlib.import_module({package!r})\n"
        "for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "    if not info.name.endswith('__main__'):\n"
        "        importlib.import_module(info.name)\n"
        "bad = [n for n in pkg.__all__ if isinstance(getattr(pkg, n), types.ModuleType)]\n"
        "assert not bad, f'names that resolve to a module: {bad}'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
