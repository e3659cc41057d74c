"""The backend contract's pure parts: ids, names, the session model, the public names."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

import executor.sandbox.base as base
from executor.errors import SessionNotFound
from executor.sandbox.base import SessionInfo, new_session_id, validate_session_id, validate_session_name


def test_new_ids_are_well_formed_and_distinct() -> None:
    """Fresh session ids pass validation and do not repeat."""
    ids = {new_session_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(validate_session_id(i) == i for i in ids)


@pytest.mark.parametrize(
    "bad", ["", "s-", "s-ABCDEF012345", "s-0123456789ab/..", "../s-0123456789ab", "x-0123456789ab"]
)
def test_malformed_ids_are_unknown_sessions(bad: str) -> None:
    """A malformed id is refused with the same error as an unknown one, before any path is derived."""
    with pytest.raises(SessionNotFound, match=r"^no session .*executor session ls"):
        validate_session_id(bad)


@pytest.mark.parametrize("bad", ["", "-x", "a b", "a/b", "x" * 64, "s-0123456789ab"])
def test_bad_names_are_refused(bad: str) -> None:
    """Session names are short slugs that cannot pass for an id."""
    with pytest.raises(ValueError, match="session name"):
        validate_session_name(bad)


def test_session_info_is_frozen_and_strict() -> None:
    """SessionInfo rejects unknown fields and cannot be mutated."""
    fields: dict[str, object] = {
        "id": "s-0123456789ab",
        "name": None,
        "container_id": "c",
        "image": "i",
        "profile": "default",
        "state": "running",
        "created_at": datetime.now(UTC),
        "owner": None,
        "transport": "socket",
        "labels": {},
    }
    info = SessionInfo.model_validate(fields)
    with pytest.raises(ValidationError):
        SessionInfo.model_validate({**fields, "extra": 1})
    with pytest.raises(ValidationError):
        info.id = "s-000000000000"  # type: ignore[misc]  # frozen on purpose


def test_all_names_exist() -> None:
    """Every name in __all__ is defined and public."""
    for name in base.__all__:
        assert hasattr(base, name) and not name.startswith("_")
