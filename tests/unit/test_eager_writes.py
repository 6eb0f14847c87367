"""Daphne's WebSocket protocol writes a frame to the socket at once when nothing waits in
Twisted's buffer (hub/daphne/websocket_protocol.py), and leaves the rest, in order, to Twisted."""

import collections
import socket
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from messenger_realtime.hub.daphne.websocket_protocol import HubWebSocketProtocol, eager_writable


class Transport:
    """A Twisted TCP transport's attributes that matter here, over a real socket."""

    TLS = False
    connected, disconnecting, _writeDisconnected = True, False, False
    dataBuffer, offset, _tempDataLen, producer = b"", 0, 0, None

    def __init__(self, sock: socket.socket) -> None:
        self.socket = sock
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)
        self._tempDataLen += len(data)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, peer = socket.socketpair()
    ours.setblocking(False)
    yield ours, peer
    ours.close()
    peer.close()


def protocol_on(transport: Transport) -> Any:
    protocol: Any = HubWebSocketProtocol.__new__(HubWebSocketProtocol)
    protocol.transport, protocol.send_queue = transport, collections.deque()
    protocol.state = protocol.STATE_OPEN
    protocol.trafficStats = SimpleNamespace(outgoingOctetsWireLevel=0)
    protocol.logOctets, protocol.log = False, SimpleNamespace(debug=lambda *a, **k: None)
    return protocol


def test_a_frame_goes_to_the_socket_without_twisted(pair: Any) -> None:
    ours, peer = pair
    transport = Transport(ours)
    protocol_on(transport).sendData(b"frame")
    assert peer.recv(100) == b"frame"
    assert transport.written == []


def test_what_the_kernel_does_not_take_waits_in_twisted_and_keeps_its_order(pair: Any) -> None:
    ours, peer = pair
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    transport = Transport(ours)
    protocol = protocol_on(transport)
    data = bytes(range(256)) * 4096  # 1 MiB: far more than the socket takes
    protocol.sendData(data)
    protocol.sendData(b"next")  # Twisted holds bytes now: this one queues behind them
    assert len(transport.written) == 2 and transport.written[1] == b"next"
    taken = len(data) - len(transport.written[0])
    assert 0 < taken < len(data)
    assert transport.written[0] == data[taken:]
    received = b""
    while len(received) < taken:
        received += peer.recv(taken - len(received))
    assert received == data[:taken]


def test_tls_or_a_closing_transport_is_left_to_twisted(pair: Any) -> None:
    ours, _ = pair
    transport = Transport(ours)
    assert eager_writable(transport)
    for attribute, value in (("TLS", True), ("disconnecting", True), ("connected", False)):
        other = Transport(ours)
        setattr(other, attribute, value)
        assert not eager_writable(other)
