"""The hub's own frames where they are plain (hub/daphne/websocket_protocol.py): what it sends is
byte for byte what Autobahn would send, and a client's Ping is known before Autobahn
parses it, only when it is exactly one such frame."""

import os
from types import SimpleNamespace
from typing import Any

import pytest
from autobahn.websocket.protocol import WebSocketProtocol

from messenger_realtime.hub.daphne.websocket_protocol import (
    PINGS,
    HubWebSocketProtocol,
    SocketSettings,
    is_ping_frame,
    server_frame,
)


def autobahn_frame(payload: bytes, opcode: int, masked: bool = False, fin: bool = True) -> bytes:
    """What Autobahn's own sendFrame writes: a server's frame, or a client's (`masked`,
    with a random mask, as a client's frames are)."""
    sent: list[bytes] = []
    protocol: Any = SimpleNamespace(
        factory=SimpleNamespace(isServer=True),
        maskServerFrames=masked,
        applyMask=True,
        logFrames=False,
        trafficStats=SimpleNamespace(outgoingWebSocketFrames=0),
        sendData=lambda data, sync=False, chopsize=None: sent.append(data),
    )
    WebSocketProtocol.sendFrame(protocol, opcode=opcode, payload=payload, fin=fin)
    return sent[0]


@pytest.mark.parametrize("size", [0, 1, 125, 126, 127, 65535, 65536, 70000])
@pytest.mark.parametrize("binary", [False, True])
def test_a_plain_frame_is_autobahns_byte_for_byte(size: int, binary: bool) -> None:
    payload = os.urandom(size)
    assert server_frame(payload, binary) == autobahn_frame(payload, 2 if binary else 1)


@pytest.mark.parametrize("binary", [False, True])
def test_a_clients_ping_frame_is_known_whatever_its_mask(binary: bool) -> None:
    for _ in range(50):
        frame = autobahn_frame(PINGS[binary], 2 if binary else 1, masked=True)
        assert is_ping_frame(frame)


@pytest.mark.parametrize(
    "frame",
    [
        autobahn_frame(b'{"type":6}\x1e', 2, masked=True),  # the JSON record as binary
        autobahn_frame(b"\x02\x91\x06", 1, masked=True),  # the MessagePack one as text
        autobahn_frame(b'{"type":7}\x1e', 1, masked=True),  # another record, same size
        autobahn_frame(b'{"type":6}\x1e', 1),  # unmasked: a client must mask
        autobahn_frame(b'{"type":6}\x1e', 1, masked=True, fin=False),  # a fragment
        autobahn_frame(b'{"type":6}\x1e', 1, masked=True) * 2,  # two frames in one read
        autobahn_frame(b'{"type":6}\x1e', 1, masked=True)[:-1],  # a frame cut short
        b"",
    ],
)
def test_anything_else_is_left_to_autobahn(frame: bytes) -> None:
    assert not is_ping_frame(frame)


def open_protocol(heard: Any) -> Any:
    protocol: Any = HubWebSocketProtocol.__new__(HubWebSocketProtocol)
    protocol.hub = SocketSettings()
    protocol.hub.heard = heard
    protocol.state, protocol.data = protocol.STATE_OPEN, b""
    protocol.current_frame, protocol.inside_message = None, False
    protocol._perMessageCompress = None  # no permessage-deflate negotiated
    return protocol


def test_a_ping_alone_in_a_read_is_heard_without_autobahn(monkeypatch: Any) -> None:
    heard: list[int] = []
    parsed: list[bytes] = []
    monkeypatch.setattr(WebSocketProtocol, "_dataReceived", lambda self, data: parsed.append(data))
    protocol = open_protocol(lambda: heard.append(1))
    ping = autobahn_frame(PINGS[False], 1, masked=True)
    protocol.dataReceived(ping)
    assert heard == [1] and parsed == []
    # Part of an earlier frame waits to be parsed: this read belongs to Autobahn.
    protocol.data = b"\x81"
    protocol.dataReceived(ping)
    assert heard == [1] and parsed == [ping]
