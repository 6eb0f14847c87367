"""Daphne's WebSocket protocol with the hub's transport rules (installed by hub/daphne/__init__.py,
install). The hub reaches it only through its ServerControls (hub/daphne/controls.py,
DaphneSocket), which set the `hub_` attributes below.

- Incoming limits: a frame or message over MAX_MESSAGE_SIZE + FRAME_SLACK gets the hub's
  Close message ({"type":7,"error":"... maximum message size ..."}, in MessagePack on a
  binary connection: the hub says which through `use_binary`) and a WebSocket close
  (1009), where Autobahn alone drops the TCP connection without a word. The limit binds
  what clients send only: Autobahn applies its message limit to outgoing messages too,
  and an event may be larger than anything a client may send.
- Send bound: before each outgoing message the connection's unsent bytes (Twisted's write
  the bound the hub set (`bound`: SEND_BUFFER_LIMIT); past it the hub's `overflow` is
  called once and it closes the connection with allowReconnect
  (WebSocketTransport._overflowed, in hub/transports/websocket.py). A client that keeps
  pinging but never reads is caught too: it is what it does not read that counts.
- Eager writes: a frame goes to the socket at once when nothing waits in Twisted's
  buffer, and only what the kernel does not take waits for the reactor. Twisted alone
  buffers every write and registers the socket for writability (two epoll_ctl calls and
  a loop turn per frame), about a third of the hub's CPU per delivery (docs/performance.md).
- Frames without Autobahn's general path where the hub's frames are plain: a message the
  hub sends goes out as one unmasked, unfragmented, uncompressed frame built here (what
  Autobahn's sendMessage and sendFrame build, minus their per-call assertions, settings
  and statistics), and a client's Ping that arrives alone in a read, as one masked frame,
  is recognised before Autobahn parses it (its frame parser, masker, UTF-8 validator and
  a debug log line formatted per read). An idle connection sends and receives little
  else: together they were most of its CPU (docs/performance.md). Anything else (a
  fragment, several frames in one read) takes Autobahn's path.
- permessage-deflate (deflate.py), when WEBSOCKET_DEFLATE is on and the client offers
  it: the hub's own frames carry it (a payload compressed once per process, RSV1 set),
  and a client's Ping compressed alone is recognised as the plain one is. Autobahn's
  general path keeps its state per message only (MessageDeflate).
- Memory of an open connection: the handshake's leftovers (the raw request, its parsed
  headers, the response, Daphne's cleaned headers and Autobahn's request object) are
  released once the connection is open, and Autobahn's send queue, used only by sync
  and chopped sends, is a list rather than a deque (a deque allocates a 64-slot block):
  together ~3 KB of every idle connection (docs/performance.md).
- The ASGI scope gets `scheme` (ws or wss), which Daphne leaves out for WebSockets, so the
  consumer's same-origin check can compare schemes (see scheme()).
- Keep-alive: a client's Ping (the exact record the clients send, JSON or MessagePack) is
  taken here once the connection says so (`take_pings`, once its delivery runs, sets
  its `heard`): it only tells the connection the client is alive, so it need not cross
  Daphne's application queue, the consumer and the protocol parser; idle connections
  receive little else. Daphne's own WebSocket pings are not sent: the hub's keep-alive
  (a Ping every KEEPALIVE_INTERVAL, the client's CLIENT_TIMEOUT) is the liveness check,
  as ASP.NET's.
"""

import fcntl
import struct
import termios
from collections.abc import Callable
from typing import Any

from daphne.ws_protocol import WebSocketProtocol

from messenger_realtime.conf.settings import load_hub_options
from messenger_realtime.hub.daphne.deflate import (
    FrameDeflater,
    MessageDeflate,
    NoContextTakeover,
    deflated,
)
from messenger_realtime.hub.daphne.deflate import accept as accept_deflate
from messenger_realtime.hub.protocols import json_protocol, messagepack
from messenger_realtime.hub.protocols.base import message_too_big

