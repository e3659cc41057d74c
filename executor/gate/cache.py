"""The answer cache, and :func:`run_judgment`, the one way every reflex asks a judge.

One bounded, in-memory, exact-answer cache (LRU) is shared by every reflex by default
(``gate.cache.enabled``, ``gate.cache.max_entries``); the API can pass another :class:`AnswerCache` or
None to disable it.

* An entry is keyed by the provider's cache scope, the reflex and the canonical material; the question
  table is deliberately *not* part of the key, so a changed table finds the old entry and re-validates it.
* Only successful judgments are stored.
* The cache is consulted before the provider is asked, hence before any budget check: a hit costs no call.
* On a hit the cached answers are re-validated against the *current* table (ids, types, and the table
  version); a stale or incompatible entry is dropped and the request falls through to a fresh call,
  never to a new failure.
* Concurrent identical requests share one in-flight call (a :class:`trio.Event`); if the leading caller is
  cancelled, a waiter makes the call itself.
* Records say where answers came from: ``cache_hit`` and ``cached_from_judgment_id``.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import trio

from executor.config import CacheSettings
from executor.errors import JudgeError
from executor.gate.judge.base import Judge, validate_answers
from executor.ids import new_judgment_id
from executor.models import Answer, JudgmentRecord, JudgmentRequest, QuestionTable, canonical_json

__all__ = ["AnswerCache", "CacheEntry", "cache_key", "run_judgment", "table_hash"]


@functools.lru_cache(maxsize=64)
def table_hash(table: QuestionTable) -> str:
    """Hex SHA-256 of the table's canonical JSON (remembered: a handful of frozen tables ask every judgment)."""
    return hashlib.sha256(canonical_json(table.model_dump(mode="json"))).hexdigest()


def cache_key(scope: str, request: JudgmentRequest) -> str:
    """The exact-answer key: provider scope, reflex and canonical material (not the table; see module doc)."""
    payload = {"scope": scope, "reflex": request.table.reflex, "material": request.material}
    return hashlib.sha256(canonical_json(payload)).hexdigest()


@dataclass(frozen=True)
class CacheEntry:
    """A successful judgment kept for reuse."""

    judgment_id: str
    table_version: int
    answers: dict[str, Answer]


@dataclass
class _Flight:
    done: trio.Event = field(default_factory=trio.Event)
    record: JudgmentRecord | None = None
    """The leader's record; None when the leader was cancelled (a waiter then calls itself)."""


class AnswerCache:
    """A bounded LRU of successful judgments plus the table of in-flight calls."""

    def __init__(self, max_entries: int = 1024) -> None:
        """Args:
        max_entries: entries kept before the least recently used is dropped (at least 1).
        """
        if max_entries < 1:
            raise ValueError("an answer cache holds at least one entry; pass None to disable caching")
        self.max_entries = max_entries
        self._entries: OrderedDict[str, CacheEntry] = OrderedDict()
        self._flights: dict[str, _Flight] = {}
        self.hits = 0
        self.misses = 0
        self.stale = 0

    @classmethod
    def from_settings(cls, settings: CacheSettings) -> AnswerCache | None:
        """The cache the settings ask for; None when ``enabled`` is false."""
        return cls(settings.max_entries) if settings.enabled else None

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Forget every entry (in-flight calls are unaffected)."""
        self._entries.clear()

    def lookup(self, key: str, table: QuestionTable) -> tuple[CacheEntry, dict[str, Answer]] | None:
        """A usable entry and its answers re-validated against ``table``; a stale entry is dropped."""
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
            return None
        answers = _revalidate(entry, table)
        if answers is None:
            self.stale += 1
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return entry, answers

    def store(self, key: str, entry: CacheEntry) -> None:
        """Keep ``entry`` (a successful judgment), dropping the least recently used past the bound."""
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)


def _revalidate(entry: CacheEntry, table: QuestionTable) -> dict[str, Answer] | None:
    if entry.table_version != table.version:
        return None
    try:
        return validate_answers(table, entry.answers)
    except JudgeError:
        return None


def _record(
    request: JudgmentRequest,
    judge: Judge,
    *,
    started: float,
    answers: dict[str, Answer] | None = None,
    error: str | None = None,
    cached_from: str | None = None,
    judgment_id: str | None = None,
) -> JudgmentRecord:
    return JudgmentRecord(
        judgment_id=judgment_id or new_judgment_id(),
        reflex=request.table.reflex,
        provider=judge.name,
        table=request.table,
        table_hash=table_hash(request.table),
        answers=answers or {},
        latency_ms=round((time.perf_counter() - started) * 1000, 3),
        cache_hit=cached_from is not None,
        cached_from_judgment_id=cached_from,
        error=error,
    )


async def _call(judge: Judge, request: JudgmentRequest, started: float) -> JudgmentRecord:
    try:
        answers = await judge.judge(request)
    except JudgeError as exc:
        return _record(request, judge, started=started, error=str(exc))
    except Exception as exc:
        # A provider bug is a failure like any other: recorded, and the caller fails closed.
        return _record(
            request, judge, started=started, error=f"judge {judge.name} crashed: {type(exc).__name__}: {exc}"
        )
    return _record(request, judge, started=started, answers=answers)


async def run_judgment(judge: Judge, request: JudgmentRequest, *, cache: AnswerCache | None) -> JudgmentRecord:
    """Judge ``request`` through ``cache``; never raises a judge failure (it is recorded in ``error``).

    A record with ``error`` set has empty answers: the caller must fail closed. Cancellation propagates.
    """
    started = time.perf_counter()
    if cache is None or not judge.cacheable:
        return await _call(judge, request, started)
    key = cache_key(judge.cache_scope, request)
    waited = False
    while True:
        found = cache.lookup(key, request.table)
        if found is not None:
            entry, answers = found
            return _record(request, judge, started=started, answers=answers, cached_from=entry.judgment_id)
        flight = cache._flights.get(key)
        if flight is None or waited:
            break
        await flight.done.wait()
        waited = True
        shared = flight.record
        if shared is None:
            waited = False  # the leader was cancelled; try again (possibly as the new leader)
            continue
        if shared.error is not None:
            return _record(request, judge, started=started, error=f"shared in-flight call failed: {shared.error}")
        # The leader's answers are in the cache now unless the tables differ: loop once more to re-validate.
    if key in cache._flights:
        # Someone else leads a call for an incompatible table; make our own, unshared.
        return _store(cache, key, await _call(judge, request, started))
    flight = _Flight()
    cache._flights[key] = flight
    try:
        record = await _call(judge, request, started)
        flight.record = _store(cache, key, record)
    finally:
        del cache._flights[key]
        flight.done.set()
    return record


def _store(cache: AnswerCache, key: str, record: JudgmentRecord) -> JudgmentRecord:
    if record.error is None:
        cache.store(key, CacheEntry(record.judgment_id, record.table.version, dict(record.answers)))
    return record
