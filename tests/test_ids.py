"""Identifiers: every format is made and checked in one place, and malformed ids never pass."""

from __future__ import annotations

import os
import re

import pytest

import executor.ids as ids
from executor.errors import SessionNotFound
from executor.ids import (
    artifact_id,
    is_image_ref,
    is_session_id,
    is_task_id,
    new_action_id,
    new_approval_id,
    new_judgment_id,
    new_session_id,
    parse_artifact_id,
    validate_session_id,
    validate_session_name,
)


def test_new_session_ids_are_well_formed_and_distinct() -> None:
    """Fresh session ids pass validation and do not repeat."""
    made = {new_session_id() for _ in range(200)}
    assert len(made) == 200
    assert all(validate_session_id(i) == i and is_session_id(i) for i in made)


@pytest.mark.parametrize(
    "bad", ["", "s-", "s-ABCDEF012345", "s-0123456789ab/..", "../s-0123456789ab", "x-0123456789ab", "s-0123456789ab\n"]
)
def test_malformed_session_ids_are_unknown_sessions(bad: str) -> None:
    """A malformed id is refused with the same error as an unknown one, before any path is derived."""
    assert not is_session_id(bad)
    with pytest.raises(SessionNotFound, match=r"^no session .*executor session ls"):
        validate_session_id(bad)


def test_a_non_string_is_not_a_session_id() -> None:
    """Ids that come from JSON may be any type; only a string can be an id."""
    assert not is_session_id(12)
    with pytest.raises(SessionNotFound):
        validate_session_id(None)  # type: ignore[arg-type]  # what a hostile caller may send


@pytest.mark.parametrize("bad", ["", "-x", "a b", "a/b", "x" * 64, "s-0123456789ab", "ok\n"])
def test_bad_session_names_are_refused(bad: str) -> None:
    """Session names are short slugs that cannot pass for an id."""
    with pytest.raises(ValueError, match="session name"):
        validate_session_name(bad)


def test_good_session_names_pass() -> None:
    """Letters, digits and _.- up to 63 characters are a name."""
    for good in ("build-7", "a", "A.b_c-d", "x" * 63):
        assert validate_session_name(good) == good


def test_artifact_ids_round_trip_with_their_session() -> None:
    """An artifact id names its session and sequence, and parses back to both."""
    session = new_session_id()
    made = artifact_id(session, 3)
    assert made == f"{session}.a3"
    assert parse_artifact_id(made) == (session, 3)


@pytest.mark.parametrize(
    "bad", ["", "s-0123456789ab", "s-0123456789ab.a0", "s-0123456789ab.a01", "s-0123456789ab.a1\n", "x.a1", 7, None]
)
def test_malformed_artifact_ids_do_not_parse(bad: object) -> None:
    """Anything but an exact artifact id parses to None."""
    assert parse_artifact_id(bad) is None


def test_artifact_id_refuses_what_it_could_not_parse() -> None:
    """artifact_id never makes an id that would fail its own check."""
    with pytest.raises(ValueError, match="no artifact id"):
        artifact_id("nope", 1)
    with pytest.raises(ValueError, match="no artifact id"):
        artifact_id(new_session_id(), 0)


def test_task_ids_have_the_agents_shape() -> None:
    """Task ids are t and a counter from 1, as the agent numbers them."""
    assert is_task_id("t1") and is_task_id("t42")
    assert not any(is_task_id(bad) for bad in ("", "t", "t0", "t01", "x1", "t1 ", 1))


def test_action_ids_are_stamped_with_their_session_and_distinct() -> None:
    """An action id starts with its session's id and differs by sequence."""
    session = new_session_id()
    first = new_action_id(session, 1, now_ms=1_700_000_000_000)
    second = new_action_id(session, 2, now_ms=1_700_000_000_000)
    assert first.startswith(f"{session}.x") and first != second


def test_approval_and_judgment_ids_are_fresh() -> None:
    """Approval and judgment ids carry their prefix and do not repeat."""
    approvals = {new_approval_id() for _ in range(100)}
    judgments = {new_judgment_id() for _ in range(100)}
    assert len(approvals) == 100 and all(a.startswith("ap-") and len(a) == 19 for a in approvals)
    assert len(judgments) == 100 and all(j.startswith("j-") and len(j) == 34 for j in judgments)


def test_all_names_exist() -> None:
    """Every name in __all__ is defined and public."""
    for name in ids.__all__:
        assert hasattr(ids, name) and not name.startswith("_")


def test_unique_hex_never_repeats_in_a_process_or_across_a_fork() -> None:
    """Record ids are 32 hex digits, distinct within the process, and a forked child (which copies the parent's
    state) makes ids the parent never makes."""
    made = [ids.unique_hex() for _ in range(10_000)]
    assert len(set(made)) == len(made)
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in made)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next ids and leave at once
        os.close(read_end)
        os.write(write_end, " ".join(ids.unique_hex() for _ in range(100)).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as stream:
        child = stream.read().decode().split()
    os.waitpid(pid, 0)
    parent = [ids.unique_hex() for _ in range(100)]
    assert len(child) == 100 and not set(child) & set(parent) and not set(child) & set(made)


@pytest.mark.parametrize(
    "ref",
    [
        "base",
        "busybox:latest",
        "executor/base:latest",
        "localhost:5000/team/tool:1.2.3",
        "registry.example/a__b/c-d.e:v_1",
        "x@sha256:" + "0" * 64,
        "x:1@sha256:" + "ab" * 32,
        "sha256:" + "f" * 64,
        "0123456789ab",
    ],
)
def test_image_references_by_dockers_grammar_pass(ref: str) -> None:
    assert is_image_ref(ref)


@pytest.mark.parametrize(
    "ref",
    [
        "",
        "../containers/json",
        "a/../../b:1",
        "Bad Name",
        "UPPER",
        "x@y",
        "a:",
        "/a",
        "a//b",
        "a/",
        "-a",
        "a:tag with space",
        "a\n",
        "a:" + "t" * 129,
        "a" * 256,
        None,
    ],
)
def test_what_is_not_an_image_reference_is_refused(ref: object) -> None:
    """Refused before any engine call is made with it: a path such as ``../containers/x`` never reaches a URL."""
    assert not is_image_ref(ref)
