"""A stalled connection (it took nothing for STALL_AFTER while the process was behind) is
bounded by the process's backlog limit, not the layer's capacity: it is closed with
allowReconnect once it is BACKLOG_LIMIT behind, while a slow connection that keeps
draining through the same burst gets every event. Real Redis, the hub's own fan-out and
connections; only the transports are stand-ins (one stuck in its send, one slow)."""

import asyncio
import json
import uuid
from typing import Any

from messenger_realtime.conf.settings import load_hub_options
from messenger_realtime.contracts.events import HubTarget, OutgoingEvent
from messenger_realtime.hub.auth import Identity
from messenger_realtime.hub.connection import HubConnection
from messenger_realtime.hub.fanout import BACKLOG_LIMIT
from messenger_realtime.hub.inbox import OVERRUN_MESSAGE, Inbox
from messenger_realtime.hub.protocols import JsonProtocol
from messenger_realtime.ops import metrics
from messenger_realtime.transport.groups import layer_group
from messenger_realtime.transport.layer import RECEIVE_BATCH
from messenger_realtime.transport.publisher import ChannelLayerPublisher
from tests.support.helpers import layer
from tests.support.runtime import PrivateRedis, run
from tests.support.transports import FakeTransport

BURST = 3 * BACKLOG_LIMIT


class Transport(FakeTransport):
    """Keeps the records it is sent; `gate` (when given) holds every send until set."""

    def __init__(self, gate: asyncio.Event | None = None, pause: float = 0.0) -> None:
        super().__init__()
        self.records: list[dict[str, Any]] = []
        self.gate, self.pause = gate, pause
        self.received = asyncio.Event()  # the whole burst

    async def send(self, frame: str) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if self.pause:
            await asyncio.sleep(self.pause)  # a slow client's socket, not synchronisation
        self.records += [json.loads(r) for r in frame.split("\x1e")[:-1]]
        if sum(1 for r in self.records if r.get("target")) == BURST:
            self.received.set()


def overruns() -> float:
    return float(metrics.channel_overruns._value.get())


def test_a_stalled_connection_is_closed_at_the_backlog_limit_and_a_slow_one_loses_nothing(
    private_redis: PrivateRedis,
) -> None:
    chat = uuid.uuid4()
    group = layer_group(HubTarget.chat(chat))
    peak: list[int] = [0]

    async def connection(hub: Any, transport: Transport) -> HubConnection:
        opened = HubConnection(
            connection_id=uuid.uuid4().hex,
            identity=Identity(uuid.uuid4(), None),
            token=None,
            options=load_hub_options(),
            transport=transport,
            channel_layer=hub,
        )
        opened.handshaken, opened.protocol = True, JsonProtocol(32768)
        opened.memberships.update({chat: 1})
        await opened.fanout.join(group, opened.inbox)
        opened._start_delivery()
        return opened

    async def scenario() -> tuple[Transport, Transport, list[Any], float]:
        hub = layer(private_redis.url)  # the project's capacity: CHANNEL_CAPACITY, 10,000
        assert hub.capacity > BURST
        gate = asyncio.Event()
        stuck_transport, slow_transport = Transport(gate), Transport(pause=0.01)
        stuck = await connection(hub, stuck_transport)
        slow = await connection(hub, slow_transport)
        put = stuck.inbox.put

        def measured_put(message: dict[str, Any]) -> None:
            put(message)
            peak[0] = max(peak[0], len(stuck.inbox))

        stuck.inbox.put = measured_put  # type: ignore[method-assign]
        before = overruns()
        events = [
            OutgoingEvent(HubTarget.chat(chat), "message_received", {"seq": n})
            for n in range(BURST)
        ]
        await ChannelLayerPublisher(layer(private_redis.url)).publish_many(events)
        await asyncio.wait_for(slow_transport.received.wait(), 60)
        held = [m["type"] for m in stuck.inbox._queue]
        lost = overruns() - before
        gate.set()  # the stuck delivery goes on: it takes the overrun and closes
        await asyncio.wait_for(stuck_transport.closed.wait(), 10)
        await slow.end()
        return stuck_transport, slow_transport, held, lost

    stuck, slow, held, lost = run(scenario())
    assert [r["arguments"][0]["seq"] for r in slow.records if r.get("target")] == list(range(BURST))
    assert not slow.closed.is_set() and {"type": 7, "allowReconnect": True} not in slow.records
    # The stuck one: never more than one batch past the limit, then overrun (told on the
    # wire) long before the layer's capacity.
    assert peak[0] <= BACKLOG_LIMIT + RECEIVE_BATCH
    assert held[0] == OVERRUN_MESSAGE["type"] and len(held) <= BACKLOG_LIMIT
    assert lost >= BACKLOG_LIMIT
    assert stuck.records[-1] == {"type": 7, "allowReconnect": True}


def types(inbox: Inbox) -> list[str]:
    return [m["type"] for m in inbox._queue]


def test_a_stalled_inbox_overruns_at_its_stalled_bound_a_draining_one_at_capacity() -> None:
    event = {"type": "realtime.event"}

    def inbox(held: int) -> Inbox:
        made = Inbox(10, lambda delta: None, stalled_capacity=3)
        made.start_draining()
        for _ in range(held):
            made.put(event)
        return made

    draining, stalling, past_bound = inbox(5), inbox(2), inbox(5)
    assert types(draining) == ["realtime.event"] * 5  # under its capacity: kept
    stalling.stall_if_idle(since=stalling.last_take + 1)
    stalling.put(event)
    assert types(stalling) == ["realtime.event"] * 3  # stalled, at its bound
    stalling.put(event)
    assert types(stalling) == [OVERRUN_MESSAGE["type"]]  # one more: overrun
    # Already past its bound when it stalls: overrun at once, nothing more held.
    past_bound.stall_if_idle(since=past_bound.last_take + 1)
    assert types(past_bound) == [OVERRUN_MESSAGE["type"]]
