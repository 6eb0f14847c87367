"""The pipelined channel-layer path: same delivery as group_send, in order, overruns counted."""

import asyncio
import time
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from prometheus_client import REGISTRY

from messenger_realtime.backplane import pipeline
from messenger_realtime.backplane.backlog import QueueWatch
from messenger_realtime.backplane.publisher import ChannelLayerPublisher
from messenger_realtime.contracts.events import HubTarget, OutgoingEvent
from tests.support.helpers import layer, receive, subscribe
from tests.support.runtime import run


def event(chat: uuid.UUID, seq: int) -> OutgoingEvent:
    return OutgoingEvent(HubTarget.chat(chat), "message_received", {"seq": seq})


def test_a_pipelined_chunk_reaches_every_member_in_order(redis_url: str) -> None:
    chat, other = uuid.uuid4(), uuid.uuid4()

    async def scenario() -> tuple[list[Any], list[Any], list[Any]]:
        channel_layer = layer(redis_url)
        first, second = await subscribe(channel_layer, chat), await subscribe(channel_layer, chat)
        third = await subscribe(channel_layer, other)
        events = [event(chat, n) for n in range(50)] + [event(other, 99)]
        events.append(OutgoingEvent(HubTarget.chat(uuid.uuid4()), "chat_updated", {}))  # no members
        results = await ChannelLayerPublisher(channel_layer).publish_many(events)
        assert results == [None] * len(events)
        got = [
            [(await receive(channel_layer, c))["payload"]["seq"] for _ in range(n)]
            for c, n in ((first, 50), (second, 50), (third, 1))
        ]
        return got[0], got[1], got[2]

    first, second, third = run(scenario())
    assert first == second == list(range(50))
    assert third == [99]


def test_capacity_overruns_are_counted_not_silent(redis_url: str) -> None:
    chat = uuid.uuid4()
    before = REGISTRY.get_sample_value("messenger_realtime_channel_overruns_total") or 0

    async def scenario() -> None:
        channel_layer = layer(redis_url)
        channel_layer.capacity = 3
        await subscribe(channel_layer, chat)  # nobody reads it
        await ChannelLayerPublisher(channel_layer).publish_many([event(chat, n) for n in range(5)])

    run(scenario())
    after = REGISTRY.get_sample_value("messenger_realtime_channel_overruns_total")
    assert after == before + 2


def test_a_volatile_message_never_fills_a_queue_nor_counts_as_an_overrun(redis_url: str) -> None:
    chat = uuid.uuid4()
    before = REGISTRY.get_sample_value("messenger_realtime_channel_overruns_total") or 0

    async def scenario() -> tuple[int, list[int]]:
        channel_layer = layer(redis_url)
        channel_layer.capacity = 4
        channel = await subscribe(channel_layer, chat)  # nobody reads it yet
        group = f"chat.{chat}"
        for n in range(10):  # only the first two fit under half the capacity
            await channel_layer.group_send_volatile(group, {"type": "typing", "n": n})
        await ChannelLayerPublisher(channel_layer).publish_many([event(chat, 1), event(chat, 2)])
        depth = await channel_layer.connection(0).zcard(channel_layer.prefix + channel)
        got = [await receive(channel_layer, channel) for _ in range(depth)]
        return depth, [m.get("n", -1) for m in got]

    depth, order = run(scenario())
    assert (depth, order) == (4, [0, 1, -1, -1])  # both events found room
    after = REGISTRY.get_sample_value("messenger_realtime_channel_overruns_total") or 0
    assert after == before


def test_a_dead_redis_fails_the_whole_chunk_for_a_retry(dead_redis_url: str) -> None:
    async def scenario() -> list[Any]:
        dead = layer(dead_redis_url)
        return await ChannelLayerPublisher(dead).publish_many([event(uuid.uuid4(), 1)])

    # Raised, not returned per event: the dispatcher turns it into a transient failure
    # for every row of the chunk.
    with pytest.raises(redis.exceptions.ConnectionError, match="Error 111 connecting"):
        run(asyncio.wait_for(scenario(), 10))


def test_back_to_back_chunks_keep_their_order_in_a_shared_channel(redis_url: str) -> None:
    chat = uuid.uuid4()

    async def scenario() -> list[int]:
        channel_layer = layer(redis_url)
        channel = await subscribe(channel_layer, chat)
        publisher = ChannelLayerPublisher(channel_layer)
        for start in range(0, 300, 100):  # three chunks sent within the same millisecond
            await publisher.publish_many([event(chat, n) for n in range(start, start + 100)])
        return [(await receive(channel_layer, channel))["payload"]["seq"] for _ in range(300)]

    assert run(scenario()) == list(range(300))


