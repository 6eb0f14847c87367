"""Batched receive on a process's own channel: same messages, same order, fewer trips;
and every drop is counted and told to the connections that lost the message."""

import asyncio
import uuid
from typing import Any

import pytest
import redis
import redis.asyncio
from prometheus_client import REGISTRY

from messenger_realtime.backplane import pipeline
from messenger_realtime.backplane.layer import OVERRUN_EVENT, POOL_SIZE, RECEIVE_BATCH
from messenger_realtime.backplane.publisher import ChannelLayerPublisher
from messenger_realtime.contracts.events import HubTarget, OutgoingEvent
from tests.support.helpers import end_layers, layer
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


def overruns() -> float:
    return REGISTRY.get_sample_value("messenger_realtime_channel_overruns_total") or 0.0


@pytest.mark.parametrize("path", ["pipelined", "group_send"])
def test_a_message_dropped_at_capacity_is_counted_per_connection_and_told_to_each(
    private_redis: PrivateRedis, path: str
) -> None:
    chat = uuid.uuid4()
    before = overruns()

    async def scenario() -> dict[str, list[Any]]:
        # The sender's capacity decides, as channels-redis' does.
        sender, receiver = layer(private_redis.url, capacity=3), layer(private_redis.url)
        first, second = await receiver.new_channel(), await receiver.new_channel()
        bystander = await receiver.new_channel()  # same process, another group
        for channel in (first, second):
            await receiver.group_add(f"chat.{chat}", channel)
        await sender.send(bystander, {"type": "x"})  # takes one of the three places
        events = [event(chat, n) for n in range(5)]
        if path == "pipelined":
            await ChannelLayerPublisher(sender).publish_many(events)
        else:
            for e in events:
                await sender.group_send(f"chat.{chat}", {"type": "y", "payload": e.payload})
        got: dict[str, list[Any]] = {}
        for channel in (first, second):
            got[channel] = [await asyncio.wait_for(receiver.receive(channel), 10) for _ in range(3)]
        got["bystander"] = [await asyncio.wait_for(receiver.receive(bystander), 10)]
        return got

    got = run(scenario())
    assert overruns() - before == 6  # three events lost, each for two connections
    for channel, messages in got.items():
        if channel == "bystander":
            assert messages == [{"type": "x"}]  # lost nothing, told nothing
            continue
        assert messages[0] == {"type": OVERRUN_EVENT}  # told before anything else
        assert [m["payload"]["seq"] for m in messages[1:]] == [0, 1]


