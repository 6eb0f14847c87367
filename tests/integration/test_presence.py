"""Presence's store, against a real redis-server of the test's own: who came online and
went offline as places are taken and given back, the sweep that finds the users of a
process that died, the state a watcher reads first, and last seen saved in batches."""

import asyncio
import time
import uuid
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any
from uuid import UUID

import pytest

from messenger_realtime.backplane.group_names import presence_group
from messenger_realtime.backplane.pipeline import ScoreClock
from messenger_realtime.conf.settings import HubOptions, load_hub_options
from messenger_realtime.hub import ratelimit, user_connections
from messenger_realtime.hub.presence import last_seen, sweep
from messenger_realtime.hub.presence.changes import PRESENCE_MESSAGE
from messenger_realtime.hub.presence.state import Presence, read_presence
from tests.support.helpers import end_layers, layer
from tests.support.runtime import PrivateRedis, await_until, run


@pytest.fixture
def options(private_redis: PrivateRedis) -> HubOptions:
    return load_hub_options(rate_limit_redis_url=private_redis.url, max_connections_per_user=2)


async def closing(coro: Any) -> Any:
    """Run `coro`, then close this loop's Redis clients (ratelimit's, per loop)."""
    try:
        return await coro
    finally:
        await ratelimit.close_clients()


def test_the_first_place_comes_online_and_the_last_given_back_goes_offline(
    options: HubOptions, private_redis: PrivateRedis
) -> None:
    user = uuid.uuid4()

    async def scenario() -> list[Any]:
        first = await user_connections.take(user, "a", options)
        second = await user_connections.take(user, "b", options)
        third = await user_connections.take(user, "c", options)  # past the cap of 2
        one_left = await user_connections.give_back(user, "a", options)
        none_left = await user_connections.give_back(user, "b", options)
        again = await user_connections.give_back(user, "b", options)  # given back twice
        return [first, second, third, one_left, none_left, again]

    before = time.time()
    first, second, third, one_left, none_left, again = run(closing(scenario()))
    assert (first, second, third) == (
        user_connections.Taken(True, True),
        user_connections.Taken(True, False),
        user_connections.Taken(False, False),
    )
    assert one_left is None and again is None
    assert none_left is not None and int(before) <= none_left <= time.time()
    client = private_redis.client()
    assert float(client.hget(user_connections.LAST_SEEN, str(user))) == none_left
    assert client.sismember(user_connections.UNSAVED, str(user))
    assert client.zscore(user_connections.LAPSES, str(user)) is None


def test_without_a_cap_places_are_still_taken_for_presence(private_redis: PrivateRedis) -> None:
    options = load_hub_options(rate_limit_redis_url=private_redis.url, max_connections_per_user=0)
    user = uuid.uuid4()

    async def scenario() -> list[user_connections.Taken]:
        return [await user_connections.take(user, str(n), options) for n in range(40)]

    taken = run(closing(scenario()))
    assert all(t.granted for t in taken) and [t.came_online for t in taken].count(True) == 1
    assert private_redis.client().zcard(user_connections.KEY.format(user=user)) == 40


def test_a_take_counts_the_connect_against_the_rate_limit_in_the_same_round_trip(
    private_redis: PrivateRedis,
) -> None:
    """A connect is counted (RATE_LIMIT_CONNECTS) as its place is taken, by one script:
    past the limit it is refused with the wait, and takes no place."""
    options = load_hub_options(
        rate_limit_redis_url=private_redis.url, max_connections_per_user=0, rate_limit_connects=2
    )
    user = uuid.uuid4()
    client = private_redis.client()
    run(closing(user_connections.take(uuid.uuid4(), "warm", options)))  # the script loaded
    client.config_resetstat()

    async def scenario() -> list[user_connections.Taken]:
        return [await user_connections.take(user, str(n), options) for n in range(3)]

    first, second, third = run(closing(scenario()))
    scripts = {k: int(v["calls"]) for k, v in client.info("commandstats").items() if "eval" in k}
    assert scripts == {"cmdstat_evalsha": 3}  # one round trip per connect, not two
    assert first.granted and second.granted and first.came_online
    assert not third.granted and third.limited is not None
    assert third.limited.limit == 2 and third.limited.retry_after >= 1
    places = client.zrange(user_connections.KEY.format(user=user), 0, -1)
    assert sorted(places) == [b"0", b"1"]


