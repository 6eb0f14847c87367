"""The hub in-process: the WebSocket consumer's refusal paths (through Channels' ASGI test
communicator) and a connection's membership check at delivery, against the real database
and channel layer."""

import asyncio
import uuid
from typing import Any

import channels.db
import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from messenger_realtime.conf.settings import load_hub_options
from messenger_realtime.hub.clock import cancel
from messenger_realtime.hub.connection import HubConnection, layer_messages
from messenger_realtime.hub.credentials.tokens import Identity
from messenger_realtime.hub.process import HubProcess
from messenger_realtime.hub.protocols import JsonProtocol
from messenger_realtime.hub.transports.websocket import HubConsumer
from project.messenger import services
from project.messenger.realtime_port import HostDomainPort
from tests.support.factories import UserFactory
from tests.support.helpers import layer
from tests.support.inprocess import Recorder, consumer_of
from tests.support.runtime import run


@pytest.mark.parametrize("shutting_down", [True, False])
def test_a_refused_connection_disconnects_cleanly(
    shutting_down: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = HubProcess()
    hub.accepting = not shutting_down

    async def scenario() -> bool:
        communicator = WebsocketCommunicator(HubConsumer.as_asgi(hub=hub), "/hubs/messenger")
        connected, _ = await communicator.connect()
        # Daphne then reports the socket gone; the consumer must wind down without error.
        await communicator.send_input({"type": "websocket.disconnect", "code": 1006})
        await communicator.wait()  # re-raises anything the consumer raised
        return bool(connected)

    # Shutting down, or no credentials at all: refused before accept, without an error.
    assert run(scenario()) is False


def event(chat: uuid.UUID, seq: int, version: int | None) -> dict[str, Any]:
    message = {"type": "realtime.event", "chat": str(chat), "event": "message_received"}
    return {**message, "payload": {"seq": seq}, "membership_version": version}


def test_an_event_reaches_the_socket_without_a_database_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Channels' own dispatch() hops to a thread for close_old_connections() before every
    handler; the hub's event path needs no database, so it must not pay that per event."""
    hops: list[int] = []
    monkeypatch.setattr(channels.db, "close_old_connections", lambda: hops.append(1))
    chat = uuid.uuid4()
    consumer, sent = consumer_of(uuid.uuid4(), {chat: 3})
    for seq, version in ((7, 3), (8, 2), (9, None)):  # at or below the version read
        run(layer_messages.dispatch(consumer, event(chat, seq, version)))
    assert hops == []
    assert [m["arguments"] for m in sent] == [[{"seq": 7}], [{"seq": 8}], [{"seq": 9}]]


class CountingPort:
    """The host's port, counting the hub's membership reads."""

    def __init__(self) -> None:
        self.port, self.reads = HostDomainPort(), 0

    def active_chats(self, user_id: uuid.UUID) -> Any:
        self.reads += 1
        return self.port.active_chats(user_id)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("hub_thread_db")
def test_an_event_read_after_a_removal_is_dropped_after_one_membership_read(
    monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    alice, bob = UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id], title="team")  # a direct chat keeps its two
    held = HostDomainPort().active_chats(bob.id)
    port = CountingPort()
    monkeypatch.setattr("messenger_realtime.hub.connection.groups.get_domain_port", lambda: port)
    consumer, sent = consumer_of(bob.id, dict(held))
    consumer.channel_layer = layer(redis_url)
    services.remove_participant(alice.id, chat.id, bob.id)  # the fast path is not awaited
    newer = HostDomainPort().membership_versions([chat.id])[chat.id]
    assert newer == held[chat.id] + 1
    # Read before the removal:
    run(layer_messages.dispatch(consumer, event(chat.id, 1, held[chat.id])))
    for seq in (2, 3):
        run(layer_messages.dispatch(consumer, event(chat.id, seq, newer)))  # read after it
    assert [m["arguments"] for m in sent] == [[{"seq": 1}]]
    assert port.reads == 1  # one read for the first newer event; the second knew already
    assert consumer.groups.chats == frozenset()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("hub_thread_db")
def test_a_member_added_since_the_last_read_gets_the_event_after_one_read(
    monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    alice, bob, carol = UserFactory(), UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id], title="team")
    port = CountingPort()
    monkeypatch.setattr("messenger_realtime.hub.connection.groups.get_domain_port", lambda: port)
    consumer, sent = consumer_of(carol.id, {})
    consumer.channel_layer = layer(redis_url)
    services.add_participant(alice.id, chat.id, carol.id)
    version = HostDomainPort().membership_versions([chat.id])[chat.id]
    run(layer_messages.dispatch(consumer, event(chat.id, 1, version)))
    run(layer_messages.dispatch(consumer, event(chat.id, 2, version)))
    assert [m["arguments"] for m in sent] == [[{"seq": 1}], [{"seq": 2}]]
    assert port.reads == 1
    assert consumer.groups.chats == frozenset({chat.id})


