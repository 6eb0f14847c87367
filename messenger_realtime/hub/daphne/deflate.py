"""permessage-deflate (RFC 7692) on the hub's WebSockets under Daphne, when
WEBSOCKET_DEFLATE is on and the client offers it (browsers and the official JavaScript
client under Node do): docs/performance.md, "Bytes on the wire", has the figures.

Three rules keep it within the hub's bounds:

- No context takeover either way. The server compresses every message on its own
  (`server_no_context_takeover`) and asks the client to do the same
  (`client_no_context_takeover`, which every client must honour). zlib's state with a
  32 KiB window is about 300 KB a connection while it lives, where an idle connection
  may cost 20 KB in all: here it lives for one message and is freed after it
  (MessageDeflate), so an idle connection holds none.
- Compressed once per process, not once per connection. Without context takeover a
  message's compressed bytes depend on the message alone, and a fan-out sends the same
  frame to every member of a chat: FrameDeflater keeps the last few payloads'
  compressed bytes, so the second and later deliveries of an event cost a dictionary
  lookup instead of a deflate.
- Only what gets smaller. A payload under MIN_COMPRESSED bytes (a Ping, an Ack, the
  handshake's answer, a completion) goes out as it is: deflate's framing would make it
  larger, and RFC 7692 lets each message say whether it is compressed (RSV1).

What a client sends may be compressed too: Autobahn inflates it (its limits apply to
the inflated size), with a decompressor made per message. A client's Ping compressed as
zlib compresses it alone is recognised before Autobahn parses it, as the uncompressed
one is (websocket_protocol.py, DEFLATED_PING_FRAME_HEADS).
"""

import zlib
from typing import Any

from autobahn.websocket.compress_deflate import (
    PerMessageDeflate,
    PerMessageDeflateOffer,
    PerMessageDeflateOfferAccept,
)

# Below this a payload goes out uncompressed: deflate adds a block header and its end
# marker, and what the hub sends this small (Pings, Acks, completions) barely shrinks.
MIN_COMPRESSED = 128
# FrameDeflater's bound: payloads remembered and their bytes (keys and values). A
# fan-out sends one event's frame to all its local members before the next event's, so
# a few dozen payloads cover interleaved chats; a payload over CACHED_PAYLOAD_MAX (a
# batch's large frame, unlikely to repeat byte for byte) is compressed but not kept.
CACHED_PAYLOADS = 64
CACHED_BYTES = 1024 * 1024
CACHED_PAYLOAD_MAX = 64 * 1024
DEFAULT_WINDOW_BITS = zlib.MAX_WBITS  # 15: what browsers and zlib use
MEM_LEVEL = 8  # zlib's default
_UNKNOWN = object()


def deflated(
    payload: bytes, window_bits: int = DEFAULT_WINDOW_BITS, level: int = zlib.Z_DEFAULT_COMPRESSION
) -> bytes:
    """A message's payload compressed on its own (RFC 7692 7.2.1): deflate, a sync
    flush, and its trailing empty block's 00 00 ff ff removed."""
    compressor = zlib.compressobj(level, zlib.DEFLATED, -window_bits, MEM_LEVEL)
    return (compressor.compress(payload) + compressor.flush(zlib.Z_SYNC_FLUSH))[:-4]


class FrameDeflater:
    """The process's compressed payloads: each distinct payload is deflated once and
    reused while it is recent (every deliverer of one fan-out asks for the same bytes).
    One per process (hub/daphne/server.py, install_protocols), held by the protocol
    class as its factory's settings are."""

    __slots__ = ("_bytes", "_recent", "compressions", "hits")

    def __init__(self) -> None:
        # (window bits, payload) -> compressed, or None: not smaller; oldest first.
        self._recent: dict[tuple[int, bytes], bytes | None] = {}
        self._bytes = 0
        self.compressions = 0  # deflates run (tests and the bench read them)
        self.hits = 0  # payloads found already compressed

    def compressed(self, payload: bytes, window_bits: int) -> bytes | None:
        """`payload` compressed with this window, or None when that is not smaller."""
        if len(payload) < MIN_COMPRESSED:
            return None
        key = (window_bits, payload)
        known = self._recent.get(key, _UNKNOWN)
        if known is not _UNKNOWN:
            self.hits += 1
            return known  # type: ignore[return-value]
        self.compressions += 1
        packed = deflated(payload, window_bits)
        smaller = packed if len(packed) < len(payload) else None
        if len(payload) <= CACHED_PAYLOAD_MAX:
            self._remember(key, smaller)
        return smaller

    def _remember(self, key: tuple[int, bytes], packed: bytes | None) -> None:
        recent = self._recent
        self._bytes += len(key[1]) + (len(packed) if packed is not None else 0)
        recent[key] = packed
        while len(recent) > CACHED_PAYLOADS or self._bytes > CACHED_BYTES:
            oldest = next(iter(recent))
            gone = recent.pop(oldest)
            self._bytes -= len(oldest[1]) + (len(gone) if gone is not None else 0)


class MessageDeflate(PerMessageDeflate):
    """A connection's permessage-deflate state, for Autobahn's general path (what a
    client sends; a message the hub's own frames cannot carry): as Autobahn's, but the
    compressor and decompressor are freed at the end of each message, as no context
    takeover allows, where Autobahn keeps both for the connection's life."""

    @classmethod
    def from_negotiated(cls, negotiated: Any) -> "MessageDeflate":
        """Ours, with what Autobahn's PerMessageDeflate negotiated."""
        return cls(
            negotiated._is_server,
            negotiated.server_no_context_takeover,
            negotiated.client_no_context_takeover,
            negotiated.server_max_window_bits,
            negotiated.client_max_window_bits,
            negotiated.mem_level,
            negotiated.max_message_size,
        )

    def end_compress_message(self) -> bytes:
        data: bytes = super().end_compress_message()  # type: ignore[no-untyped-call]
        if self.server_no_context_takeover:
            self._compressor = None
        return data

    def end_decompress_message(self) -> None:
        super().end_decompress_message()  # type: ignore[no-untyped-call]
        if self.client_no_context_takeover:
            self._decompressor = None


class NoContextTakeover(PerMessageDeflateOfferAccept):
    """The hub's answer to an offer: no context takeover either way. Autobahn's says
    `server_no_context_takeover` only when the client asked for it; saying it always
    lets the client free its decompressor between messages too."""

    def __init__(self, offer: PerMessageDeflateOffer) -> None:
        super().__init__(  # type: ignore[no-untyped-call]
            offer, request_no_context_takeover=True, no_context_takeover=True
        )

    def get_extension_string(self) -> str:
        answer = "permessage-deflate; server_no_context_takeover"
        if self.offer.request_max_window_bits:  # the client's bound on the server's window
            answer += f"; server_max_window_bits={self.offer.request_max_window_bits}"
        return answer + "; client_no_context_takeover"


def accept(offers: list[Any]) -> NoContextTakeover | None:
    """Autobahn's perMessageCompressionAccept: the client's first permessage-deflate offer
    that lets the server ask for no context takeover (RFC 7692 requires every client to
    accept it; Autobahn's parser records it as accept_no_context_takeover)."""
    for offer in offers:
        if isinstance(offer, PerMessageDeflateOffer) and offer.accept_no_context_takeover:
            return NoContextTakeover(offer)
    return None
