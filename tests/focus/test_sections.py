"""Section splitting and the manifest."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from executor.config import load_settings
from executor.errors import ConfigError
from executor.focus.sections import Manifest, Section, split_sections, stream_lines

TRACEBACK_RUN = """\
running job
step two

Traceback (most recent call last):
  File "/app/x.py", line 10, in <module>
    main()
  File "/app/x.py", line 5, in main
    raise ValueError("bad")
ValueError: bad

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/app/x.py", line 12, in <module>
    cleanup()
KeyError: 'x'
done
"""

PYTEST_RUN = """\
============================= test session starts ==============================
collected 3 items

tests/test_a.py .F.                                                      [100%]

=================================== FAILURES ===================================
__________________________________ test_login __________________________________

    def test_login():
        user = make_user()

>       assert user.login("pw")
E       AssertionError: assert False

tests/test_a.py:12: AssertionError
__________________________________ test_logout _________________________________

    def test_logout():
>       assert 0
E       assert 0

tests/test_a.py:20: AssertionError
=========================== short test summary info ============================
FAILED tests/test_a.py::test_login - AssertionError: assert False
========================= 2 failed, 1 passed in 0.05s ==========================
"""

UNITTEST_RUN = """\
.F
======================================================================
FAIL: test_add (test_calc.CalcTest.test_add)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/app/test_calc.py", line 6, in test_add
    self.assertEqual(1 + 1, 3)
AssertionError: 2 != 3

----------------------------------------------------------------------
Ran 2 tests in 0.001s