# Room beyond MAX_MESSAGE_SIZE for a record separator and a small record (a ping) sharing
# the frame; a record over MAX_MESSAGE_SIZE is refused by the hub itself.
FRAME_SLACK = 1024
MESSAGE_TOO_BIG = 1009  # WebSocket close code
# A client's Ping record, as the official clients write it: JSON text, MessagePack binary.
PINGS = {False: b'{"type":6}\x1e', True: b"\x02\x91\x06"}
# A client's Ping as one masked frame: FIN and the text (JSON) or binary (MessagePack)
# opcode, then the mask bit with the record's length; the 4-byte mask and the masked
# record follow.
PING_FRAME_HEADS = {
    bytes((0x81, 0x80 | len(PINGS[False]))): PINGS[False],
    bytes((0x82, 0x80 | len(PINGS[True]))): PINGS[True],
}
# The same Ping compressed alone (permessage-deflate without context takeover, as the
# hub asks; browsers compress every message), as zlib writes it: a fixed-Huffman block
# (levels 1-9) or a stored one (level 0). RSV1 (0x40) marks a compressed message.
DEFLATED_PING_FRAME_HEADS = {
    bytes((0xC2 if binary else 0xC1, 0x80 | len(packed))): packed
    for binary, ping in PINGS.items()
    for packed in (deflated(ping), deflated(ping, level=0))
}
PING_FRAME_MAX = 6 + max(
    len(ping) for ping in [*PING_FRAME_HEADS.values(), *DEFLATED_PING_FRAME_HEADS.values()]
)


def is_ping_frame(data: bytes, deflate: bool = False) -> bool:
    """Whether `data` is exactly one masked client frame carrying a hub Ping record,
    compressed too when the connection negotiated permessage-deflate (`deflate`)."""
    head = data[:2]
    ping = PING_FRAME_HEADS.get(head)
    if ping is None and deflate:
        ping = DEFLATED_PING_FRAME_HEADS.get(head)
    if ping is None or len(data) != 6 + len(ping):
        return False
    mask = data[2:6]
    return bytes(octet ^ mask[i & 3] for i, octet in enumerate(data[6:])) == ping


def server_frame(payload: bytes, binary: bool, compressed: bool = False) -> bytes:
    """One final, unmasked frame of a text or binary message (RFC 6455 5.2), byte for byte
    what Autobahn's sendFrame builds for a server's unfragmented message; `compressed`:
    its payload is permessage-deflate's (RSV1, RFC 7692 6)."""
    first = (0x82 if binary else 0x81) | (0x40 if compressed else 0)
    size = len(payload)
    if size <= 125:
        return bytes((first, size)) + payload
    if size <= 0xFFFF:
        return struct.pack("!BBH", first, 126, size) + payload
    return struct.pack("!BBQ", first, 127, size) + payload


# What Autobahn and Daphne keep of the opening handshake and read no more once the
# connection is open (Autobahn's processHandshake and succeedHandshake, Daphne's onConnect).
HANDSHAKE_LEFTOVERS = (
    "http_request_data",
    "http_status_line",
    "http_headers",
    "http_request_uri",
    "http_request_path",
    "http_request_params",
    "http_request_host",
    "http_response_data",
    "websocket_origin",
    "websocket_extensions",
    "websocket_extensions_in_use",  # Autobahn's compression object, replaced (onOpen)
    "websocket_protocols",
    "_wskey",
    "clean_headers",
    "_raw_query_string",
)


class SendQueue(list):  # type: ignore[type-arg]
    """Autobahn's queue of frames waiting to be sent in order, for sync and chopped
    sends only (the hub makes neither): an empty list is 56 bytes, a deque 760."""

    __slots__ = ()

    def popleft(self) -> Any:
        return self.pop(0)


class UpgradeRequest:
    """What Daphne reads of Autobahn's request once the connection is open: its path
    (access log lines). Autobahn's keeps every header, parsed, for the socket's life."""

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        self.path = path


def incoming_limit(max_message_size: int) -> int:
    """Daphne's frame and message limits for a hub with this MAX_MESSAGE_SIZE."""
    return max_message_size + FRAME_SLACK


def socket_unacknowledged(transport: Any) -> int:
    """Bytes the kernel holds for the peer, sent or not, that it has not acknowledged
    (Linux SIOCOUTQ); 0 where that cannot be read."""
    try:
        fd = transport.getHandle().fileno()
        return int(struct.unpack("i", fcntl.ioctl(fd, termios.TIOCOUTQ, b"\0\0\0\0"))[0])
    except (AttributeError, OSError, ValueError, TypeError):
        return 0


def twisted_unsent(transport: Any) -> int:
    """Bytes written to a Twisted TCP transport and not yet handed to the kernel."""
    data = getattr(transport, "dataBuffer", b"")
    return len(data) - getattr(transport, "offset", 0) + getattr(transport, "_tempDataLen", 0)


def eager_writable(transport: Any) -> bool:
    """A plain TCP transport that is connected, not closing and has nothing buffered, so
    bytes written to its socket now keep their order. TLS and anything else: Twisted."""
    return (
        getattr(transport, "TLS", True) is False
        and hasattr(transport, "socket")
        and transport.connected
        and not transport.disconnecting
        and not getattr(transport, "_writeDisconnected", True)
        and twisted_unsent(transport) == 0
    )


