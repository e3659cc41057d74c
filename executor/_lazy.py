"""Lazy package re-exports: a package's public names are imported from their home module on first use.

A package whose ``__init__`` imported every submodule would load trio (and the Docker SDK) for anyone importing one
of its pure modules (``executor.gate.policy`` runs ``executor/gate/__init__.py`` first). Packages therefore name
their public names' homes and resolve them through a module ``__getattr__`` made here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_getattr"]


def lazy_getattr(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports each name in ``homes`` from its module when asked."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(home), name)

    return __getattr__
