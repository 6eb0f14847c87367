"""The pipelined push (backplane/pipeline.py) copies private parts of channels-redis 4.3.0:
its group key (`_group_key`), its channel keys and message format
(`_map_channel_keys_to_connection`, `non_local_name`, `prefix`) and the per-channel rule of
its `group_send` Lua script (drop expired messages, add unless at capacity, refresh the
key's expiry). These tests fail when the installed channels-redis no longer behaves as
what was copied, on a real Redis and with the stock layer, not only by its version."""

import asyncio
import importlib.metadata
import uuid
from typing import Any

import redis
from channels_redis.core import RedisChannelLayer

from messenger_realtime.backplane.pipeline import ScoreClock, group_send_many
from tests.support.runtime import run

COPIED_FROM = "4.3.0"  # requirements.txt pins it; a new version needs this file re-checked


def stock(redis_url: str, capacity: int = 100) -> RedisChannelLayer:
    """channels-redis' own layer, with a prefix of this test's."""
    return RedisChannelLayer(
        hosts=[redis_url], prefix=f"copy-{uuid.uuid4().hex[:8]}", capacity=capacity
    )


def test_the_installed_channels_redis_is_the_version_copied() -> None:
    assert importlib.metadata.version("channels-redis") == COPIED_FROM


def test_its_group_key_holds_the_members_group_add_writes(redis_url: str) -> None:
    layer, group, channel = stock(redis_url), f"g{uuid.uuid4().hex}", f"test.{uuid.uuid4().hex}"
    run(layer.group_add(group, channel))
    store = redis.Redis.from_url(redis_url)
    assert store.zscore(layer._group_key(group), channel) is not None


def test_a_pipelined_message_is_what_its_own_receive_reads_in_order(redis_url: str) -> None:
    layer, group, channel = stock(redis_url), f"g{uuid.uuid4().hex}", f"test.{uuid.uuid4().hex}"

    async def scenario() -> list[Any]:
        await layer.group_add(group, channel)
        clock = ScoreClock()
        await group_send_many(layer, [(group, {"type": "x.event", "n": 1})], clock)
        await layer.group_send(group, {"type": "x.event", "n": 2})  # its own path
        await group_send_many(layer, [(group, {"type": "x.event", "n": 3, "body": "é"})], clock)
        return [await asyncio.wait_for(layer.receive(channel), 10) for _ in range(3)]

    got = run(scenario())
    assert got == [
        {"type": "x.event", "n": 1},
        {"type": "x.event", "n": 2},
        {"type": "x.event", "n": 3, "body": "é"},
    ]


def test_at_capacity_both_paths_drop_and_both_refresh_the_channels_expiry(
    redis_url: str,
) -> None:
    layer, group, channel = stock(redis_url, 2), f"g{uuid.uuid4().hex}", f"test.{uuid.uuid4().hex}"
    store = redis.Redis.from_url(redis_url)
    key = layer.prefix + channel  # where channels-redis keeps a plain channel's messages

    async def scenario() -> int:
        await layer.group_add(group, channel)
        for n in range(3):  # its own group_send: the third is dropped, silently
            await layer.group_send(group, {"type": "x.event", "n": n})
        assert store.zcard(key) == 2
        store.expire(key, 5)
        sent = await group_send_many(layer, [(group, {"type": "x.event", "n": 9})], ScoreClock())
        return sent.lost

    assert run(scenario()) == 1  # dropped as its own would, and counted
    assert store.zcard(key) == 2
    assert 0 < store.ttl(key) <= 5  # a dropped message does not refresh it ...

    async def drain_and_send() -> None:
        await layer.receive(channel)
        await group_send_many(layer, [(group, {"type": "x.event", "n": 10})], ScoreClock())

    run(drain_and_send())
    assert store.zcard(key) == 2
    assert 5 < store.ttl(key) <= layer.expiry  # ... an added one does, as its own script