def test_a_sweep_finds_the_users_whose_places_lapsed_and_tells_their_watchers(
    options: HubOptions, private_redis: PrivateRedis, monkeypatch: Any
) -> None:
    """A process killed holding a user's only place: the place lapses LEASE after its
    last renewal, and a sweep announces the user offline to the group of their watchers,
    with the last renewal as last seen. A user with a place still held is left alone."""
    monkeypatch.setattr(user_connections, "LEASE", 0.3)
    monkeypatch.setattr(sweep, "LEASE", 0.3)
    gone, stays = uuid.uuid4(), uuid.uuid4()

    async def scenario() -> tuple[list[tuple[UUID, float]], dict[str, Any]]:
        watchers = layer(private_redis.url)
        channel = await watchers.new_channel()
        await watchers.group_add(presence_group(gone), channel)
        await user_connections.take(gone, "dead-process", options)
        await user_connections.take(stays, "dead-process-too", options)
        monkeypatch.setattr(user_connections, "LEASE", 60.0)
        await user_connections.take(stays, "live-process", options)  # a long place
        found: list[tuple[UUID, float]] = []

        async def swept() -> bool:
            found.extend(await sweep.sweep(watchers, options, ScoreClock()))
            return bool(found)

        deadline = time.monotonic() + 10
        while not await swept():  # the lease passes on the server's clock
            assert time.monotonic() < deadline, "no sweep found the lapsed place"
        told = await watchers.receive(channel)
        await end_layers(watchers)
        return found, told

    taken_at = time.time()
    found, told = run(closing(scenario()))
    assert [user for user, _ in found] == [gone]
    assert int(taken_at) - 1 <= found[0][1] <= time.time()
    assert told["type"] == PRESENCE_MESSAGE
    assert told["payload"] == {"userId": str(gone), "online": False, "lastSeen": found[0][1]}
    client = private_redis.client()
    assert client.zscore(user_connections.LAPSES, str(stays)) is not None
    assert client.zscore(user_connections.LAPSES, str(gone)) is None


def test_renewal_moves_a_users_lapse_so_the_sweep_leaves_them_online(
    options: HubOptions, private_redis: PrivateRedis, monkeypatch: Any
) -> None:
    monkeypatch.setattr(user_connections, "RENEW_EVERY", 0.05)
    user = uuid.uuid4()
    live = SimpleNamespace(connection_id="kept", user_id=user, options=options)

    async def scenario() -> tuple[float, float]:
        await user_connections.take(user, "kept", options)
        before = private_redis.client().zscore(user_connections.LAPSES, str(user))
        renewing = asyncio.ensure_future(user_connections.renew_forever(lambda: [live]))
        try:
            await await_until(
                lambda: private_redis.client().zscore(user_connections.LAPSES, str(user)) != before,
                timeout=5,
                what="the renewal's new lapse",
            )
        finally:
            renewing.cancel()
        return before, private_redis.client().zscore(user_connections.LAPSES, str(user))

    before, after = run(closing(scenario()))
    assert after > before


def test_a_watcher_reads_each_users_state_redis_first_then_the_hosts_store(
    options: HubOptions,
) -> None:
    online, offline, stored, unknown = (uuid.uuid4() for _ in range(4))
    asked_store: list[list[UUID]] = []

    async def from_store(users: list[UUID]) -> Mapping[UUID, float]:
        asked_store.append(sorted(users))
        return {stored: 1_700_000_000.0}

    async def scenario() -> dict[UUID, Presence]:
        await user_connections.take(online, "a", options)
        await user_connections.take(offline, "b", options)
        await user_connections.give_back(offline, "b", options)
        return await read_presence([online, offline, stored, unknown], options, from_store)

    found = run(closing(scenario()))
    assert found[online] == Presence(True, None)
    assert found[offline].online is False and found[offline].last_seen is not None
    assert found[stored] == Presence(False, 1_700_000_000.0)
    assert found[unknown] == Presence(False, None)
    assert asked_store == [sorted([stored, unknown])]


def test_last_seen_is_saved_in_batches_and_a_failed_batch_waits_for_the_next(
    options: HubOptions, private_redis: PrivateRedis
) -> None:
    users = [uuid.uuid4() for _ in range(3)]
    saved: list[dict[UUID, float]] = []
    failing = [True]

    async def record(seen: Mapping[UUID, float]) -> None:
        if failing[0]:
            failing[0] = False
            raise RuntimeError("the host's database is away")
        saved.append(dict(seen))

    async def scenario() -> tuple[int, int]:
        for user in users:
            await user_connections.take(user, "x", options)
            await user_connections.give_back(user, "x", options)
        with pytest.raises(RuntimeError):
            await last_seen.save(options, record)
        stored = await last_seen.save(options, record)
        return stored, await last_seen.save(options, record)

    stored, nothing_left = run(closing(scenario()))
    assert (stored, nothing_left) == (3, 0)
    assert set(saved[0]) == set(users)
    client = private_redis.client()
    assert saved[0] == {u: float(client.hget(user_connections.LAST_SEEN, str(u))) for u in users}
    assert client.scard(user_connections.UNSAVED) == 0


def test_an_unreachable_redis_never_stops_a_connect(dead_redis_url: str) -> None:
    options = load_hub_options(rate_limit_redis_url=dead_redis_url)
    user = uuid.uuid4()

    async def scenario() -> tuple[Any, Any]:
        return (
            await user_connections.take(user, "a", options),
            await user_connections.give_back(user, "a", options),
        )

    assert run(closing(scenario())) == (user_connections.Taken(True, False), None)
