"""A live hub process's Redis queue does not expire under its reader. channels-redis gives
a channel key a TTL of `expiry` (60 s) from the last push, and nothing else refreshes it:
a reader that takes the queue slowly after a burst (backpressure: its connections drain
slowly) would find it gone, its messages lost without a word. Real Redis, the hub's own
fan-out; the layer's expiry shortened to a second so that the test takes seconds."""

import asyncio
import time
import uuid
from typing import Any

import redis

from messenger_realtime.backplane.group_names import layer_group
from messenger_realtime.backplane.publisher import ChannelLayerPublisher
from messenger_realtime.contracts.events import HubTarget, OutgoingEvent
from messenger_realtime.hub import fanout as fanout_module
from messenger_realtime.hub.fanout import Fanout
from tests.support.helpers import layer
from tests.support.runtime import PrivateRedis, run

EXPIRY = 1  # s: channels-redis' `expiry` (60 by default)


def test_a_queue_read_slowly_outlives_the_expiry_and_loses_nothing(
    private_redis: PrivateRedis, monkeypatch: Any
) -> None:
    monkeypatch.setattr(fanout_module, "BACKLOG_LIMIT", 10)
    monkeypatch.setattr(fanout_module, "STALL_AFTER", 3600.0)  # slow, never stalled
    chat = uuid.uuid4()
    group = layer_group(HubTarget.chat(chat))
    queue = redis.Redis.from_url(private_redis.url)

    async def scenario() -> list[int]:
        hub, worker = (
            layer(private_redis.url, expiry=EXPIRY),
            layer(private_redis.url, expiry=EXPIRY),
        )
        fanout = Fanout(hub)
        inbox = fanout.inbox()
        inbox.start_draining()
        await fanout.join(group, inbox)
        key = f"asgi{fanout.process_channel}"  # channels-redis: prefix + channel
        events = [
            OutgoingEvent(HubTarget.chat(chat), "message_received", {"seq": n}) for n in range(300)
        ]
        await ChannelLayerPublisher(worker).publish_many(events)
        last_push = time.monotonic()
        for _ in range(1000):  # the first batch in memory; the reader waits for room
            if len(inbox) >= 10:
                break
            await asyncio.sleep(0.005)
        assert queue.zcard(key) > 0
        # Nothing is pushed for more than twice the expiry while the reader waits: the
        # queue must be there all along (watched, not slept through).
        while time.monotonic() < last_push + 2.5 * EXPIRY:
            assert queue.exists(key), "the queue expired with unread messages"
            await asyncio.sleep(0.05)
        got: list[int] = []
        while len(got) < 300:  # the connection drains at last: every event, in order
            got += [m["payload"]["seq"] for m in await asyncio.wait_for(inbox.take(100), 5)]
        await fanout.leave(group, inbox)
        return got

    assert run(scenario()) == list(range(300))
