"""The channel layer sharded over two private redis-servers (CHANNEL_REDIS_URLS): the
pipelined push splits its work by host, each process queue is read and measured on its
own host, overruns are reported where the queue lives.

Names are chosen for their hosts (tests/support/shards.py), and each test asserts from
the servers themselves where the keys landed.
"""

import asyncio
import uuid
from typing import Any

import pytest
import redis
from channels_redis.core import RedisChannelLayer
from django.test import override_settings
from prometheus_client import REGISTRY

from messenger_realtime.backplane import pipeline, shards
from messenger_realtime.backplane.layer import OVERRUN_EVENT
from messenger_realtime.backplane.publisher import ChannelLayerPublisher
from messenger_realtime.contracts.events import HubTarget, OutgoingEvent
from messenger_realtime.ops import webhealth
from tests.support.helpers import layer, receive
from tests.support.runtime import PrivateRedis, run
from tests.support.shards import chat_on, group_key, process_key, process_on, user_on

OVERRUNS = "messenger_realtime_channel_overruns_total"


def chat_event(chat: uuid.UUID, seq: int) -> OutgoingEvent:
    return OutgoingEvent(HubTarget.chat(chat), "message_received", {"seq": seq})


def evals(server: PrivateRedis) -> int:
    """EVAL calls the server has run since its stats were reset."""
    stats = server.client().info("commandstats")
    return int(stats.get("cmdstat_eval", {}).get("calls", 0))


@pytest.mark.parametrize("hosts", [1, 2])
def test_a_chunk_reaches_every_channel_in_order_in_two_round_trips_per_host(
    redis_shards: list[PrivateRedis], hosts: int
) -> None:
    servers = redis_shards[:hosts]
    urls = [server.url for server in servers]
    sender = layer(urls)
    first_chat, second_chat = chat_on(sender, 0), chat_on(sender, hosts - 1)
    # Two Daphne processes, each queueing on its own host, each with a connection in
    # both chats: every event crosses from its group's host to both queues' hosts.
    processes = [process_on(layer(urls), 0), process_on(layer(urls), hosts - 1)]
    events = [chat_event(chat, n) for n in range(30) for chat in (first_chat, second_chat)]

    async def scenario() -> list[list[tuple[str, int]]]:
        channels = [await process.new_channel() for process in processes]
        for process, channel in zip(processes, channels, strict=True):
            for chat in (first_chat, second_chat):
                await process.group_add(f"chat.{chat}", channel)
        for server in servers:
            server.client().config_resetstat()
        assert await ChannelLayerPublisher(sender).publish_many(events) == [None] * 60
        assert [evals(server) for server in servers] == [2] * hosts
        for process in processes:  # each queue holds the whole chunk, on its own host
            queued = [s.client().zcard(process_key(process)) for s in redis_shards]
            assert queued[shards.channel_key_host(sender, process_key(process))] == 60
            assert sum(queued) == 60
        return [
            [
                (message["chat"], message["payload"]["seq"])
                for message in [await receive(process, channel) for _ in range(60)]
            ]
            for process, channel in zip(processes, channels, strict=True)
        ]

    expected = [(str(e.target.id), e.payload["seq"]) for e in events]
    assert run(scenario()) == [expected, expected]
    if hosts == 2:  # the groups really live on two servers
        first, second = (server.client() for server in redis_shards)
        assert first.exists(group_key(sender, f"chat.{first_chat}"))
        assert not second.exists(group_key(sender, f"chat.{first_chat}"))
        assert second.exists(group_key(sender, f"chat.{second_chat}"))
        assert not first.exists(group_key(sender, f"chat.{second_chat}"))


def test_an_overrun_on_a_full_queue_is_reported_on_the_queues_host(
    redis_shards: list[PrivateRedis],
) -> None:
    urls = [server.url for server in redis_shards]
    sender = layer(urls, capacity=3)
    chat = chat_on(sender, 0)
    process = process_on(layer(urls), 1)  # the group on host 0, the queue on host 1
    before = REGISTRY.get_sample_value(OVERRUNS) or 0

    async def scenario() -> list[Any]:
        channel = await process.new_channel()
        await process.group_add(f"chat.{chat}", channel)
        await ChannelLayerPublisher(sender).publish_many([chat_event(chat, n) for n in range(5)])
        overrun = process_key(process) + pipeline.OVERRUN_SUFFIX
        assert redis_shards[1].client().smembers(overrun) == {channel.encode()}
        assert not redis_shards[0].client().exists(overrun)
        return [await receive(process, channel) for _ in range(4)]

    received = run(scenario())
    assert REGISTRY.get_sample_value(OVERRUNS) == before + 2
    # The connection is told first, then gets what its queue held.
    assert received[0] == {"type": OVERRUN_EVENT}
    assert [message["payload"]["seq"] for message in received[1:]] == [0, 1, 2]