def test_a_user_joining_a_chat_mid_chunk_gets_the_chats_later_events(redis_url: str) -> None:
    chat, user = uuid.uuid4(), uuid.uuid4()

    async def scenario() -> list[Any]:
        channel_layer = layer(redis_url)
        member = await subscribe(channel_layer, chat)
        joiner = f"test.{uuid.uuid4().hex}"  # in the user's group only, as a fresh add
        await channel_layer.group_add(f"user.{user}", joiner)
        events = [
            event(chat, 1),  # before the join: not for the joiner
            OutgoingEvent(HubTarget.user(user), "chat_updated", {"n": "joined"}, joins=chat),
            event(chat, 2),
        ]
        await ChannelLayerPublisher(channel_layer).publish_many(events)
        assert [(await receive(channel_layer, member))["payload"]["seq"] for _ in range(2)] == [
            1,
            2,
        ]
        return [(await receive(channel_layer, joiner))["payload"] for _ in range(2)]

    assert run(scenario()) == [{"n": "joined"}, {"seq": 2}]


def test_backpressure_stops_waiting_for_a_queue_nobody_drains(redis_url: str) -> None:
    """A dead hub process's full queue (real Redis) is left out once it stops shrinking,
    so it cannot slow every later push down to one chunk per HUB_BACKLOG_WAIT."""

    async def scenario() -> tuple[int, int]:
        channel_layer = layer(redis_url)
        chat = uuid.uuid4()
        await subscribe(channel_layer, chat)  # a member whose process never reads
        publisher = ChannelLayerPublisher(channel_layer)
        clock = Clock()
        publisher.queues = QueueWatch(clock, stall_after=0.5)
        await publisher.publish_many([event(chat, seq) for seq in range(50)])
        first = await publisher.hub_backlog()
        clock.now += 1.0  # nothing drained it meanwhile
        return first, await publisher.hub_backlog()

    first, later = run(scenario())
    assert (first, later) == (50, 0)


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_small_push_after_a_short_measured_backlog_is_judged_without_redis(
    redis_url: str,
) -> None:
    """The first look after a push may be answered by a bound (the last measured depth plus
    what was pushed since): no round trip per pass while that stays within the limit; a
    bound past the limit, or an old measurement, is measured again."""

    async def scenario() -> list[int]:
        channel_layer = layer(redis_url)
        chat = uuid.uuid4()
        member = await subscribe(channel_layer, chat)
        publisher = ChannelLayerPublisher(channel_layer)
        clock = Clock()
        publisher.queues = QueueWatch(clock, stall_after=60)
        looks = []
        await publisher.publish_many([event(chat, seq) for seq in range(5)])
        looks.append(await publisher.hub_backlog(within=200))  # measured: 5
        for _ in range(5):  # drained: a measurement would now say 0
            await receive(channel_layer, member)
        await publisher.publish_many([event(chat, seq) for seq in range(5, 10)])
        looks.append(await publisher.hub_backlog(within=200))  # the bound: 5 + 5 (really 5)
        await publisher.publish_many([event(chat, 10)])
        looks.append(await publisher.hub_backlog(within=10))  # bound 11 > 10: measured, 6
        await publisher.publish_many([event(chat, 11)])
        clock.now += 1.0  # the measurement is old: measured again, 7
        looks.append(await publisher.hub_backlog(within=200))
        looks.append(await publisher.hub_backlog())  # no `within`: always measured
        return looks

    assert run(scenario()) == [5, 10, 6, 7, 7]