class RosterCountingPort(CountingPort):
    """As CountingPort, also counting the roster reads."""

    def __init__(self) -> None:
        super().__init__()
        self.roster_reads = 0

    def chat_roster(self, chat_id: uuid.UUID) -> Any:
        self.roster_reads += 1
        return self.port.chat_roster(chat_id)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("hub_thread_db")
def test_a_member_added_costs_one_roster_read_not_a_read_per_connection(
    monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    # Issue 26: adding one member to a chat of 50 connected members made every
    # connection re-read its memberships (53 reads of the participant table).
    alice, *members = (UserFactory() for _ in range(20))
    newcomer = UserFactory()
    chat = services.create_chat(alice.id, [m.id for m in members], title="big")
    port = RosterCountingPort()
    monkeypatch.setattr("messenger_realtime.hub.connection.groups.get_domain_port", lambda: port)
    monkeypatch.setattr("messenger_realtime.hub.rosters.get_domain_port", lambda: port)
    held = HostDomainPort().membership_versions([chat.id])[chat.id]
    hub = HubProcess()  # one process: its connections share its rosters
    connections_ = [consumer_of(m.id, {chat.id: held}, hub) for m in members]
    for connection, _sent in connections_:
        connection.channel_layer = layer(redis_url)
    services.add_participant(alice.id, chat.id, newcomer.id)
    newer = HostDomainPort().membership_versions([chat.id])[chat.id]

    async def deliver() -> None:
        first = [layer_messages.dispatch(c, event(chat.id, 1, newer)) for c, _ in connections_[:10]]
        await asyncio.gather(*first)  # concurrently: they share one read in flight
        for connection, _sent in connections_[10:]:
            # After: the kept roster.
            await layer_messages.dispatch(connection, event(chat.id, 1, newer))
        for connection, _sent in connections_:
            # Held at it now: no read.
            await layer_messages.dispatch(connection, event(chat.id, 2, newer))

    run(deliver())
    assert [[m["arguments"] for m in sent] for _c, sent in connections_] == [
        [[{"seq": 1}], [{"seq": 2}]]
    ] * len(members)
    assert (port.roster_reads, port.reads) == (1, 0)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("hub_thread_db")
def test_a_roster_read_before_the_version_moved_is_read_again() -> None:
    alice, bob, carol = UserFactory(), UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id], title="team")
    before = HostDomainPort().membership_versions([chat.id])[chat.id]

    async def scenario() -> tuple[Any, Any, int]:
        shared = HubProcess().rosters()
        old = await shared.at_least(chat.id, before)
        await sync_to_async(services.add_participant)(alice.id, chat.id, carol.id)
        new = await shared.at_least(chat.id, before + 1)
        return old, new, shared.reads

    old, new, reads = run(scenario())
    assert (old.version, old.members) == (before, frozenset({alice.id, bob.id}))
    assert (new.version, new.members) == (before + 1, frozenset({alice.id, bob.id, carol.id}))
    assert reads == 2


def test_an_open_connection_has_no_task_of_its_own_until_it_delivers() -> None:
    """Its deadlines are the process's one clock's (hub/clock.py) and its delivery runs
    only while its inbox holds something (hub/connection/outbound.py): an idle connection,
    before or after its handshake, costs no task, no coroutine and no timer of its own."""

    async def scenario() -> tuple[int, int, int, int, list[Any], bool]:
        before = len(asyncio.all_tasks())
        connections = []
        hub = HubProcess()
        for _ in range(200):
            connection = HubConnection(
                hub=hub,
                connection_id=uuid.uuid4().hex,
                identity=Identity(uuid.uuid4(), None),
                token=None,
                options=load_hub_options(),
                transport=Recorder(),
                channel_layer=None,
            )
            await hub.open(connection)
            connections.append(connection)
        opened = len(asyncio.all_tasks())
        for connection in connections:  # as after their handshake: delivering, nothing yet
            connection.handshaken, connection.protocol = True, JsonProtocol(32768)
            connection.outbound.start()
        delivering = len(asyncio.all_tasks())
        loop = asyncio.get_running_loop()
        timers = [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
        # A message for one of them: a task delivers it and ends.
        first = connections[0]
        message = {"type": "realtime.event", "event": "contact_updated", "payload": {}}
        first.groups.inbox.put(message)
        task = first.outbound.task
        assert task is not None
        await asyncio.wait_for(task, 5)
        for connection in connections:
            hub.forget(connection.connection_id, connection)
            cancel(connection.deadline)
        transport = first.transport
        assert isinstance(transport, Recorder)
        return before, opened, delivering, len(timers), transport.sent, first.outbound.task is None

    before, opened, delivering, timers, sent, ended = run(scenario())
    assert opened == delivering == before
    assert timers == 1  # the clock's, at the nearest deadline
    assert [m["target"] for m in sent] == ["contact_updated"] and ended
