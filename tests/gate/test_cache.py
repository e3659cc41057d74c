"""The answer cache: hits cost no call, stale entries fall through, concurrent requests share one call."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from executor.config import CacheSettings, GateSettings, load_settings
from executor.errors import ConfigError
from executor.gate.cache import AnswerCache, run_judgment
from executor.gate.decision import GATE_TABLE
from executor.gate.gate import Gate
from executor.gate.policy import Policy
from executor.models import JudgmentRequest, Question, QuestionTable
from executor.testing.actions import bash
from executor.testing.fake_judge import FakeJudge, gate_answers

REQUEST = JudgmentRequest(table=GATE_TABLE, material={"action": {"command": "make"}}, session_id="s1")


async def test_a_hit_makes_no_provider_call_and_records_its_provenance() -> None:
    """The second identical judgment comes from the cache with cache_hit and cached_from_judgment_id."""
    judge = FakeJudge(gate_answers(destructive=1))
    cache = AnswerCache(8)
    first = await run_judgment(judge, REQUEST, cache=cache)
    second = await run_judgment(judge, REQUEST.model_copy(update={"session_id": "s2"}), cache=cache)
    assert len(judge.calls) == 1
    assert (first.cache_hit, first.cached_from_judgment_id) == (False, None)
    assert (second.cache_hit, second.cached_from_judgment_id) == (True, first.judgment_id)
    assert second.answers == first.answers and second.judgment_id != first.judgment_id


async def test_failures_are_not_cached() -> None:
    """A failed judgment is recorded with its error and asked again next time."""
    judge = FakeJudge(gate_answers(), error="boom")
    cache = AnswerCache(8)
    first = await run_judgment(judge, REQUEST, cache=cache)
    await run_judgment(judge, REQUEST, cache=cache)
    assert first.error == "boom" and first.answers == {}
    assert len(judge.calls) == 2 and len(cache) == 0


async def test_a_stale_entry_falls_through_to_a_fresh_call() -> None:
    """An entry that no longer fits the current table (new question or new version) is replaced, not an error."""
    judge = FakeJudge(lambda request: {q.id: (0 if q.answer == "level" else False) for q in request.table.questions})
    cache = AnswerCache(8)
    await run_judgment(judge, REQUEST, cache=cache)
    grown = GATE_TABLE.model_copy(
        update={"questions": (*GATE_TABLE.questions, Question(id="new", text="?", answer="bool"))}
    )
    record = await run_judgment(judge, REQUEST.model_copy(update={"table": grown}), cache=cache)
    assert record.error is None and record.cache_hit is False and "new" in record.answers
    bumped = GATE_TABLE.model_copy(update={"version": 2})
    record = await run_judgment(judge, REQUEST.model_copy(update={"table": bumped}), cache=cache)
    assert record.error is None and record.cache_hit is False
    assert len(judge.calls) == 3 and cache.stale == 2


async def test_concurrent_identical_requests_share_one_call() -> None:
    """Two identical judgments in flight at once make one provider call."""
    release = trio.Event()
    judge = FakeJudge(gate_answers(), gate=release)
    cache = AnswerCache(8)
    records = []

    async def ask() -> None:
        records.append(await run_judgment(judge, REQUEST, cache=cache))

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask)
            nursery.start_soon(ask)
            await trio.testing.wait_all_tasks_blocked()
            release.set()
    assert len(judge.calls) == 1
    assert sorted(record.cache_hit for record in records) == [False, True]


async def test_a_cancelled_leader_does_not_fail_its_waiter() -> None:
    """When the caller holding the in-flight call is cancelled, the waiter makes the call itself."""
    release = trio.Event()
    judge = FakeJudge(gate_answers(), gate=release)
    cache = AnswerCache(8)
    result = []
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            leader = trio.CancelScope()

            async def lead() -> None:
                with leader:
                    await run_judgment(judge, REQUEST, cache=cache)

            async def wait() -> None:
                result.append(await run_judgment(judge, REQUEST, cache=cache))

            nursery.start_soon(lead)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(wait)
            await trio.testing.wait_all_tasks_blocked()
            leader.cancel()
            await trio.testing.wait_all_tasks_blocked()
            release.set()
    assert result[0].error is None and len(judge.calls) == 2


async def test_the_cache_is_bounded_lru() -> None:
    """Past max_entries the least recently used entry is dropped."""
    judge = FakeJudge(gate_answers())
    cache = AnswerCache(2)
    requests = [REQUEST.model_copy(update={"material": {"n": n}}) for n in range(3)]
    for request in requests:
        await run_judgment(judge, request, cache=cache)
    assert len(cache) == 2
    await run_judgment(judge, requests[0], cache=cache)
    assert len(judge.calls) == 4


async def test_settings_disable_or_size_the_shared_cache(default_policy: Policy) -> None:
    """cache.enabled=false means every judgment calls; the default shares one cache of max_entries."""
    judge = FakeJudge(gate_answers(), name="llm")
    off = Gate(GateSettings(cache=CacheSettings(enabled=False)), policy=default_policy, judge=judge)
    assert off.cache is None
    await off.evaluate(bash("make"), session_id="s1")
    await off.evaluate(bash("make"), session_id="s1")
    assert len(judge.calls) == 2
    on = Gate(GateSettings(), policy=default_policy, judge=judge)
    assert on.cache is not None and on.cache.max_entries == 1024
    replaced = AnswerCache(3)
    assert Gate(GateSettings(), policy=default_policy, judge=judge, cache=replaced).cache is replaced
    assert Gate(GateSettings(), policy=default_policy, judge=judge, cache=None).cache is None


def test_cache_settings_reject_bad_values() -> None:
    """max_entries below 1 is refused at load time, naming the field."""
    with pytest.raises(ConfigError, match=r"gate\.cache\.max_entries"):
        load_settings(overrides={"gate": {"cache": {"max_entries": 0}}})
    with pytest.raises(ValueError, match="at least one entry"):
        AnswerCache(0)


def test_table_is_not_part_of_the_key() -> None:
    """Two tables of one reflex share the key, which is what lets a stale entry be found and re-validated."""
    from executor.gate.cache import cache_key

    other = QuestionTable(reflex="gate", version=9, questions=())
    assert cache_key("x", REQUEST) == cache_key("x", REQUEST.model_copy(update={"table": other}))
    assert cache_key("x", REQUEST) != cache_key("y", REQUEST)
