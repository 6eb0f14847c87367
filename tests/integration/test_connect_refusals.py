"""A user whose connects the rate limit refused is refused again by the process's memo
(hub/admission.py, Refusals) until the limit lets a connect through: no database read,
no round trip to Redis. A user whose flooding connections were closed went on
negotiating ~25 times a second, each a read on the thread the REST views share."""

import json
from typing import Any

import pytest
from prometheus_client import REGISTRY

from messenger_realtime.hub import admission, negotiate, ratelimit
from messenger_realtime.hub.process import HubProcess
from tests.support.factories import UserFactory
from tests.support.hub_helpers import token_for
from tests.support.runtime import PrivateRedis, run
from tests.support.settings import realtime

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("hub_thread_db"),
]


def limited() -> float:
    labels = {"scope": "connect"}
    return REGISTRY.get_sample_value("messenger_realtime_hub_rate_limited_total", labels) or 0.0


def negotiate_scope(token: str) -> dict[str, Any]:
    return {
        "type": "http",
        "method": "POST",
        "path": "/hubs/messenger/negotiate",
        "query_string": b"negotiateVersion=1",
        "headers": [(b"authorization", f"Bearer {token}".encode())],
    }


def test_a_refused_user_is_refused_again_without_a_read_or_a_round_trip(
    private_redis: PrivateRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, each of the five read the user's standing and ran the limit's script."""
    user, bystander = UserFactory(), UserFactory()
    reads: list[Any] = []
    identify = negotiate.identify_scope

    async def counted(scope: Any, options: Any, **kwargs: Any) -> Any:
        reads.append(scope)
        return await identify(scope, options, **kwargs)

    monkeypatch.setattr(negotiate, "identify_scope", counted)

    async def scenario() -> list[tuple[int, dict[str, Any]]]:
        hub = HubProcess()
        takes: list[Any] = []
        take_place = hub.take_place

        async def counted_take(*args: Any, **kwargs: Any) -> Any:
            takes.append(args)
            return await take_place(*args, **kwargs)

        hub.take_place = counted_take  # type: ignore[method-assign]
        answers = []
        try:
            for token in [token_for(user.id)] * 3:
                status, body, _ = await negotiate.answer(hub, negotiate_scope(token))
                answers.append((status, json.loads(body)))
            assert len(reads) == len(takes) == 3
            for _ in range(5):
                status, body, headers = await negotiate.answer(
                    hub, negotiate_scope(token_for(user.id))
                )
                answers.append((status, json.loads(body)))
                assert 1 <= int(dict(headers)[b"retry-after"]) <= 60
            assert len(reads) == len(takes) == 3  # none read the database or asked Redis
            # Another user is not held by it.
            status, body, _ = await negotiate.answer(hub, negotiate_scope(token_for(bystander.id)))
            answers.append((status, json.loads(body)))
            return answers
        finally:
            await ratelimit.close_clients()

    configured = {
        "RATE_LIMIT_REDIS_URL": private_redis.url,
        "RATE_LIMIT_CONNECTS": 2,
        "RATE_LIMIT_WINDOW": 60,
    }
    before = limited()
    with realtime(configured):
        answers = run(scenario())
    statuses = [status for status, _ in answers]
    assert statuses == [200, 200, 429, 429, 429, 429, 429, 429, 200]
    refusals = [body["error"] for status, body in answers if status == 429]
    assert all("rate limit exceeded: at most 2 per 60 s" in e for e in refusals), refusals
    assert len(reads) == 4
    assert limited() - before == 6  # the memo's refusals are counted as the limit's


def test_a_refusal_lapses_when_the_limit_lets_a_connect_through_and_the_memo_is_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    refusals = admission.Refusals()
    refusal = ratelimit.Refusal(limit=2, window=60, retry_after=7)
    refusals.hold("u", refusal, now=100.0)
    held = refusals.holding("u", 103.5)
    assert held is not None and held.retry_after == 4 and held.limit == 2
    assert refusals.holding("u", 107.0) is None and len(refusals) == 0
    monkeypatch.setattr(admission, "REFUSALS_KEPT", 3)
    for n in range(5):
        refusals.hold(f"user{n}", refusal, now=200.0 + n)
    assert len(refusals) == 3  # bounded: the oldest two went first
    assert [refusals.holding(f"user{n}", 205.0) is not None for n in range(5)] == [
        False, False, True, True, True,
    ]  # fmt: skip