def test_every_batch_reads_the_overrun_set_in_the_same_round_trip_as_its_pop(
    private_redis: PrivateRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """receive_batch (the hub's reader): the pop and the overrun set travel together in
    one round trip on every batch, so a drop recorded before a pop is told with that
    pop's batch, also when the queue is short and the set was read a moment ago."""
    from redis.asyncio.connection import AbstractConnection

    trips: list[int] = []
    send_packed = AbstractConnection.send_packed_command

    async def counted(self: Any, command: Any, check_health: bool = True) -> None:
        trips.append(1)  # one write to Redis: one round trip (a pipeline is one too)
        await send_packed(self, command, check_health)

    monkeypatch.setattr(AbstractConnection, "send_packed_command", counted)

    async def scenario() -> tuple[list[Any], int]:
        sender, receiver = layer(private_redis.url), layer(private_redis.url)
        process = f"specific.{receiver.client_prefix}!"
        await sender.send(process + "chat.a", {"type": "x", "n": 1})
        await receiver.receive_batch(process)  # the first batch (and the connection)
        # As the push script records a drop at a full queue (pipeline.py), then a message.
        admin = redis.asyncio.Redis.from_url(private_redis.url)
        await admin.sadd(f"asgi{process}" + pipeline.OVERRUN_SUFFIX, process + "chat.b")
        await admin.aclose()
        await sender.send(process + "chat.a", {"type": "x", "n": 2})
        before = len(trips)
        batch = await asyncio.wait_for(receiver.receive_batch(process), 10)
        return batch, len(trips) - before

    batch, round_trips = run(scenario())
    assert batch[0][1] == {"type": OVERRUN_EVENT}  # told first, with this very batch
    assert batch[0][0].endswith("!chat.b")
    assert [message.get("n") for _, message in batch[1:]] == [2]
    assert round_trips == 1


def event(chat: uuid.UUID, seq: int) -> OutgoingEvent:
    return OutgoingEvent(HubTarget.chat(chat), "message_received", {"seq": seq})


def test_a_connection_whose_own_buffer_overflows_gets_one_overrun_instead(
    private_redis: PrivateRedis,
) -> None:
    """channels-redis drops the oldest message of a local buffer at capacity, silently."""
    before = overruns()

    async def scenario() -> list[Any]:
        sender, receiver = layer(private_redis.url), layer(private_redis.url, capacity=3)
        slow, fast = await receiver.new_channel(), await receiver.new_channel()
        for n in range(5):  # slow's messages wait in its buffer while fast is served
            await sender.send(slow, {"type": "x", "n": n})
        await sender.send(fast, {"type": "x", "n": 99})
        assert (await asyncio.wait_for(receiver.receive(fast), 10))["n"] == 99
        return [await asyncio.wait_for(receiver.receive(slow), 10) for _ in range(2)]

    # Three held, the fourth overflows: those four go, the overrun takes their place.
    assert run(scenario()) == [{"type": OVERRUN_EVENT}, {"type": "x", "n": 4}]
    assert overruns() - before == 4


def test_an_undecodable_message_is_dropped_alone(private_redis: PrivateRedis) -> None:
    """One message nobody can decode (a serializer mismatch mid-deploy) must not fail
    every later receive of the process: it is logged and dropped, the rest arrive."""

    async def scenario() -> list[int]:
        sender, receiver = layer(private_redis.url), layer(private_redis.url)
        first, second = await receiver.new_channel(), await receiver.new_channel()
        await sender.send(first, {"type": "x", "n": 1})
        key = receiver.prefix + receiver.non_local_name(first)
        admin = redis.asyncio.Redis.from_url(private_redis.url)
        await admin.zadd(key, {b"not a serialized message": 10**10})  # after the first
        await admin.aclose()
        await sender.send(second, {"type": "x", "n": 2})
        got = [(await asyncio.wait_for(receiver.receive(first), 10))["n"]]
        got.append((await asyncio.wait_for(receiver.receive(second), 10))["n"])
        return got

    assert run(scenario()) == [1, 2]


def test_a_burst_of_commands_shares_a_bounded_set_of_connections(
    private_redis: PrivateRedis,
) -> None:
    """A reconnect storm joins groups concurrently: each command borrowed a connection of
    its own, and channels-redis' pool (no maximum) kept every one it ever opened (121
    connections from one Daphne after a soak's flapping link). Past POOL_SIZE a command
    waits for a connection (within NETWORK_TIMEOUT) instead of opening one."""
    burst = 3 * POOL_SIZE

    async def scenario() -> tuple[int, int]:
        used = layer(private_redis.url)
        await asyncio.gather(
            *(used.group_add(f"burst.{n % 7}", f"test.{uuid.uuid4().hex}") for n in range(burst))
        )
        admin = redis.asyncio.Redis.from_url(private_redis.url)
        clients = (await admin.info("clients"))["connected_clients"] - 1  # not this one
        joined = sum([await admin.zcard(f"{used.prefix}:group:burst.{n}") for n in range(7)])
        await admin.aclose()
        await end_layers(used)
        return clients, joined

    clients, joined = run(scenario())
    assert joined == burst  # every command went through, some after a wait
    assert 1 <= clients <= POOL_SIZE


def test_a_host_entry_sets_its_own_pool_size(private_redis: PrivateRedis) -> None:
    async def scenario() -> int:
        used = layer(private_redis.url)
        used.hosts = [{**host, "max_connections": 3} for host in used.hosts]
        await asyncio.gather(*(used.group_add("sized", f"test.{n}") for n in range(30)))
        admin = redis.asyncio.Redis.from_url(private_redis.url)
        clients = (await admin.info("clients"))["connected_clients"] - 1
        await admin.aclose()
        await end_layers(used)
        return clients

    assert run(scenario()) <= 3
