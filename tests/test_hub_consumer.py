"""The consumer's refusal paths, in-process through Channels' ASGI test communicator."""

import pytest
from channels.testing import WebsocketCommunicator

from messenger_realtime.hub.consumer import HubConsumer

from .conftest import run


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
