"""A watch ends when its watcher may no longer see the user (hub/presence/visibility.py):
a change of a watched user is checked again against the host's port once the watcher's
check is RECHECK_AFTER old, with one read shared by the process's watchers; a watcher
the port no longer allows stops watching, silently. In-process connections, the real
database and channel layer."""

import asyncio
import threading
import time
import uuid
from collections.abc import Collection
from typing import Any

import pytest

from messenger_realtime.contracts.port import DomainPort
from messenger_realtime.hub.connection import HubConnection, layer_messages
from messenger_realtime.hub.presence import visibility
from messenger_realtime.hub.presence.changes import change
from messenger_realtime.hub.process import HubProcess
from messenger_realtime.hub.reads import hub_read
from project.messenger import services
from project.messenger.realtime_port import HostDomainPort
from tests.support.factories import UserFactory
from tests.support.helpers import layer
from tests.support.inprocess import consumer_of
from tests.support.runtime import run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("hub_thread_db")]


class CountingPort:
    """The host's port, counting viewers_of reads (and failing them when told to)."""

    def __init__(self, fail: bool = False) -> None:
        self.port, self.reads, self.fail = HostDomainPort(), 0, fail

    def viewers_of(self, user_id: uuid.UUID, viewer_ids: Any) -> Collection[uuid.UUID]:
        self.reads += 1
        if self.fail:
            raise ConnectionError("the database is unreachable")
        return self.port.viewers_of(user_id, viewer_ids)


def watchers_of(user: Any, viewers: list[Any], redis_url: str) -> list[tuple[HubConnection, list]]:
    """One connection per viewer, of one process, each watching `user`."""
    hub = HubProcess()
    connections = [consumer_of(v.id, {}, hub) for v in viewers]

    async def watch() -> None:
        shared = layer(redis_url)  # the process's one layer, so one fan-out
        for connection, _sent in connections:
            connection.channel_layer = shared
            await connection.groups.watch(frozenset({user.id}))

    run(watch())
    return connections


def deliver(connections: list[tuple[HubConnection, list]], message: dict[str, Any]) -> None:
    """One change handed to every watcher at once, as the process's reader does (one
    message object for all of them)."""

    async def all_at_once() -> None:
        every = asyncio.gather(*(layer_messages.dispatch(c, message) for c, _ in connections))
        await asyncio.wait_for(every, 10)  # a watcher left waiting fails here, by name

    run(all_at_once())


def told(sent: list[Any]) -> list[bool]:
    return [m["arguments"][0]["online"] for m in sent if m.get("target") == "presence"]


def test_a_block_ends_the_watch_at_the_next_checked_change_with_one_read(
    monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    alice, bob, carol, dave = (UserFactory() for _ in range(4))
    services.create_chat(alice.id, [bob.id, carol.id, dave.id], title="team")
    port = CountingPort()
    monkeypatch.setattr(visibility, "get_domain_port", lambda: port)
    connections = watchers_of(alice, [bob, carol, dave], redis_url)
    (bob_c, bob_sent), (carol_c, carol_sent), (_dave_c, dave_sent) = connections
    services.set_blocked(alice.id, bob.id, True)  # alice blocks bob after he began watching

    deliver(connections, change(alice.id, True, None))  # within the check: no read
    assert (told(bob_sent), told(carol_sent), port.reads) == ([True], [True], 0)

    monkeypatch.setattr(visibility, "RECHECK_AFTER", 0.0)  # every check is due now
    deliver(connections, change(alice.id, False, time.time()))
    assert port.reads == 1  # one read for the three watchers of the change
    assert (told(bob_sent), told(carol_sent), told(dave_sent)) == (
        [True],
        [True, False],
        [True, False],
    )
    assert alice.id not in bob_c.groups.watching.users  # bob watches her no more
    assert carol_c.groups.watching.users == frozenset({alice.id})

    deliver(connections, change(alice.id, True, None))
    assert told(bob_sent) == [True] and told(carol_sent) == [True, False, True]
    assert port.reads == 2  # bob was not asked about again: he is not watching


def test_leaving_the_last_shared_chat_ends_the_watch(
    monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    alice, bob, carol = UserFactory(), UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id, carol.id], title="team")
    monkeypatch.setattr(visibility, "RECHECK_AFTER", 0.0)
    connections = watchers_of(alice, [bob], redis_url)
    services.remove_participant(alice.id, chat.id, bob.id)
    deliver(connections, change(alice.id, True, None))
    ((bob_c, bob_sent),) = connections
    assert told(bob_sent) == [] and bob_c.groups.watching.users == frozenset()


