"""A dispatcher event is encoded once per protocol per process, however many local
connections receive it."""

import asyncio
import uuid
from typing import Any

import pytest

from messenger_realtime.conf.settings import load_hub_options
from messenger_realtime.hub.connection import HubConnection, layer_messages
from messenger_realtime.hub.credentials.tokens import Identity
from messenger_realtime.hub.process import HubProcess
from messenger_realtime.hub.protocols.json_protocol import JsonProtocol
from messenger_realtime.hub.protocols.messagepack import MessagePackProtocol
from tests.support.transports import FakeTransport


def test_an_event_is_encoded_once_per_protocol_for_every_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    encoded: list[str] = []
    for protocol in (JsonProtocol, MessagePackProtocol):
        original = protocol.invocation

        def counting(
            target: str, arguments: list[Any], _o: Any = original, _p: Any = protocol
        ) -> Any:
            encoded.append(_p.name)
            return _o(target, arguments)

        monkeypatch.setattr(protocol, "invocation", staticmethod(counting))

    async def scenario() -> list[Any]:
        frames = []
        message = {
            "type": "realtime.event",
            "event": "contact_removed",
            "payload": {"contactId": "c", "fileMeta": {"createdAt": "2024-05-01"}},
        }
        hub = HubProcess()
        for index in range(6):
            connection = HubConnection(
                hub=hub,
                connection_id=uuid.uuid4().hex,
                identity=Identity(uuid.uuid4(), None, None),
                token="a token",
                options=load_hub_options(),
                transport=FakeTransport(),
                channel_layer=None,
            )
            connection.protocol = (JsonProtocol if index % 2 else MessagePackProtocol)(32768)
            frames.append(await layer_messages.event_frame(connection, message))
        return frames

    frames = asyncio.run(scenario())
    assert sorted(encoded) == ["json", "messagepack"]
    assert len(set(frames)) == 2  # three connections of each protocol share its frame
