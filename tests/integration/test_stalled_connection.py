"""A stalled connection (it took nothing for STALL_AFTER with messages waiting) is bounded
by the process's backlog limit, not the layer's capacity: it is closed with
allowReconnect once it is BACKLOG_LIMIT behind, while a slow connection that keeps
draining through the same burst gets every event. A slow connection never holds the
process's reader for the others: they get their events while it is still behind, and
it is then either kept whole or told (overrun). Real Redis, the hub's own fan-out and
connections; only the transports are stand-ins (one stuck in its send, one slow)."""

import asyncio
import json
import uuid
from typing import Any

import pytest

from messenger_realtime.backplane.group_names import layer_group
from messenger_realtime.backplane.publisher import ChannelLayerPublisher
from messenger_realtime.conf.settings import load_hub_options
from messenger_realtime.contracts.events import HubTarget, OutgoingEvent
from messenger_realtime.hub import fanout as fanout_module
from messenger_realtime.hub.connection import HubConnection
from messenger_realtime.hub.connection.ending import RELEASED
from messenger_realtime.hub.credentials.tokens import Identity
from messenger_realtime.hub.fanout import BACKLOG_LIMIT
from messenger_realtime.hub.inbox import OVERRUN_MESSAGE, Inbox
from messenger_realtime.hub.process import HubProcess
from messenger_realtime.hub.protocols import JsonProtocol
from messenger_realtime.ops import metrics
from tests.support.helpers import layer
from tests.support.runtime import PrivateRedis, await_until, run
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


OVERRUN = OVERRUN_MESSAGE["type"]


def types(inbox: Inbox) -> list[str]:
    return [m["type"] for m in inbox._queue]


def overruns() -> float:
    return float(metrics.channel_overruns._value.get())


async def opened(
    process: HubProcess, hub: Any, transport: Transport, chat: uuid.UUID, group: str
) -> HubConnection:
    """A handshaken connection of `process` on the layer `hub` of `chat`, in its group,
    delivering."""
    connection = HubConnection(
        hub=process,
        connection_id=uuid.uuid4().hex,
        identity=Identity(uuid.uuid4(), None),
        token=None,
        options=load_hub_options(),
        transport=transport,
        channel_layer=hub,
    )
    connection.handshaken, connection.protocol = True, JsonProtocol(32768)
    connection.groups.memberships.update({chat: 1})
    await connection.groups.fanout.join(group, connection.groups.inbox)
    connection.outbound.start()
    return connection


async def publish_burst(url: str, chat: uuid.UUID) -> None:
    """BURST events of `chat` through the worker's pipelined push, in one go."""
    events = [
        OutgoingEvent(HubTarget.chat(chat), "message_received", {"seq": n}) for n in range(BURST)
    ]
    await ChannelLayerPublisher(layer(url)).publish_many(events)


def test_a_stalled_connection_is_closed_at_the_backlog_limit_and_a_slow_one_loses_nothing(
    private_redis: PrivateRedis,
) -> None:
    chat = uuid.uuid4()
    group = layer_group(HubTarget.chat(chat))
    peak: list[int] = [0]

    async def scenario() -> tuple[Transport, Transport, list[Any], float]:
        hub = layer(private_redis.url)  # the project's capacity: CHANNEL_CAPACITY, 10,000
        process = HubProcess()
        assert hub.capacity > BURST
        gate = asyncio.Event()
        stuck_transport, slow_transport = Transport(gate), Transport(pause=0.01)
        stuck = await opened(process, hub, stuck_transport, chat, group)
        slow = await opened(process, hub, slow_transport, chat, group)
        put = stuck.groups.inbox.put

        def measured_put(message: dict[str, Any]) -> None:
            put(message)
            if stuck.groups.inbox.stalled:  # since it was found stalled
                peak[0] = max(peak[0], len(stuck.groups.inbox))

        stuck.groups.inbox.put = measured_put  # type: ignore[method-assign]
        before = overruns()
        await publish_burst(private_redis.url, chat)
        await asyncio.wait_for(slow_transport.received.wait(), 60)
        # The stuck one is found stalled within a STALL_AFTER period or two (its clock,
        # not the test's): it overruns at once, being far past BACKLOG_LIMIT already.
        await await_until(lambda: types(stuck.groups.inbox)[:1] == [OVERRUN])
        held = types(stuck.groups.inbox)
        lost = overruns() - before
        gate.set()  # the stuck delivery goes on: it takes the overrun and closes
        await asyncio.wait_for(stuck_transport.closed.wait(), 10)
        await slow.end(RELEASED)
        return stuck_transport, slow_transport, held, lost

    stuck, slow, held, lost = run(scenario())
    assert [r["arguments"][0]["seq"] for r in slow.records if r.get("target")] == list(range(BURST))
    assert not slow.closed.is_set() and {"type": 7, "allowReconnect": True} not in slow.records
    # The stuck one: overrun (told on the wire) once stalled, long before the layer's
    # capacity, and never more than BACKLOG_LIMIT held from then on.
    assert peak[0] <= BACKLOG_LIMIT
    assert held[0] == OVERRUN and len(held) <= BACKLOG_LIMIT
    assert lost >= BACKLOG_LIMIT
    assert stuck.records[-1] == {"type": 7, "allowReconnect": True}


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


