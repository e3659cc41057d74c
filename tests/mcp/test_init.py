"""The package's public names."""

from __future__ import annotations

import executor.mcp as mcp
import executor.mcp.server as server


def test_all_names_are_exported_once_and_match_the_module() -> None:
    """Every name in __all__ is importable from executor.mcp, once, and is the server module's own."""
    assert all(hasattr(mcp, name) for name in mcp.__all__)
    assert len(mcp.__all__) == len(set(mcp.__all__))
    assert set(mcp.__all__) == set(server.__all__)
