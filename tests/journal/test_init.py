"""The journal package's public names."""

from __future__ import annotations

import subprocess
import sys
from typing import get_args

import executor.journal as journal


def test_all_names_exist_and_are_sorted() -> None:
    """Every name in __all__ is importable from executor.journal, once, in isort order (constants, classes,
    functions; each alphabetical), so a new name has one place."""
    assert all(hasattr(journal, name) for name in journal.__all__)
    assert len(journal.__all__) == len(set(journal.__all__))

    def isort_key(name: str) -> tuple[int, str]:
        return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)

    assert journal.__all__ == sorted(journal.__all__, key=isort_key)


def test_pure_modules_import_neither_trio_nor_docker() -> None:
    """Importing the journal (events, reader, writer) loads neither trio nor docker."""
    modules = "executor.journal, executor.journal.events, executor.journal.reader, executor.journal.writer"
    code = f"import sys, {modules}; print(sorted({{'trio', 'docker'}} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_event_type_names_match_the_union() -> None:
    """EventType lists exactly the type values of the JournalEvent members."""
    members = get_args(get_args(journal.JournalEvent)[0])
    assert {member.model_fields["type"].default for member in members} == set(get_args(journal.EventType))