@pytest.mark.parametrize("slow_capacity", ["above the burst", "below the burst"])
def test_a_slow_connection_does_not_hold_the_reader_for_a_quick_one_in_its_process(
    private_redis: PrivateRedis, monkeypatch: pytest.MonkeyPatch, slow_capacity: str
) -> None:
    """A connection that keeps taking, however slowly, counts at most CONNECTION_SHARE of
    what it holds towards the process's backlog: it alone never stops the reader, so a
    quick connection of the same process gets the whole burst while the slow one still
    holds more than BACKLOG_LIMIT. The slow one then gets every event (its inbox's
    capacity above the burst) or is told (below it: overrun, Close with allowReconnect),
    never silently short."""
    monkeypatch.setattr(fanout_module, "STALL_AFTER", 3600.0)  # slow, never stalled
    chat = uuid.uuid4()
    group = layer_group(HubTarget.chat(chat))

    async def scenario() -> tuple[Transport, Transport, int, float]:
        # The hub's capacity bounds each inbox; the worker's, the Redis queue.
        capacity = 2 * BURST if slow_capacity == "above the burst" else BURST // 2
        hub = layer(private_redis.url, capacity=capacity)
        process = HubProcess()
        gate = asyncio.Event()
        slow_transport, quick_transport = Transport(gate), Transport()
        slow = await opened(process, hub, slow_transport, chat, group)
        quick = await opened(process, hub, quick_transport, chat, group)
        before = overruns()
        await publish_burst(private_redis.url, chat)
        # The slow one's send waits (a slow socket) all along: the quick one gets it all.
        await asyncio.wait_for(quick_transport.received.wait(), 30)
        held = len(slow.groups.inbox)
        gate.set()  # the slow one takes again: the rest of the burst, or its overrun
        if slow_capacity == "above the burst":
            await asyncio.wait_for(slow_transport.received.wait(), 30)
        else:
            await asyncio.wait_for(slow_transport.closed.wait(), 30)
        for connection in (slow, quick):
            await connection.end(RELEASED)
        return slow_transport, quick_transport, held, overruns() - before

    slow, quick, held, lost = run(scenario())
    assert [r["arguments"][0]["seq"] for r in quick.records if r.get("target")] == list(
        range(BURST)
    )
    assert not quick.closed.is_set()
    seqs = [r["arguments"][0]["seq"] for r in slow.records if r.get("target")]
    if slow_capacity == "above the burst":
        assert held > BACKLOG_LIMIT  # while the quick one had everything
        assert seqs == list(range(BURST)) and lost == 0  # kept whole
        assert not slow.closed.is_set()
    else:
        assert seqs == list(range(len(seqs))) and len(seqs) < BURST  # in order, up to...
        assert slow.records[-1] == {"type": 7, "allowReconnect": True}  # ...told
        assert lost > BURST // 2  # what its inbox held when it overflowed, counted
