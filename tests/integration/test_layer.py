"""Batched receive on a process's own channel: same messages, same order, fewer trips."""

import asyncio
from typing import Any

import redis
import redis.asyncio

from messenger_realtime.transport.layer import RECEIVE_BATCH
from tests.support.helpers import layer
from tests.support.runtime import PrivateRedis, run


def calls(url: str, command: str) -> int:
    stats = redis.Redis.from_url(url).info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


def test_a_backlog_is_received_whole_in_order_in_batches(private_redis: PrivateRedis) -> None:
    url = private_redis.url
    count = 3 * RECEIVE_BATCH

    async def scenario() -> dict[str, list[int]]:
        sender, receiver = layer(url), layer(url)
        first, second = await receiver.new_channel(), await receiver.new_channel()
        for n in range(count):  # queued before anyone receives: a backlog
            await sender.send(first if n % 2 else second, {"type": "x", "n": n})
        got: dict[str, list[int]] = {first: [], second: []}
        for channel in (first, second):
            for _ in range(count // 2):
                message = await asyncio.wait_for(receiver.receive(channel), 10)
                got[channel].append(message["n"])
        return got

    before = calls(url, "bzpopmin")
    got = run(scenario())
    assert list(got.values()) == [list(range(1, 300, 2)), list(range(0, 300, 2))]
    # channels-redis' own receive pops one message per BZPOPMIN: 300 of them here.
    assert calls(url, "bzpopmin") - before < 5


def test_an_idle_channel_blocks_until_a_message_arrives(private_redis: PrivateRedis) -> None:
    async def scenario() -> Any:
        sender, receiver = layer(private_redis.url), layer(private_redis.url)
        channel = await receiver.new_channel()
        waiting = asyncio.create_task(receiver.receive(channel))
        admin = redis.asyncio.Redis.from_url(private_redis.url)
        for _ in range(1000):  # until Redis reports the receive parked in BZPOPMIN
            if (await admin.info("clients"))["blocked_clients"] >= 1:
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the receive never blocked in Redis")
        await admin.aclose()
        assert not waiting.done()
        await sender.send(channel, {"type": "x", "n": 1})
        return await asyncio.wait_for(waiting, 10)

    assert run(scenario())["n"] == 1


def test_messages_left_in_the_backup_by_an_interrupted_receive_come_first(
    private_redis: PrivateRedis,
) -> None:
    """A receive cancelled after its pop leaves the messages in the backup key: the next
    receive puts them back in front instead of losing them."""

    async def scenario() -> list[int]:
        sender, receiver = layer(private_redis.url), layer(private_redis.url)
        channel = await receiver.new_channel()
        for n in range(3):
            await sender.send(channel, {"type": "x", "n": n})
        key = receiver.prefix + receiver.non_local_name(channel)
        connection = receiver.connection(0)
        # What an interrupted pop leaves behind: the first two messages moved to the backup.
        interrupted = await connection.zpopmin(key, 2)
        await connection.zadd(receiver._backup_channel_name(key), dict(interrupted))
        return [(await asyncio.wait_for(receiver.receive(channel), 10))["n"] for _ in range(3)]

    assert run(scenario()) == [0, 1, 2]
