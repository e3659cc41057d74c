"""Tamper evidence: a per-home key, a MAC on every line bound to its predecessor, and a sealed head."""

from __future__ import annotations

import io
import json
import stat
from pathlib import Path

import pytest

from executor.config import JournalSettings
from executor.errors import JournalCorrupt, JournalError
from executor.journal.chain import KEY_FILE, head_path, load_journal_key
from executor.journal.events import ApprovalResolved, ExecutionStarted, SessionClosed, SessionOpened
from executor.journal.reader import JournalRead, read_journal, read_journal_file
from executor.journal.writer import JournalWriter
from executor.testing.journal import SESSION, decision, prepared

SETTINGS = JournalSettings.model_validate({"fsync": "never"})


def _signed(home: Path, count: int = 6) -> Path:
    key = load_journal_key(home, create=True)
    path = home / "sessions" / SESSION / "journal.ndjson"
    with JournalWriter(path, session_id=SESSION, settings=SETTINGS, key=key) as journal:
        journal.emit(SessionOpened())
        for index in range(count - 2):
            journal.emit(prepared(f"a{index}", "ls"))
        journal.emit(SessionClosed())
    return path


def _read(home: Path, path: Path) -> JournalRead:
    return read_journal_file(path, settings=JournalSettings(), key=load_journal_key(home, create=False))


def _codes(read: JournalRead) -> list[tuple[int, str]]:
    return [(issue.line, issue.code) for issue in read.issues]


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def test_key_is_created_once_private_and_never_written_into_the_journal(home: Path) -> None:
    """The key file is 0600 under the home, reused on the next load, and absent from every journal line."""
    path = _signed(home)
    key_file = home / KEY_FILE
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    secret = key_file.read_bytes()
    assert len(secret) == 32
    again = load_journal_key(home, create=True)
    assert again is not None and key_file.read_bytes() == secret
    text = path.read_bytes()
    assert secret not in text and secret.hex().encode() not in text
    read = _read(home, path)
    assert (read.verification, read.issues, len(read.records)) == ("verified", (), 6)


def test_a_key_readable_by_others_is_refused(home: Path) -> None:
    """A key file with group or other permission bits is refused with the chmod to run."""
    load_journal_key(home, create=True)
    (home / KEY_FILE).chmod(0o644)
    with pytest.raises(JournalError, match=r"readable by others; run: chmod 600"):
        load_journal_key(home, create=False)


def test_replay_does_not_create_a_key(home: Path) -> None:
    """Loading without create leaves a home without a key as it was."""
    assert load_journal_key(home, create=False) is None
    assert not (home / KEY_FILE).exists()


def test_an_altered_line_fails_its_mac_and_only_that_line_is_refused(home: Path) -> None:
    """Changing one byte of a signed line is reported at that line; the lines after it still verify."""
    path = _signed(home)
    lines = _lines(path)
    lines[2] = lines[2].replace(b'"command":"ls"', b'"command":"id"')
    path.write_bytes(b"".join(lines))
    read = _read(home, path)
    assert _codes(read) == [(3, "bad_mac")]
    assert len(read.records) == 5


def test_forged_approval_and_execution_lines_are_reported_by_line(home: Path) -> None:
    """Unsigned lines and lines with a made-up or copied MAC are refused, each by its line number."""
    path = _signed(home)
    lines = _lines(path)
    previous_chain = json.loads(lines[1])["chain"]
    forged_approval = ApprovalResolved(seq=50, session_id=SESSION, approval_id="ap1", outcome="approved")
    unsigned = forged_approval.model_dump_json().encode() + b"\n"
    started = ExecutionStarted(seq=51, session_id=SESSION, action_id="a0").model_dump_json().encode()
    copied_mac = started[:-1] + f',"chain":"{previous_chain}"}}'.encode() + b"\n"
    path.write_bytes(b"".join([*lines[:3], unsigned, copied_mac, *lines[3:]]))
    read = _read(home, path)
    assert _codes(read) == [(4, "unsigned"), (5, "bad_mac")]
    assert not any(isinstance(event, ApprovalResolved | ExecutionStarted) for event in read.events)


