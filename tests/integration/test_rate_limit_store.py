"""The rate limiter's store: a sliding log per user in Redis, refuses past the limit
over every window-long span, and lets requests through (logged) when Redis cannot be
reached."""

import logging
import time
import uuid
from collections.abc import Coroutine
from typing import Any

import pytest
import redis

from messenger_realtime.conf.declared import validate
from messenger_realtime.conf.settings import load_hub_options
from messenger_realtime.hub import ratelimit
from tests.support.runtime import run


async def counted(check: Coroutine[Any, Any, ratelimit.Refusal | None]) -> Any:
    """The check's verdict, with the loop's Redis clients closed before the loop ends."""
    try:
        return await check
    finally:
        await ratelimit.close_clients()


def test_a_user_is_refused_past_the_limit_and_others_are_not(redis_url: str) -> None:
    options = load_hub_options(rate_limit_writes=2, rate_limit_redis_url=redis_url)
    user, other = uuid.uuid4(), uuid.uuid4()
    verdicts = [ratelimit.check(ratelimit.WRITES, user, options) for _ in range(3)]
    assert verdicts[:2] == [None, None]
    refusal = verdicts[2]
    assert refusal is not None and refusal.limit == 2 and 1 <= refusal.retry_after <= 60
    assert ratelimit.check(ratelimit.WRITES, other, options) is None
    # The async path counts in the same place.
    assert run(counted(ratelimit.acheck(ratelimit.WRITES, user, options))) is not None


def test_the_limit_holds_over_every_window_long_span(redis_url: str) -> None:
    # A fixed window lets `limit` through just before its boundary and `limit` more just
    # after it (a CI run once saw the sixth of five writes through). Keep asking for
    # three windows; the limit+1-th request let through after any request must come a
    # full window later. Each request's Redis time lies between its send and its answer,
    # so answer[i + limit] - sent[i] >= window is what the limiter guarantees.
    window, limit = 0.25, 3
    options = load_hub_options(
        rate_limit_writes=limit, rate_limit_window=window, rate_limit_redis_url=redis_url
    )
    user = uuid.uuid4()
    through: list[tuple[float, float]] = []
    refused = 0
    end = time.monotonic() + 3 * window
    while time.monotonic() < end:
        sent = time.monotonic()
        verdict = ratelimit.check(ratelimit.WRITES, user, options)
        if verdict is None:
            through.append((sent, time.monotonic()))
        else:
            refused += 1
            assert verdict.retry_after == 1  # rounded up to whole seconds
    spans = [through[i + limit][1] - through[i][0] for i in range(len(through) - limit)]
    assert len(through) >= 2 * limit and refused > 0  # windows ended and freed room
    assert min(spans) >= window


def test_a_refused_request_takes_no_room(redis_url: str) -> None:
    options = load_hub_options(rate_limit_invocations=2, rate_limit_redis_url=redis_url)
    user = uuid.uuid4()
    for _ in range(5):
        ratelimit.check(ratelimit.INVOCATIONS, user, options)
    client = redis.Redis.from_url(redis_url)
    try:
        key = ratelimit.KEY.format(scope=ratelimit.INVOCATIONS, user=user)
        assert client.zcard(key) == 2  # what was let through, no more
        assert 0 < client.pttl(key) <= 60_000  # gone a window after the last
    finally:
        client.close()


def test_no_limit_or_no_store_counts_nothing(redis_url: str) -> None:
    user = uuid.uuid4()
    off = load_hub_options(rate_limit_writes=0, rate_limit_redis_url=redis_url)
    assert all(ratelimit.check(ratelimit.WRITES, user, off) is None for _ in range(5))
    unstored = load_hub_options(rate_limit_writes=1, rate_limit_redis_url="")
    assert all(ratelimit.check(ratelimit.WRITES, user, unstored) is None for _ in range(5))


def test_an_unreachable_redis_lets_requests_through_and_says_so(
    dead_redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    options = load_hub_options(rate_limit_writes=1, rate_limit_redis_url=dead_redis_url)
    with caplog.at_level(logging.WARNING, logger="messenger_realtime.hub.ratelimit"):
        assert ratelimit.check(ratelimit.WRITES, uuid.uuid4(), options) is None
        assert run(counted(ratelimit.acheck(ratelimit.INVOCATIONS, uuid.uuid4(), options))) is None
    said = "rate limit not counted (Redis unreachable): let through "  # then its fields
    assert sum(r.getMessage().startswith(said) for r in caplog.records) == 2


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("RATE_LIMIT_WRITES", -1),
        ("RATE_LIMIT_FLOOD", 0),
        ("RATE_LIMIT_REDIS_URL", "http://x"),
        ("RATE_LIMIT_WINDOW", 0.0),
    ],
)
def test_bad_rate_limit_settings_are_refused_naming_the_key(key: str, value: object) -> None:
    assert [k for _id, k, _problem in validate({key: value})] == [key]


def test_a_call_of_several_units_is_let_through_only_when_all_of_them_fit(
    redis_url: str,
) -> None:
    """A hub method's declared cost (hub/connection/methods/): a WatchPresence of 30
    users is 4 units, logged as 4 requests only if all 4 fit in the window."""
    options = load_hub_options(rate_limit_invocations=10, rate_limit_redis_url=redis_url)
    user = uuid.uuid4()

    async def calls() -> list[Any]:
        try:
            return [
                await ratelimit.acheck(ratelimit.INVOCATIONS, user, options, units)
                for units in (4, 4, 4, 2, 1)
            ]
        finally:
            await ratelimit.close_clients()

    verdicts = run(calls())
    assert [v is None for v in verdicts] == [True, True, False, True, False]
    client = redis.Redis.from_url(redis_url)
    with client:
        key = ratelimit.KEY.format(scope=ratelimit.INVOCATIONS, user=user)
        assert client.zcard(key) == 10  # the refused call logged nothing
