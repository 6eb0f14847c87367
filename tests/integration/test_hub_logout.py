"""A logout closes the hub connections its Django session opened, and only those: the
user's other sessions and token connections stay. Real database (sessions), real Redis
(the control message through the user's group), the hub's own fan-out."""

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.db import connections
from django.test import Client

from messenger_realtime.backplane.control import session_digest
from messenger_realtime.backplane.group_names import layer_group
from messenger_realtime.conf.settings import load_hub_options
from messenger_realtime.contracts.events import HubTarget
from messenger_realtime.hub.connection import HubConnection
from messenger_realtime.hub.connection.authentication import SESSION_ENDED
from messenger_realtime.hub.credentials.sessions import session_holds
from messenger_realtime.hub.credentials.tokens import Identity
from messenger_realtime.hub.process import HubProcess
from messenger_realtime.hub.protocols import JsonProtocol
from tests.support.factories import UserFactory
from tests.support.runtime import run
from tests.support.transports import FakeTransport


class Recorder(FakeTransport):
    def __init__(self) -> None:
        super().__init__()
        self.sent: list[Any] = []
        self.got_event = asyncio.Event()

    async def send(self, frame: str) -> None:
        for record in frame.split("\x1e")[:-1]:
            self.sent.append(json.loads(record))
            if "target" in self.sent[-1]:
                self.got_event.set()


@pytest.fixture
def thread_db() -> Iterator[None]:
    yield
    run(sync_to_async(connections.close_all)())


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("thread_db")
def test_a_logout_closes_the_connections_of_that_session_only() -> None:
    user = UserFactory()
    browser, other_browser = Client(), Client()
    browser.force_login(user)
    other_browser.force_login(user)
    sessions = [c.session.session_key for c in (browser, other_browser)]
    assert all(sessions) and sessions[0] != sessions[1]

    async def scenario() -> list[Recorder]:
        layer = get_channel_layer()
        recorders = []
        hub = HubProcess()
        for session in (*sessions, None):  # two sessions, and a token connection
            recorder = Recorder()
            digest = session_digest(session) if session else None
            connection = HubConnection(
                hub=hub,
                connection_id=uuid.uuid4().hex,
                identity=Identity(user.id, None, digest),
                token=None if session else "a token",
                options=load_hub_options(),
                transport=recorder,
                channel_layer=layer,
            )
            connection.handshaken, connection.protocol = True, JsonProtocol(32768)
            groups = connection.groups
            await groups.fanout.join(layer_group(HubTarget.user(user.id)), groups.inbox)
            connection.outbound.start()
            recorders.append(recorder)
        await sync_to_async(browser.logout)()  # Django's user_logged_out, in a thread
        await asyncio.wait_for(recorders[0].closed.wait(), 10)
        # A message after the logout's reaches all three: the other two are still served.
        await layer.group_send(
            layer_group(HubTarget.user(user.id)),
            {"type": "realtime.event", "event": "contact_updated", "payload": {"n": 1}},
        )
        for recorder in recorders[1:]:
            for _ in range(1000):
                if recorder.sent:
                    break
                await asyncio.sleep(0.005)
        return recorders

    first, second, token = run(scenario())
    # For good: a reconnect would find no session.
    assert first.sent == [{"type": 7, "error": f"Connection closed with an error. {SESSION_ENDED}"}]
    for recorder in (second, token):
        assert not recorder.closed.is_set()
        assert [m.get("target") for m in recorder.sent] == ["contact_updated"]


def test_only_a_digest_of_the_session_key_travels() -> None:
    key = "k" * 32
    digest = session_digest(key)
    assert key not in digest and len(digest) == 64 and digest == session_digest(key)


@pytest.mark.django_db(transaction=True)
def test_a_session_holds_while_it_exists_and_is_its_users() -> None:
    user, other = UserFactory(), UserFactory()
    browser = Client()
    browser.force_login(user)
    key = browser.session.session_key
    assert key is not None
    assert session_holds(key, user.id) and not session_holds(key, other.id)
    browser.logout()
    assert not session_holds(key, user.id)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("thread_db")
def test_a_resume_with_a_session_logged_out_since_it_authenticated_is_closed() -> None:
    """A stateful connection may resume with another session of its user (a sign-in
    since replaced the cookie). A logout of that session between the resume's
    authentication and the resume names a session the connection did not have yet:
    the resume reads the session again and closes it."""
    user = UserFactory()
    first, second = Client(), Client()
    first.force_login(user)
    second.force_login(user)
    keys = [c.session.session_key or "" for c in (first, second)]

    async def scenario() -> tuple[Recorder, HubConnection]:
        recorder = Recorder()
        connection = HubConnection(
            hub=HubProcess(),
            connection_id=uuid.uuid4().hex,
            identity=Identity(user.id, None, session_digest(keys[0]), keys[0]),
            token=None,
            options=load_hub_options(),
            transport=recorder,
            channel_layer=get_channel_layer(),
            stateful_allowed=True,
        )
        await connection.open()
        await connection.receive('{"protocol":"json","version":2}\x1e{"type":6}\x1e')
        # Authenticated (as the upgrade would), then logged out: the message names the
        # second session, which the connection does not have yet.
        resumed_as = Identity(user.id, None, session_digest(keys[1]), keys[1])
        await sync_to_async(second.logout)()
        # Anything after that message through the user's group: once it is on the wire,
        # the connection has handled (and ignored) the logout's message.
        await get_channel_layer().group_send(
            layer_group(HubTarget.user(user.id)),
            {"type": "realtime.event", "event": "contact_updated", "payload": {"n": 1}},
        )
        await asyncio.wait_for(recorder.got_event.wait(), 10)
        await connection.transport_lost(recorder, resumable=True)
        resumed = Recorder()
        await connection.resume(resumed, resumed_as, None)
        await asyncio.wait_for(resumed.closed.wait(), 10)
        return resumed, connection

    resumed, connection = run(scenario())
    assert resumed.sent == [
        {"type": 7, "error": f"Connection closed with an error. {SESSION_ENDED}"}
    ]
    assert connection.ended