def test_messages_swept_past_their_expiry_leave_a_notice_for_the_whole_process(
    redis_url: str,
) -> None:
    """A process that read nothing for `expiry` seconds: the next push sweeps its stale
    messages as channels-redis does, and marks its overrun set with '*' (every
    connection of that process is told) and counts them."""
    chat = uuid.uuid4()
    process = f"specific.{uuid.uuid4().hex}!"
    client = redis.Redis.from_url(redis_url)

    async def scenario() -> None:
        channel_layer = layer(redis_url)
        await channel_layer.group_add(f"chat.{chat}", process + f"chat.{chat}")
        key = channel_layer.prefix + process
        client.zadd(key, {b"an old message": 1.0})  # queued at the epoch: long expired
        await ChannelLayerPublisher(channel_layer).publish_many([event(chat, 1)])

    before = REGISTRY.get_sample_value("messenger_realtime_channel_overruns_total") or 0.0
    run(scenario())
    key = f"asgi{process}"
    assert client.smembers(key + "$overrun") == {b"*"}
    assert client.zcard(key) == 1  # the stale one swept, the new one queued
    after = REGISTRY.get_sample_value("messenger_realtime_channel_overruns_total") or 0.0
    assert after - before == 1


def test_backpressure_leaves_out_a_dead_queue_that_only_the_expiry_sweep_shrinks(
    redis_url: str, monkeypatch: Any
) -> None:
    """A dead process's queue shrinks once its messages pass the layer's expiry (each
    push sweeps them); that must not count as a process draining it, or every push
    waits behind it (the chaos soak, docs/reliability.md). Its head is as old as what
    was swept last; a queue a live process reads has a young one."""
    now = [time.time() - 100]  # the pushes' clock: the first ones 100 s ago
    monkeypatch.setattr(pipeline, "time", SimpleNamespace(time=lambda: now[0]))

    async def scenario() -> tuple[int, int]:
        channel_layer = layer(redis_url)
        chat = uuid.uuid4()
        member = await subscribe(channel_layer, chat)  # its process died: nobody reads
        publisher = ChannelLayerPublisher(channel_layer)
        clock = Clock()
        publisher.queues = QueueWatch(clock, stall_after=0.5)
        await publisher.publish_many([event(chat, seq) for seq in range(50)])
        now[0] += 50
        await publisher.publish_many([event(chat, seq) for seq in range(50, 60)])
        await publisher.hub_backlog()
        now[0] += 50  # the first 50 are past the expiry (60 s): this push sweeps them
        clock.now += 0.1
        await publisher.publish_many([event(chat, 60)])
        depth = redis.Redis.from_url(redis_url).zcard(channel_layer.prefix + member)
        return int(depth), await publisher.hub_backlog()

    depth, backlog = run(scenario())
    assert depth == 11  # it shrank from 60, by the sweep alone
    assert backlog == 0


@pytest.fixture
def round_trips(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every script the process sends Redis (a round trip each), as its packed bytes."""
    from redis.asyncio.connection import AbstractConnection

    sent: list[bytes] = []
    send_packed = AbstractConnection.send_packed_command

    async def counted(self: Any, command: Any, check_health: bool = True) -> None:
        chunks = command if isinstance(command, list | tuple) else [command]
        packed = b"".join(bytes(c) for c in chunks)
        if b"EVAL" in packed:
            sent.append(packed)
        await send_packed(self, command, check_health)

    monkeypatch.setattr(AbstractConnection, "send_packed_command", counted)
    return sent


def test_a_chunk_to_groups_whose_members_did_not_change_takes_one_round_trip(
    redis_url: str, round_trips: list[bytes]
) -> None:
    """Latency is not a fault: on a link 100 ms away each way, every sequential round trip
    on the way from a commit to a client adds 0.2 s. A chunk costs one (its groups'
    members checked in the same script that sends) while the members are those the
    worker last read, and two again, with nothing lost, once a member came."""
    chat = uuid.uuid4()

    async def scenario() -> tuple[list[int], list[int], list[int]]:
        channel_layer = layer(redis_url)
        first = await subscribe(channel_layer, chat)
        publisher = ChannelLayerPublisher(channel_layer)
        counts = []
        for seq in (1, 2):
            before = len(round_trips)
            assert await publisher.publish_many([event(chat, seq)]) == [None]
            counts.append(len(round_trips) - before)
        second = await subscribe(channel_layer, chat)  # a new member: the cache is stale
        before = len(round_trips)
        assert await publisher.publish_many([event(chat, 3)]) == [None]
        counts.append(len(round_trips) - before)
        got_first = [(await receive(channel_layer, first))["payload"]["seq"] for _ in range(3)]
        got_second = [(await receive(channel_layer, second))["payload"]["seq"]]
        return counts, got_first, got_second

    counts, first, second = run(scenario())
    assert counts == [2, 1, 3]  # read + send; checked send; refused check, read, send
    assert first == [1, 2, 3] and second == [3]
