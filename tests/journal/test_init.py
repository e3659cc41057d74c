"""The journal package's public names."""

from __future__ import annotations

import executor.journal as journal


def test_all_names_exist_and_are_sorted() -> None:
    """Every name in __all__ is importable from executor.journal, once."""
    assert all(hasattr(journal, name) for name in journal.__all__)
    assert len(journal.__all__) == len(set(journal.__all__))
