"""The nesting pre-scan every parser of outside text runs first: exact at the limit, blind to strings, no recursion."""

from __future__ import annotations

import json
import tomllib

import pytest

from executor.nesting import (
    DEFAULT_MAX_DEPTH,
    NestingTooDeep,
    check_json_depth,
    check_toml_depth,
    json_depth,
    loads_json,
    toml_depth,
)


def test_json_depth_counts_arrays_and_objects_not_brackets_in_strings() -> None:
    """Brackets inside strings (escaped quotes included) do not nest; arrays and objects do."""
    assert json_depth(b"1") == 0
    assert json_depth('{"a": [1, {"b": []}]}') == 4
    assert json_depth('{"a": "[[[[[[[[\\"[[[[[["}') == 1
    assert json_depth("[" * 200_000) == 200_000


def test_check_json_depth_is_exact_at_the_limit_and_names_the_setting() -> None:
    """Exactly max_depth levels pass; one more is refused with a message naming the depth, limit and setting."""
    check_json_depth("[" * 5 + "]" * 5, max_depth=5)
    with pytest.raises(NestingTooDeep, match=r"^JSON nested 6 levels deep; at most 5 \(a\.b\) are accepted$"):
        check_json_depth("[" * 6 + "]" * 6, max_depth=5, setting="a.b")


def test_loads_json_refuses_200000_levels_without_recursing_and_is_a_value_error() -> None:
    """A line 200,000 deep is a NestingTooDeep (a ValueError, as every parse failure), never a RecursionError."""
    with pytest.raises(ValueError, match=r"nested 200000 levels deep"):
        loads_json("[" * 200_000, max_depth=DEFAULT_MAX_DEPTH)
    assert loads_json('{"a": [1]}', max_depth=2, parse_float=str) == {"a": [1]}
    with pytest.raises(json.JSONDecodeError):
        loads_json("{not json", max_depth=2)


@pytest.mark.parametrize(
    ("text", "at_least"),
    [
        ("a = " + "[" * 100 + "]" * 100, 100),  # arrays
        ("a = " + "{b = " * 100 + "1" + "}" * 100, 100),  # inline tables
        ("a" + ".a" * 100 + " = 1", 100),  # dotted keys
        ("[a" + ".a" * 100 + "]\nx = 1", 100),  # a table header's dotted path
        ("[a" + ".a" * 50 + "]\n" + "b" + ".b" * 50 + " = 1", 100),  # a dotted key under a dotted header
    ],
)
def test_toml_depth_never_underestimates(text: str, at_least: int) -> None:
    """Every way TOML nests (arrays, inline tables, dotted keys, headers, and headers plus keys) is counted."""
    assert toml_depth(text) >= at_least
    with pytest.raises(NestingTooDeep, match=r"nested too deeply"):
        check_toml_depth(text)


def test_toml_depth_skips_strings_and_comments_and_passes_real_settings() -> None:
    """Brackets and dots in strings and comments do not count; an ordinary settings file passes."""
    text = (
        '# [[[[[[ a.b.c.d.e.f\n[service]\nsocket = "/a.b/c.d[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["\n'
        "tokens = ['x.y.z[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[']\n"
        'note = """\n[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n"""\n'
        '[profiles.default]\nmemory = "1.5g"\nlist = [\n  [1, 2],\n  [3.5],\n]\n'
    )
    tomllib.loads(text)
    assert toml_depth(text) <= 6
    check_toml_depth(text)