def test_queue_depths_and_backlog_read_each_process_queue_on_its_host(
    redis_shards: list[PrivateRedis],
) -> None:
    urls = [server.url for server in redis_shards]
    sender = layer(urls)
    processes = [process_on(layer(urls), 0), process_on(layer(urls), 1)]
    chats = [chat_on(sender, 1), chat_on(sender, 0)]  # each group on the other host
    publisher = ChannelLayerPublisher(sender)

    async def scenario() -> tuple[dict[str, int], int]:
        for process, chat in zip(processes, chats, strict=True):
            await process.group_add(f"chat.{chat}", await process.new_channel())
        events = [chat_event(chats[0], n) for n in range(3)]
        events += [chat_event(chats[1], n) for n in range(5)]
        await publisher.publish_many(events)
        states = await pipeline.queue_states(sender, publisher.last_channels)
        depths = {key: state.depth for key, state in states.items()}
        return depths, await publisher.hub_backlog()

    depths, backlog = run(scenario())
    keys = [process_key(process) for process in processes]
    assert depths == {keys[0]: 3, keys[1]: 5}
    assert backlog == 5
    assert redis_shards[0].client().zcard(keys[0]) == 3
    assert redis_shards[1].client().zcard(keys[1]) == 5


def test_a_user_joining_a_chat_on_another_host_gets_the_chats_later_events(
    redis_shards: list[PrivateRedis],
) -> None:
    urls = [server.url for server in redis_shards]
    sender = layer(urls)
    user, chat = user_on(sender, 0), chat_on(sender, 1)
    process = process_on(layer(urls), 0)

    async def scenario() -> list[Any]:
        joiner = await process.new_channel()
        await process.group_add(f"user.{user}", joiner)  # in the user's group only
        events = [
            chat_event(chat, 1),  # before the join: not for the joiner
            OutgoingEvent(HubTarget.user(user), "chat_updated", {"n": "joined"}, joins=chat),
            chat_event(chat, 2),
        ]
        await ChannelLayerPublisher(sender).publish_many(events)
        members = redis_shards[1].client().zrange(group_key(sender, f"chat.{chat}"), 0, -1)
        assert members == [joiner.encode()]
        return [(await receive(process, joiner))["payload"] for _ in range(2)]

    assert run(scenario()) == [{"n": "joined"}, {"seq": 2}]


def test_send_to_a_process_channel_goes_to_the_host_its_process_reads(
    redis_shards: list[PrivateRedis],
) -> None:
    urls = [server.url for server in redis_shards]
    process = process_on(layer(urls), 1)
    # A connection name whose full-name hash (channels-redis' own send) is the other host.
    channel = next(
        name
        for name in (f"specific.{process.client_prefix}!{uuid.uuid4().hex}" for _ in range(99))
        if RedisChannelLayer.consistent_hash(process, name) == 0
    )

    async def scenario() -> Any:
        await layer(urls).send(channel, {"type": "hello"})
        return await receive(process, channel)

    assert run(scenario()) == {"type": "hello"}


def test_a_dead_shard_fails_the_whole_chunk_for_a_retry(
    redis_shards: list[PrivateRedis], dead_redis_url: str
) -> None:
    urls = [redis_shards[0].url, dead_redis_url]
    sender = layer(urls)
    events = [chat_event(chat_on(sender, 0), 1), chat_event(chat_on(sender, 1), 2)]

    async def scenario() -> list[Any]:
        return await ChannelLayerPublisher(sender).publish_many(events)

    with pytest.raises(redis.exceptions.ConnectionError, match="Error 111 connecting"):
        run(asyncio.wait_for(scenario(), 10))


def test_readiness_needs_every_shard(redis_shards: list[PrivateRedis], dead_redis_url: str) -> None:
    def layers(*urls: str) -> dict[str, Any]:
        config = {"hosts": [{"address": url, "socket_connect_timeout": 2} for url in urls]}
        backend = "messenger_realtime.backplane.layer.BatchReceiveRedisChannelLayer"
        return {"default": {"BACKEND": backend, "CONFIG": config}}

    with override_settings(CHANNEL_LAYERS=layers(*(s.url for s in redis_shards))):
        assert run(webhealth._channel_layer()) is None  # no cause: ready
    with override_settings(CHANNEL_LAYERS=layers(redis_shards[0].url, dead_redis_url)):
        cause = run(webhealth._channel_layer())
        port = dead_redis_url.rsplit(":", 1)[1].split("/")[0]
        assert cause is not None and port in cause  # the dead shard, named