def test_a_deleted_line_breaks_the_chain_at_the_next_line(home: Path) -> None:
    """Removing a record in the middle is reported where the chain breaks."""
    path = _signed(home)
    lines = _lines(path)
    del lines[2]
    path.write_bytes(b"".join(lines))
    read = _read(home, path)
    assert _codes(read) == [(3, "chain_broken")]
    assert "deleted, reordered or copied in" in read.issues[0].message


def test_reordered_lines_are_reported(home: Path) -> None:
    """Swapping two records breaks the chain at both and at the record after them."""
    path = _signed(home)
    lines = _lines(path)
    lines[2], lines[3] = lines[3], lines[2]
    path.write_bytes(b"".join(lines))
    assert _codes(_read(home, path)) == [(3, "chain_broken"), (4, "chain_broken"), (5, "chain_broken")]


def test_records_cut_from_the_end_are_reported_against_the_sealed_head(home: Path) -> None:
    """Truncating whole lines at the end leaves a valid-looking journal that no longer reaches its head."""
    path = _signed(home)
    lines = _lines(path)
    path.write_bytes(b"".join(lines[:-2]))
    read = _read(home, path)
    assert _codes(read) == [(5, "head_mismatch")]
    assert "reaches seq 4 but its sealed head records seq 6" in read.issues[0].message


def test_a_missing_or_forged_head_is_reported(home: Path) -> None:
    """Removing the head, or writing one without the key, is reported at the end."""
    path = _signed(home)
    head = head_path(path)
    original = head.read_bytes()
    head.write_bytes(original.replace(b'"seq": 6', b'"seq": 4'))
    assert _codes(_read(home, path)) == [(7, "head_mismatch")]
    head.unlink()
    assert _codes(_read(home, path)) == [(7, "head_missing")]


def test_stripped_signatures_under_a_head_this_home_sealed_fail_verification(home: Path) -> None:
    """Removing every line's signature (or naming another key) does not make a journal this home sealed read as a
    foreign, unverified one: its head says who wrote it, so every line is checked and fails."""
    path = _signed(home)
    stripped = [json.loads(line) for line in _lines(path)]
    for line in stripped:
        line.pop("chain", None)
    path.write_bytes(b"".join(json.dumps(line).encode() + b"\n" for line in stripped))
    read = _read(home, path)
    assert read.verification == "verified" and read.records == () and read.failed_authentication >= 6, read.note


def test_a_journal_read_through_a_link_finds_its_head(home: Path, tmp_path: Path) -> None:
    path = _signed(home)
    link = tmp_path / "link.ndjson"
    link.symlink_to(path)
    read = _read(home, link)
    assert (read.verification, read.issues) == ("verified", ())


def test_strict_mode_raises_at_the_first_forged_line(home: Path) -> None:
    """Strict reads stop at a forged line with its number."""
    path = _signed(home)
    with path.open("ab") as raw:
        raw.write(decision("a0", "allow").model_copy(update={"seq": 90}).model_dump_json().encode() + b"\n")
    key = load_journal_key(home, create=False)
    with pytest.raises(JournalCorrupt, match=r"^journal line 7 carries no MAC"):
        read_journal_file(path, settings=JournalSettings(), mode="strict", key=key)


def test_another_homes_journal_is_read_unverified_and_says_so(tmp_path: Path) -> None:
    """A journal signed by another home's key (or read with no key) is read, explicitly unverified."""
    one, two = tmp_path / "one", tmp_path / "two"
    path = _signed(one)
    load_journal_key(two, create=True)
    foreign = _read(two, path)
    assert foreign.verification == "unverified" and foreign.issues == () and len(foreign.records) == 6
    assert "no line is signed by this home's key" in foreign.note and "UNVERIFIED" in foreign.note
    keyless = read_journal_file(path, settings=JournalSettings())
    assert keyless.verification == "unverified" and "no journal key" in keyless.note