FAILED (failures=1)
"""


def _by_kind(manifest: Manifest, kind: str) -> list[Section]:
    return [section for section in manifest.sections if section.kind == kind]


def test_traceback_with_chain_is_one_section() -> None:
    """A chained Python traceback, blank lines included, is one traceback section with true line numbers."""
    manifest = split_sections(TRACEBACK_RUN, max_sections=100)
    [traceback] = _by_kind(manifest, "traceback")
    assert (traceback.start_line, traceback.end_line) == (4, 16)
    assert traceback.has_traceback and traceback.has_error
    assert stream_lines(TRACEBACK_RUN)[traceback.end_line - 1] == "KeyError: 'x'"
    assert manifest.sections[0].line_count == 2  # "running job", "step two"
    assert manifest.sections[-1].excerpt == "done"


def test_pytest_failure_blocks() -> None:
    """Each pytest ``____ test ____`` block is one failure section spanning its blank lines."""
    manifest = split_sections(PYTEST_RUN, max_sections=100)
    failures = _by_kind(manifest, "failure")
    assert [(s.start_line, s.end_line) for s in failures] == [(7, 15), (16, 22)]
    assert all(s.has_failure and s.has_error for s in failures)
    assert "test_login" in failures[0].terms
    headings = _by_kind(manifest, "heading")
    assert any("short test summary" in h.excerpt and h.has_failure for h in headings)
    assert not manifest.sections[0].has_failure


def test_unittest_failure_block() -> None:
    """A unittest ``FAIL:`` block runs from its bar to just before the ``Ran N tests`` footer, traceback included."""
    manifest = split_sections(UNITTEST_RUN, max_sections=100)
    [failure] = _by_kind(manifest, "failure")
    assert (failure.start_line, failure.end_line) == (2, 8)
    assert failure.has_traceback and failure.has_failure


def test_cargo_and_go_failures() -> None:
    """A cargo ``---- name stdout ----`` block and a go ``--- FAIL:`` block are failure sections."""
    cargo = (
        "running 2 tests\ntest a ... ok\n\n---- tests::b stdout ----\nthread 'tests::b' panicked at src/lib.rs:9:5\n"
    )
    cargo += "assertion failed\n\nfailures:\n    tests::b\n"
    manifest = split_sections(cargo, max_sections=100)
    [failure] = _by_kind(manifest, "failure")
    assert (failure.start_line, failure.end_line) == (4, 6)
    assert failure.has_traceback
    go = "=== RUN   TestX\n--- FAIL: TestX (0.00s)\n    x_test.go:8: want 1, got 2\nFAIL\nFAIL\tpkg\t0.01s\n"
    manifest = split_sections(go, max_sections=100)
    [failure] = _by_kind(manifest, "failure")
    assert (failure.start_line, failure.end_line) == (2, 3)


def test_headings_and_blank_line_blocks() -> None:
    """Markdown and underlined headings take the paragraph after them; other blocks end at blank lines."""
    text = "# Title\n\nintro one\nintro two\n\nplain block\n\nSetup\n-----\nstep 1\n\n## Next\n"
    manifest = split_sections(text, max_sections=100)
    shape = [(s.kind, s.start_line, s.end_line) for s in manifest.sections]
    assert shape == [("heading", 1, 4), ("block", 6, 6), ("heading", 8, 10), ("heading", 12, 12)]


def test_log_runs_split_by_level() -> None:
    """Log lines sharing a prefix shape and level form one section; indented continuations stay with it."""
    text = (
        "2024-05-01 10:00:00 INFO start\n"
        "2024-05-01 10:00:01 INFO loaded\n"
        "2024-05-01 10:00:02 ERROR db down\n"
        "    at connect (db.js:3)\n"
        "2024-05-01 10:00:03 INFO retry\n"
        "[WARN] slow\n"
    )
    manifest = split_sections(text, max_sections=100)
    shape = [(s.kind, s.start_line, s.end_line, s.has_error, s.has_warning) for s in manifest.sections]
    assert shape == [
        ("log", 1, 2, False, False),
        ("log", 3, 4, True, False),
        ("log", 5, 5, False, False),
        ("log", 6, 6, False, True),
    ]


def test_zero_counts_are_not_errors() -> None:
    """``0 errors`` and ``no failures`` do not flag a section."""
    manifest = split_sections("build ok: 0 errors, 0 warnings, no failures\n", max_sections=10)
    [section] = manifest.sections
    assert not (section.has_error or section.has_warning or section.has_failure)


def test_manifest_is_deterministic_and_hash_stable() -> None:
    """The same text gives the same manifest and hash; one changed character changes the hash."""
    first = split_sections(PYTEST_RUN, max_sections=100)
    second = split_sections(PYTEST_RUN, max_sections=100)
    assert first == second
    assert first.manifest_hash == second.manifest_hash
    assert len(first.manifest_hash) == 64
    changed = split_sections(PYTEST_RUN.replace("test_logout", "test_logoff"), max_sections=100)
    assert changed.manifest_hash != first.manifest_hash


def test_manifest_round_trips_and_rejects_tampering() -> None:
    """A manifest reloads from its JSON, and an altered one is refused."""
    manifest = split_sections(PYTEST_RUN, max_sections=100)
    data = manifest.model_dump(mode="json")
    assert Manifest.model_validate(data) == manifest
    data["sections"][1]["end_line"] += 1
    with pytest.raises(ValidationError, match="manifest_hash does not match"):
        Manifest.model_validate(data)


def test_max_sections_caps_into_a_rest_section() -> None:
    """Past ``max_sections - 1`` sections the rest of the stream is one ``rest`` section up to the last line."""
    text = "".join(f"block {n}\n\n" for n in range(50)) + "ERROR last\n"
    manifest = split_sections(text, max_sections=5)
    assert len(manifest.sections) == 5
    rest = manifest.sections[-1]
    assert rest.kind == "rest" and rest.start_line == 9 and rest.end_line == manifest.line_count == 101
    assert rest.has_error
    assert len(split_sections(text, max_sections=1).sections) == 1
    with pytest.raises(ValueError, match="max_sections must be at least 1"):
        split_sections(text, max_sections=0)


def test_max_sections_setting_default_effect_and_rejection() -> None:
    """``focus.max_sections`` defaults to 2000, caps the split when passed through, and 0 is refused at load."""
    settings = load_settings()
    assert settings.focus.max_sections == 2000
    text = "".join(f"line {n}\n\n" for n in range(3000))
    assert len(split_sections(text, max_sections=settings.focus.max_sections).sections) == 2000
    small = load_settings(overrides={"focus": {"max_sections": 3}})
    assert len(split_sections(text, max_sections=small.focus.max_sections).sections) == 3
    with pytest.raises(ConfigError, match=r"focus\.max_sections"):
        load_settings(overrides={"focus": {"max_sections": 0}})


def test_fast_on_256k_and_bounded_on_huge_lines() -> None:
    """256 KB splits whole; a 16 MB single line gives one section with a short excerpt (time: ``just bench``)."""
    text = (PYTEST_RUN + TRACEBACK_RUN) * (256 * 1024 // len(PYTEST_RUN + TRACEBACK_RUN))
    manifest = split_sections(text, max_sections=2000)
    assert manifest.line_count == len(stream_lines(text))
    huge = split_sections("E" * (16 * 1024 * 1024), max_sections=2000)
    [only] = huge.sections
    assert len(only.excerpt) <= 120 and only.line_count == 1


def test_line_numbers_and_empty_input() -> None:
    """Lines split on newline only (a CR stays in the line); empty and blank streams have no sections."""
    assert split_sections("", max_sections=5).sections == ()
    assert split_sections("\n\n  \n", max_sections=5).sections == ()
    manifest = split_sections("a\r\nb\n\n\nc", max_sections=5)
    assert [(s.start_line, s.end_line) for s in manifest.sections] == [(1, 2), (5, 5)]
    assert manifest.line_count == 5


def test_excerpt_hides_control_characters() -> None:
    """A section's excerpt shows control and undecodable characters as ``?``."""
    manifest = split_sections("\x1b[31mred\udcff\x00\n", max_sections=5)
    assert manifest.sections[0].excerpt == "?[31mred??"


def test_adversarial_lines_stay_linear() -> None:
    """Long digit, underscore and punctuation runs split, every line counted (time: ``just bench``)."""
    text = "".join(f"{c * 1000}\n" for c in "1_=-.E ") * 40
    manifest = split_sections(text, max_sections=2000)
    assert manifest.line_count == 7 * 40