class SocketSettings:
    """What the hub tells one socket through its controls (controls.py): the send bound
    and what to call past it, the protocol's kind, what a Ping means. One object, set on
    the protocol as its scope is made: the four as attributes of their own, set later on
    Autobahn's large instance dict, grew it by about 3 KB a connection
    (`bench/connections.py --tracemalloc`)."""

    __slots__ = ("binary", "deaf", "heard", "limit", "overflow")

    def __init__(self) -> None:
        self.limit = 0  # SEND_BUFFER_LIMIT's bytes (0: none yet)
        self.overflow: Callable[[int], None] | None = None
        self.binary = False
        self.heard: Callable[[], None] | None = None
        self.deaf = False  # read nothing more, for good (stop_reading: a flood)


_UNSET = SocketSettings()  # a socket's until its scope is made (read, never written)


class HubWebSocketProtocol(WebSocketProtocol):  # type: ignore[misc]
    """One hub connection's WebSocket under Daphne."""

    # Autobahn's settings, the factory's (_connectionMade); onConnect narrows these two
    # per connection.
    maxFramePayloadSize: int
    maxMessagePayloadSize: int
    # What the hub tells it, per connection, through its controls (controls.py).
    hub: SocketSettings = _UNSET
    overflowed = False
    _written = 0  # bytes written since the socket was last asked (amortises the syscall)
    _settings_of: Any = None  # the factory whose settings the class holds
    # The process's compressed payloads (deflate.py), set by install_protocols.
    deflater: FrameDeflater | None = None
    request: Any  # Autobahn's ConnectionRequest, then an UpgradeRequest once open
    _perMessageCompress: Any  # Autobahn's permessage-deflate, then a MessageDeflate once open

    def _connectionMade(self) -> None:
        """Autobahn copies its forty-odd settings from the factory onto every socket
        (about 2.5 KB of each idle connection's memory): the first socket of a factory
        puts them on this class instead, where every later socket of it finds them
        (Daphne has one factory). A socket of another factory still gets its own copy."""
        cls = type(self)
        factory = self.factory
        if cls._settings_of is None:
            for name in self.CONFIG_ATTRS:
                if name == "perMessageCompressionAccept":
                    continue  # the hub's own (below), not Daphne's, which refuses every offer
                value = getattr(factory, name)
                # A function setting must stay a plain function, not become a method
                # of every socket.
                setattr(cls, name, staticmethod(value) if callable(value) else value)
            cls._settings_of = factory
        if cls._settings_of is not factory:
            for name in self.CONFIG_ATTRS:
                if name != "perMessageCompressionAccept":
                    setattr(self, name, getattr(factory, name))
        super()._connectionMade()
        self.send_queue = SendQueue()

    def onConnect(self, request: Any) -> Any:
        options = load_hub_options()
        limit = incoming_limit(options.max_message_size)
        # Daphne's command-line limits apply too; never let a larger one through.
        self.maxFramePayloadSize = min(self.maxFramePayloadSize or limit, limit)
        self.maxMessagePayloadSize = min(self.maxMessagePayloadSize or limit, limit)
        self.max_message_size = options.max_message_size
        return super().onConnect(request)

    def perMessageCompressionAccept(self, offers: list[Any]) -> NoContextTakeover | None:
        """Autobahn asks once per handshake with the client's permessage-compress offers."""
        if self.deflater is None or not load_hub_options().websocket_deflate:
            return None
        return accept_deflate(offers)

    def onOpen(self) -> None:
        negotiated = self._perMessageCompress
        if negotiated is not None:  # before any message: Autobahn's, with ours
            self._perMessageCompress = MessageDeflate.from_negotiated(negotiated)
        super().onOpen()  # Daphne's access log line, which reads the request's path
        for name in HANDSHAKE_LEFTOVERS:
            setattr(self, name, None)
        self.request = UpgradeRequest(self.request.path)

    def pause_reading(self) -> None:
        """Read nothing from the socket for now (hub/daphne/server.py, InputQueue: the
        application is behind), or for good (its controls' stop_reading)."""
        self.transport.pauseProducing()

    def resume_reading(self) -> None:
        """Read again, unless the hub stopped reading it for good."""
        if not self.hub.deaf:
            self.transport.resumeProducing()

    def dataReceived(self, data: bytes) -> None:
        heard = self.hub.heard
        if (
            heard is not None
            and len(data) <= PING_FRAME_MAX
            and self.state == self.STATE_OPEN
            and not self.data  # nothing of an earlier frame waits to be parsed
            and self.current_frame is None
            and not self.inside_message
            and not self.muted
            and is_ping_frame(data, self._perMessageCompress is not None)
        ):
            heard()  # a Ping alone in this read: the client is alive, nothing more to do
            return
        super().dataReceived(data)

    def onMessage(self, payload: bytes, isBinary: bool) -> None:
        heard = self.hub.heard
        if heard is not None and payload == PINGS[isBinary] and not self.muted:
            heard()  # a Ping: the client is alive, nothing more to do
            return
        super().onMessage(payload, isBinary)

    def check_timeouts(self) -> None:
        """Daphne's periodic check (every 2 s, every connection): its connect timeout and
        its WebSocket lifetime, but no WebSocket ping of its own (see above)."""
        if self.state == self.STATE_CONNECTING:
            if self.duration() > self.server.websocket_connect_timeout:
                self.serverReject()
        elif 0 <= self.server.websocket_timeout < self.duration():
            self.serverClose()

    def _max_message_size_exceeded(self, msg_size: int, max_msg_size: int, reason: str) -> None:
        """The hub's Close message first, then a WebSocket close instead of a TCP drop."""
        if self.state == self.STATE_OPEN:
            too_big = message_too_big(self.max_message_size)
            if self.hub.binary:
                self._write(messagepack.close(too_big), True)
            else:
                self._write(json_protocol.close(too_big).encode())
        self.failByDrop = False
        self._fail_connection(MESSAGE_TOO_BIG, reason)

    def sendMessage(
        self,
        payload: bytes,
        isBinary: bool = False,
        fragmentSize: int | None = None,
        sync: bool = False,
        doNotCompress: bool = False,
    ) -> None:
        if not self.overflowed and self.hub.limit:
            self._check_send_buffer()
        if fragmentSize is None and not sync and self._frames_are_plain():
            deflate, deflater = self._perMessageCompress, self.deflater
            packed = None
            if deflate is not None and deflater is not None and not doNotCompress:
                packed = deflater.compressed(payload, deflate.server_max_window_bits)
            if packed is None:
                self.sendData(server_frame(payload, isBinary))
            else:
                self.sendData(server_frame(packed, isBinary, compressed=True))
        else:
            self._write(payload, isBinary, fragmentSize, sync, doNotCompress)
        self._written += len(payload)

    def _frames_are_plain(self) -> bool:
        """Open, between messages, and none of the settings that change a frame's bytes
        (compression other than the hub's, automatic fragments, masked server frames) or
        log them."""
        deflate = self._perMessageCompress
        return (
            self.state == self.STATE_OPEN
            and self.send_state == self.SEND_STATE_GROUND
            and (deflate is None or (type(deflate) is MessageDeflate and self.deflater is not None))
            and not self.autoFragmentSize
            and not self.maskServerFrames
            and not self.logFrames
            and not self.trackedTimings
        )

    def _write(self, payload: bytes, *args: Any) -> None:
        # Autobahn checks outgoing messages against the incoming message limit: lift it
        # for this call only (synchronous, so no incoming frame sees it lifted).
        limit, self.maxMessagePayloadSize = self.maxMessagePayloadSize, 0
        try:
            super().sendMessage(payload, *args)
        finally:
            self.maxMessagePayloadSize = limit

    def sendData(self, data: bytes, sync: bool = False, chopsize: int | None = None) -> None:
        """Autobahn's write of a frame's bytes, made eager where it safely can be."""
        transport = self.transport
        if sync or chopsize or self.send_queue or not eager_writable(transport):
            super().sendData(data, sync, chopsize)
            return
        try:
            sent = transport.socket.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:  # a reset or a closed socket: Twisted's write notices and reports it
            sent = 0
        if sent < len(data):
            transport.write(data[sent:])
        if self.state == self.STATE_OPEN:
            self.trafficStats.outgoingOctetsWireLevel += len(data)

    def _check_send_buffer(self) -> None:
        """Cheap on the hot path: Twisted's buffer every time, the socket's queue (a
        syscall) once per eighth of the bound written."""
        unsent = twisted_unsent(self.transport)
        if self._written >= self.hub.limit // 8:
            self._written = 0
            unsent += socket_unacknowledged(self.transport)
        if unsent > self.hub.limit:
            self.overflowed = True
            if self.hub.overflow is not None:
                self.hub.overflow(unsent)


def scheme(connection: Any) -> str:
    """ws or wss: what the client used (X-Forwarded-Proto when Daphne trusts proxy
    headers, else whether this socket is TLS)."""
    forwarded = getattr(connection, "client_scheme", None)
    if forwarded:
        return "wss" if str(forwarded).lower() in ("https", "wss") else "ws"
    from twisted.internet.interfaces import ISSLTransport

    return "wss" if ISSLTransport.providedBy(connection.transport) else "ws"