def test_a_change_the_port_cannot_check_goes_out_and_the_watch_stays(
    monkeypatch: pytest.MonkeyPatch, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    alice, bob = UserFactory(), UserFactory()
    services.create_chat(alice.id, [bob.id])
    port = CountingPort(fail=True)
    monkeypatch.setattr(visibility, "get_domain_port", lambda: port)
    monkeypatch.setattr(visibility, "RECHECK_AFTER", 0.0)
    connections = watchers_of(alice, [bob], redis_url)
    deliver(connections, change(alice.id, True, None))
    ((bob_c, bob_sent),) = connections
    assert told(bob_sent) == [True] and bob_c.groups.watching.users == frozenset({alice.id})
    assert "presence change sent unchecked" in caplog.text


def test_an_answer_the_hub_cannot_read_still_answers_every_watcher(
    monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    """Whatever goes wrong with the read (here the port returns None), every watcher of
    the change is answered: the change goes out unchecked and the watches stay."""
    alice, bob, carol = UserFactory(), UserFactory(), UserFactory()
    services.create_chat(alice.id, [bob.id, carol.id], title="team")

    class Broken:
        def viewers_of(self, user_id: uuid.UUID, viewer_ids: Any) -> Any:
            return None

    monkeypatch.setattr(visibility, "get_domain_port", Broken)
    monkeypatch.setattr(visibility, "RECHECK_AFTER", 0.0)
    connections = watchers_of(alice, [bob, carol], redis_url)
    deliver(connections, change(alice.id, True, None))
    assert [told(sent) for _c, sent in connections] == [[True], [True]]
    assert all(c.groups.watching.users == {alice.id} for c, _ in connections)


def test_a_watch_made_while_the_check_was_read_decides_not_the_older_read(
    monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    """A WatchPresence that replaces the watch during a change's check (with a check of
    its own) is not undone by that older read's "may not see"."""
    alice, bob = UserFactory(), UserFactory()
    services.create_chat(alice.id, [bob.id])
    monkeypatch.setattr(visibility, "RECHECK_AFTER", 0.0)
    connections = watchers_of(alice, [bob], redis_url)
    ((bob_c, bob_sent),) = connections

    async def old_read_then_a_new_watch(hub: Any, user_id: uuid.UUID, viewers: Any) -> Any:
        await bob_c.groups.watch(frozenset({alice.id}))  # the client watched her again
        return frozenset()  # what the port said before that watch

    monkeypatch.setattr(HubProcess, "viewers_of", old_read_then_a_new_watch)
    deliver(connections, change(alice.id, True, None))
    assert bob_c.groups.watching.users == {alice.id} and told(bob_sent) == [True]


def test_a_check_is_not_queued_behind_the_reads_every_connect_makes(
    monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    """The checks read on a thread of their own: with the hub's read thread (the one
    every connect's reads share) held busy, a change is still checked and delivered."""
    alice, bob = UserFactory(), UserFactory()
    services.create_chat(alice.id, [bob.id])
    monkeypatch.setattr(visibility, "RECHECK_AFTER", 0.0)
    connections = watchers_of(alice, [bob], redis_url)
    ((_bob_c, bob_sent),) = connections
    busy, release = threading.Event(), threading.Event()

    @hub_read
    def a_slow_connect_read() -> None:
        busy.set()
        release.wait(30)

    async def scenario() -> None:
        held = asyncio.ensure_future(a_slow_connect_read())
        await asyncio.get_running_loop().run_in_executor(None, busy.wait, 10)
        try:
            every = (
                layer_messages.dispatch(c, change(alice.id, True, None)) for c, _ in connections
            )
            await asyncio.wait_for(asyncio.gather(*every), 10)
        finally:
            release.set()
            await held

    run(scenario())
    assert told(bob_sent) == [True]


def test_the_ports_default_asks_visible_users_once_per_viewer() -> None:
    class OneWay:
        """A host's visible_users that is not symmetric: a viewer sees the users whose
        ids sort after its own."""

        calls = 0

        def visible_users(self, viewer_id: uuid.UUID, user_ids: Any) -> Collection[uuid.UUID]:
            self.calls += 1
            return [u for u in user_ids if str(u) > str(viewer_id)]

    ids = sorted(uuid.uuid4() for _ in range(5))
    port = OneWay()
    viewers = DomainPort.viewers_of(port, ids[2], ids)  # type: ignore[arg-type]
    assert set(viewers) == {ids[0], ids[1]} and port.calls == 5


@pytest.mark.parametrize("title", ["", "a group the stranger made"])
def test_a_chat_a_stranger_opened_grants_presence_only_once_the_other_took_part(
    title: str,
) -> None:
    """Presence by consent (the project's port): anyone may open a chat with anyone, so
    sharing it shows the other's presence only once they took part (sent a message);
    its creator took part by creating it. Both reads of the rule agree."""
    stranger, bob = UserFactory(), UserFactory()
    chat = services.create_chat(stranger.id, [bob.id], title=title)
    port = HostDomainPort()
    assert set(port.visible_users(stranger.id, [bob.id])) == set()  # bob was never asked
    assert set(port.viewers_of(bob.id, [stranger.id])) == set()
    assert set(port.visible_users(bob.id, [stranger.id])) == {stranger.id}  # who opened it
    assert set(port.viewers_of(stranger.id, [bob.id])) == {bob.id}
    services.post_message(bob.id, chat.id, "who is this?")  # bob answers: he took part
    assert set(port.visible_users(stranger.id, [bob.id])) == {bob.id}
    assert set(port.viewers_of(bob.id, [stranger.id])) == {stranger.id}
