"""The journal package's public names."""

from __future__ import annotations

import subprocess
import sys

import executor.journal as journal


def test_all_names_exist_and_are_sorted() -> None:
    """Every name in __all__ is importable from executor.journal, once."""
    assert all(hasattr(journal, name) for name in journal.__all__)
    assert len(journal.__all__) == len(set(journal.__all__))


def test_pure_modules_import_neither_trio_nor_docker() -> None:
    """Importing the journal (events, reader, writer) loads neither trio nor docker."""
    code = "import sys, executor.journal; print(sorted({'trio', 'docker'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"
