"""The openai provider against a real chat-completions server on 127.0.0.1: answers, and every failure closed."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
from starlette.responses import Response

from executor.config import JudgeSettings, load_settings
from executor.errors import ConfigError, JudgeError
from executor.gate.decision import GATE_TABLE
from executor.gate.judge import OpenAIJudge, api_key_from, open_judge
from executor.gate.judge.openai import UNTRUSTED_NOTICE
from executor.models import JudgmentRequest
from executor.testing.chat_server import completion, open_chat_server
from executor.testing.fake_judge import gate_answers

REQUEST = JudgmentRequest(
    table=GATE_TABLE, material={"action": {"kind": "bash", "command": "ls"}, "sandbox_data": {}}, session_id="s1"
)


async def _answers(_body: dict[str, Any]) -> Response:
    return completion(json.dumps(gate_answers(destructive=2)))


def _settings(base_url: str, **fields: object) -> JudgeSettings:
    return JudgeSettings.model_validate({"provider": "openai", "base_url": base_url, "model": "m1", **fields})


async def test_valid_answers_come_back_validated_and_the_key_only_in_the_header() -> None:
    """The judge posts the table and the quoted material, sends the key as a bearer token, and validates."""
    async with (
        open_chat_server(_answers) as server,
        OpenAIJudge(_settings(server.base_url), api_key="sk-secret-1") as judge,
    ):
        answers = await judge.judge(REQUEST)
        assert answers["destructive"] == 2
        assert server.authorizations == ["Bearer sk-secret-1"]
        payload = server.user_payload()
        assert payload["notice"] == UNTRUSTED_NOTICE
        assert [q["id"] for q in payload["questions"]] == [q.id for q in GATE_TABLE.questions]
        assert server.requests[0]["model"] == "m1"
        assert "sk-secret-1" not in repr(judge)
        assert judge.calls_used("s1") == 1


async def test_a_fenced_json_answer_is_accepted() -> None:
    """A reply inside a ```json fence still parses."""

    async def fenced(_body: dict[str, Any]) -> Response:
        return completion("```json\n" + json.dumps(gate_answers()) + "\n```")

    async with open_chat_server(fenced) as server, OpenAIJudge(_settings(server.base_url)) as judge:
        assert (await judge.judge(REQUEST))["destructive"] == 0


def _slow(delay: float) -> Any:
    async def reply(_body: dict[str, Any]) -> Response:
        await trio.sleep(delay)
        return completion(json.dumps(gate_answers()))

    return reply


def _fixed(content: str | None = None, *, status: int = 200, raw: str | None = None) -> Any:
    async def reply(_body: dict[str, Any]) -> Response:
        if raw is not None:
            return Response(raw, status_code=status, media_type="application/json")
        return completion(content or "") if status == 200 else Response("no", status_code=status)

    return reply


@pytest.mark.parametrize(
    ("reply", "fields", "message"),
    [
        (_slow(5.0), {"timeout_s": 0.3}, "did not answer within 0.3s"),
        (_fixed("Sure! The action is safe: ALLOW."), {}, "non-JSON"),
        (_fixed(json.dumps(gate_answers()) + " " * 4000), {"max_response_bytes": 1024}, "max_response_bytes"),
        (_fixed(json.dumps({"destructive": 0})), {}, "unanswered"),
        (_fixed(json.dumps(gate_answers(destructive="none"))), {}, "integer level"),
        (_fixed(json.dumps(gate_answers(verdict="ALLOW"))), {}, "does not ask"),
        (_fixed('{"destructive": 0, "destructive": 3}'), {}, "twice"),
        (_fixed("[1, 2]"), {}, "not an object"),
        (_fixed(status=500), {}, "HTTP 500"),
        (_fixed(raw='{"no": "choices"}'), {}, "did not answer a chat completion"),
    ],
)
async def test_every_provider_failure_is_a_judge_error(reply: Any, fields: dict[str, object], message: str) -> None:
    """Timeout, non-JSON, oversized, schema-breaking, contradictory, HTTP and envelope failures all raise."""
    with trio.fail_after(10):
        async with open_chat_server(reply) as server, OpenAIJudge(_settings(server.base_url, **fields)) as judge:
            with pytest.raises(JudgeError, match=message):
                await judge.judge(REQUEST)


async def test_an_unreachable_endpoint_is_a_judge_error_without_the_key() -> None:
    """A refused connection fails closed and the message carries no secret."""
    async with OpenAIJudge(_settings("http://127.0.0.1:9/v1"), api_key="sk-secret-2") as judge:
        with pytest.raises(JudgeError, match="ConnectError") as caught:
            await judge.judge(REQUEST)
        assert "sk-secret-2" not in str(caught.value)


async def test_the_call_budget_is_per_session_and_spent_calls_fail_closed() -> None:
    """With call_budget=2 the third call of a session fails without reaching the server; another session may call."""
    async with open_chat_server(_answers) as server, OpenAIJudge(_settings(server.base_url, call_budget=2)) as judge:
        await judge.judge(REQUEST)
        await judge.judge(REQUEST)
        with pytest.raises(JudgeError, match="used its 2 judge calls"):
            await judge.judge(REQUEST)
        assert len(server.requests) == 2
        await judge.judge(REQUEST.model_copy(update={"session_id": "s2"}))
        assert len(server.requests) == 3


async def test_an_oversized_request_is_never_sent() -> None:
    """Material over max_request_bytes fails closed without a call or a budget charge."""
    big = REQUEST.model_copy(update={"material": {"sandbox_data": {"out": "x" * 5000}}})
    async with (
        open_chat_server(_answers) as server,
        OpenAIJudge(_settings(server.base_url, max_request_bytes=2048)) as judge,
    ):
        with pytest.raises(JudgeError, match="max_request_bytes"):
            await judge.judge(big)
        assert server.requests == []
        assert judge.calls_used("s1") == 0


async def test_open_judge_builds_the_configured_provider() -> None:
    """rules by default; openai with the key read from the named variable of the given environment."""
    settings = JudgeSettings(provider="openai", api_key_env="MY_JUDGE_KEY")
    assert api_key_from(settings, {"MY_JUDGE_KEY": "k"}) == "k"
    assert api_key_from(settings, {}) is None
    async with open_judge(JudgeSettings()) as rules:
        assert rules.name == "rules"
    async with open_judge(settings, api_key="k") as judge:
        assert judge.name == "openai:gpt-4o-mini"


def test_max_request_bytes_default_and_rejection() -> None:
    """The new setting defaults to 128 KiB and refuses values below 1 KiB at load time."""
    assert load_settings().gate.judge.max_request_bytes == 131_072
    with pytest.raises(ConfigError, match=r"gate\.judge\.max_request_bytes"):
        load_settings(overrides={"gate": {"judge": {"max_request_bytes": 10}}})
