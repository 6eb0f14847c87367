"""The consumer's refusal paths, in-process through Channels' ASGI test communicator."""

import json
import time
import uuid
from types import SimpleNamespace
from typing import Any

import channels.db
import pytest
from channels.testing import WebsocketCommunicator

from messenger_realtime.conf.settings import load_hub_options
from messenger_realtime.hub.consumer import HubConsumer
from tests.support.runtime import run


@pytest.mark.parametrize("shutting_down", [True, False])
def test_a_refused_connection_disconnects_cleanly(
    shutting_down: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(HubConsumer, "accepting", not shutting_down)

    async def scenario() -> bool:
        communicator = WebsocketCommunicator(HubConsumer.as_asgi(), "/hubs/messenger")
        connected, _ = await communicator.connect()
        # Daphne then reports the socket gone; the consumer must wind down without error.
        await communicator.send_input({"type": "websocket.disconnect", "code": 1006})
        await communicator.wait()  # re-raises anything the consumer raised
        return bool(connected)

    # Shutting down, or no credentials at all: refused before accept, without an error.
    assert run(scenario()) is False


def test_an_event_reaches_the_socket_without_a_database_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Channels' own dispatch() hops to a thread for close_old_connections() before every
    handler; the hub's event path needs no database, so it must not pay that per event."""
    hops: list[int] = []
    monkeypatch.setattr(channels.db, "close_old_connections", lambda: hops.append(1))
    chat = uuid.uuid4()
    consumer = HubConsumer()
    consumer.user_id, consumer.chats, consumer.chat_keys = uuid.uuid4(), {chat}, {str(chat)}
    consumer.options = load_hub_options()
    consumer.loop = SimpleNamespace(time=time.monotonic)  # only its clock is read
    sent: list[dict[str, Any]] = []

    async def base_send(message: dict[str, Any]) -> None:
        sent.append(message)

    consumer.base_send = base_send
    event = {"chat": str(chat), "event": "message_received", "payload": {"seq": 7}}
    run(consumer.dispatch({"type": "realtime.event", **event}))
    assert hops == []
    assert [json.loads(m["text"].rstrip("\x1e")) for m in sent] == [
        {"type": 1, "target": "message_received", "arguments": [{"seq": 7}]}
    ]