def test_a_writer_never_chains_to_a_forged_line(home: Path) -> None:
    """Events appended after a forged line chain to the last authentic line, so only the forgery is reported."""
    path = _signed(home)
    with path.open("ab") as raw:
        raw.write(decision("a0", "allow").model_copy(update={"seq": 7}).model_dump_json().encode() + b"\n")
    key = load_journal_key(home, create=False)
    with JournalWriter(path, session_id=SESSION, settings=SETTINGS, key=key) as journal:
        journal.emit(prepared("later", "ls"))
    assert _codes(_read(home, path)) == [(7, "unsigned")]


def test_a_writer_cut_mid_line_leaves_one_refused_line_and_an_unbroken_chain(home: Path) -> None:
    """A partial last line (a killed writer) is ended by the next writer; the chain continues past it."""
    path = _signed(home)
    with path.open("ab") as raw:
        raw.write(b'{"v":1,"seq":7,"ts":1')
    key = load_journal_key(home, create=False)
    with JournalWriter(path, session_id=SESSION, settings=SETTINGS, key=key) as journal:
        journal.emit(prepared("later", "ls"))
    read = _read(home, path)
    assert _codes(read) == [(7, "unsigned")]
    assert getattr(read.events[-1], "action_id", None) == "later"


def test_a_stream_without_the_head_is_verified_line_by_line(home: Path) -> None:
    """read_journal on a stream checks MACs and links even without the head file."""
    path = _signed(home)
    key = load_journal_key(home, create=False)
    with path.open("rb") as stream:
        read = read_journal(stream, settings=JournalSettings(), key=key)
    assert (read.verification, read.issues) == ("verified", ())
    assert head_path(path).exists()


def test_a_stream_is_read_no_further_than_max_file_bytes() -> None:
    """Past journal.max_file_bytes the reader stops and reports the rest as not read, whatever the stream holds."""
    event = prepared("a1", "ls" + " " * 400)
    lines = [
        event.model_copy(update={"seq": n, "session_id": SESSION, "event_id": f"e{n}"}).model_dump_json().encode()
        + b"\n"
        for n in range(1, 5000)
    ]
    data = b"".join(lines)
    assert len(data) > 2 * 1024 * 1024
    settings = JournalSettings.model_validate({"max_file_bytes": "1m"})
    read = read_journal(io.BytesIO(data), settings=settings)
    assert read.issues[-1].code == "too_large"
    assert "larger than journal.max_file_bytes (1048576)" in read.issues[-1].message
    assert sum(len(raw) for raw in lines[: len(read.records)]) <= 1024 * 1024 < len(data)
    assert [issue.code for issue in read.issues[:-1]] in ([], ["truncated"])


def test_the_end_of_a_journal_is_reported_past_max_issues(home: Path) -> None:
    """A cut-off head is listed even when the lines before it used up journal.max_issues, and the note counts
    every line that failed authentication, listed or not."""
    path = _signed(home)
    with path.open("ab") as raw:
        raw.write(b"\n\n\n")
    head_path(path).unlink()
    read = read_journal_file(path, settings=JournalSettings(max_issues=1), key=load_journal_key(home, create=False))
    assert _codes(read) == [(7, "unsigned"), (10, "head_missing")]
    assert read.issues_omitted == 2
    assert "4 line(s) failed authentication" in read.note


def test_bytes_added_without_a_newline_are_not_called_a_whole_journal(home: Path) -> None:
    """An unterminated last line (a writer killed mid-line, or bytes appended by hand) is refused, and the verified
    note says a line was refused instead of only that the chain is whole."""
    path = _signed(home)
    with path.open("ab") as raw:
        raw.write(b"garbage")
    read = _read(home, path)
    assert read.verification == "verified" and len(read.records) == 6
    assert [issue.code for issue in read.issues] == ["truncated"], read.issues
    assert "1 line(s) that are not records were refused" in read.note, read.note
