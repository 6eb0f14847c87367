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

from messenger_realtime.conf.settings import load_hub_options
from messenger_realtime.contracts.events import HubTarget
from messenger_realtime.hub.auth import Identity
from messenger_realtime.hub.connection import HubConnection
from messenger_realtime.hub.protocols import JsonProtocol
from messenger_realtime.transport.control import session_digest
from messenger_realtime.transport.groups import layer_group
from tests.support.factories import UserFactory
from tests.support.runtime import run


class Recorder:
    name, binary_ok, inherent_keepalive = "WebSockets", True, False

    def __init__(self) -> None:
        self.sent: list[Any] = []
        self.closed = asyncio.Event()

    async def send(self, frame: str) -> None:
        self.sent.append(json.loads(frame.rstrip("\x1e")))

    async def close(self) -> None:
        self.closed.set()

    def use_binary(self, binary: bool) -> None: ...

    def idle_since(self) -> None:
        return None

    def lingers(self) -> bool:
        return False


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
        for session in (*sessions, None):  # two sessions, and a token connection
            recorder = Recorder()
            digest = session_digest(session) if session else None
            connection = HubConnection(
                connection_id=uuid.uuid4().hex,
                identity=Identity(user.id, None, digest),
                token=None if session else "a token",
                options=load_hub_options(),
                transport=recorder,
                channel_layer=layer,
            )
            connection.handshaken, connection.protocol = True, JsonProtocol(32768)
            await connection.fanout.join(layer_group(HubTarget.user(user.id)), connection.inbox)
            connection._start_delivery()
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
    assert first.sent == [{"type": 7, "allowReconnect": True}]
    for recorder in (second, token):
        assert not recorder.closed.is_set()
        assert [m.get("target") for m in recorder.sent] == ["contact_updated"]


def test_only_a_digest_of_the_session_key_travels() -> None:
    key = "k" * 32
    digest = session_digest(key)
    assert key not in digest and len(digest) == 64 and digest == session_digest(key)
