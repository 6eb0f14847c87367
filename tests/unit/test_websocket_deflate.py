"""permessage-deflate on the hub's frames (hub/daphne/deflate.py, websocket_protocol.py):
compressed as RFC 7692 says and byte for byte as Autobahn would, once per payload and
process, only when smaller, with no zlib state kept between messages, and a client's
compressed Ping known before Autobahn parses it, only on a connection that negotiated it."""

import os
import zlib
from types import SimpleNamespace
from typing import Any

import pytest
from autobahn.websocket.compress_deflate import PerMessageDeflate, PerMessageDeflateOffer
from autobahn.websocket.protocol import WebSocketProtocol
from websockets.extensions.permessage_deflate import PerMessageDeflate as ClientDeflate
from websockets.frames import Frame, Opcode

from messenger_realtime.hub.daphne import deflate
from messenger_realtime.hub.daphne.deflate import FrameDeflater, MessageDeflate, deflated
from messenger_realtime.hub.daphne.websocket_protocol import PINGS, is_ping_frame, server_frame

EVENT = (
    b'{"type":1,"target":"message_received","arguments":[{"chatId":"0b3c2f0e-6f64-4d3a-9c1e-'
    b'5d1a2b3c4d5e","messageId":"7f1e2d3c-4b5a-4968-8776-655443322110","seq":12,"kind":"Text",'
    b'"body":"see you at ten, the release plan first"}]}\x1e'
)


def inflate(payload: bytes) -> bytes:
    """RFC 7692 7.2.2: the tail put back, inflated by a fresh decompressor."""
    return zlib.decompressobj(-zlib.MAX_WBITS).decompress(payload + b"\x00\x00\xff\xff")


def autobahn_compressed_frame(payload: bytes, binary: bool) -> bytes:
    """What Autobahn sends for this message with permessage-deflate (no context takeover)."""
    pmce = PerMessageDeflate(True, True, True, 15, 15, 8)
    pmce.start_compress_message()
    packed = pmce.compress_message_data(payload) + pmce.end_compress_message()
    sent: list[bytes] = []
    protocol: Any = SimpleNamespace(
        factory=SimpleNamespace(isServer=True),
        maskServerFrames=False,
        logFrames=False,
        trafficStats=SimpleNamespace(outgoingWebSocketFrames=0),
        sendData=lambda data, sync=False, chopsize=None: sent.append(data),
    )
    WebSocketProtocol.sendFrame(protocol, opcode=2 if binary else 1, payload=packed, rsv=4)
    return sent[0]


@pytest.mark.parametrize("size", [128, 1000, 70_000])
@pytest.mark.parametrize("binary", [False, True])
def test_a_compressed_frame_is_autobahns_byte_for_byte_and_inflates(
    size: int, binary: bool
) -> None:
    payload = (EVENT * (size // len(EVENT) + 1))[:size]
    packed = deflated(payload)
    assert server_frame(packed, binary, compressed=True) == autobahn_compressed_frame(
        payload, binary
    )
    assert inflate(packed) == payload


def test_a_fan_out_compresses_each_payload_once() -> None:
    deflater = FrameDeflater()
    # Each connection encodes the shared frame anew: equal bytes, not the same object.
    frames = [deflater.compressed(bytes(EVENT), 15) for _ in range(1000)]
    assert deflater.compressions == 1 and deflater.hits == 999
    assert frames[0] is not None and len(frames[0]) < len(EVENT)
    assert all(frame == frames[0] for frame in frames)
    deflater.compressed(bytes(EVENT), 10)  # another window is another compression
    assert deflater.compressions == 2


def test_what_would_not_get_smaller_goes_out_as_it_is() -> None:
    deflater = FrameDeflater()
    small = b'{"type":3,"invocationId":"1","result":null}\x1e'
    assert len(small) < deflate.MIN_COMPRESSED
    assert deflater.compressed(small, 15) is None
    assert deflater.compressions == 0  # not even tried
    noise = os.urandom(500)  # random bytes do not shrink
    assert deflater.compressed(noise, 15) is None
    assert deflater.compressed(noise, 15) is None
    assert deflater.compressions == 1 and deflater.hits == 1  # the answer was kept


def test_the_kept_payloads_stay_within_their_bounds(monkeypatch: Any) -> None:
    deflater = FrameDeflater()
    for n in range(deflate.CACHED_PAYLOADS * 3):
        deflater.compressed(EVENT + str(n).encode(), 15)
    assert len(deflater._recent) == deflate.CACHED_PAYLOADS
    monkeypatch.setattr(deflate, "CACHED_BYTES", 10 * len(EVENT))
    for n in range(50):
        deflater.compressed(EVENT + b"x" * n, 15)
    assert deflater._bytes <= 10 * len(EVENT)
    assert deflater._bytes == sum(
        len(key[1]) + len(packed or b"") for key, packed in deflater._recent.items()
    )
    large = EVENT * (deflate.CACHED_PAYLOAD_MAX // len(EVENT) + 1)
    assert deflater.compressed(large, 15) is not None  # compressed, not kept
    assert (15, large) not in deflater._recent


def offers(header: str) -> list[PerMessageDeflateOffer]:
    """A client's Sec-WebSocket-Extensions, parsed as Autobahn parses it."""
    parsed = WebSocketProtocol._parseExtensionsHeader(None, header)
    return [PerMessageDeflateOffer.parse(params) for _, params in parsed]


def negotiated() -> MessageDeflate:
    accepted = deflate.accept(offers("permessage-deflate; client_max_window_bits"))
    assert accepted is not None
    autobahns = PerMessageDeflate.create_from_offer_accept(True, accepted)
    return MessageDeflate.from_negotiated(autobahns)


def test_no_zlib_state_outlives_a_message() -> None:
    pmce = negotiated()
    assert pmce.server_no_context_takeover and pmce.client_no_context_takeover
    pmce.start_compress_message()
    packed = pmce.compress_message_data(EVENT) + pmce.end_compress_message()
    assert inflate(packed) == EVENT
    assert pmce._compressor is None
    client = ClientDeflate(True, True, 15, 15)  # what a client sends, compressed
    sent = client.encode(Frame(Opcode.TEXT, EVENT)).data
    pmce.start_decompress_message()
    received = pmce.decompress_message_data(sent, max_output_len=64 * 1024)
    pmce.end_decompress_message()
    assert received == EVENT
    assert pmce._decompressor is None


def test_the_answer_asks_for_no_context_takeover_both_ways() -> None:
    assert deflate.accept([]) is None
    for header, answer in [
        (
            "permessage-deflate",
            "permessage-deflate; server_no_context_takeover; client_no_context_takeover",
        ),
        (
            "permessage-deflate; server_max_window_bits=10; client_max_window_bits",
            "permessage-deflate; server_no_context_takeover; server_max_window_bits=10;"
            " client_no_context_takeover",
        ),
    ]:
        accepted = deflate.accept(offers(header))
        assert accepted is not None
        assert accepted.get_extension_string() == answer


def client_frame(record: bytes, binary: bool) -> bytes:
    """A record as a client sends it once deflate is negotiated without context takeover:
    websockets' own compressor and framing, masked."""
    client = ClientDeflate(True, True, 15, 15)
    frame = Frame(Opcode.BINARY if binary else Opcode.TEXT, record)
    return frame.serialize(mask=True, extensions=[client])


@pytest.mark.parametrize("binary", [False, True])
def test_a_compressed_ping_is_known_only_where_deflate_was_negotiated(binary: bool) -> None:
    for _ in range(20):
        frame = client_frame(PINGS[binary], binary)
        assert frame[0] & 0x40  # RSV1: compressed
        assert is_ping_frame(frame, deflate=True)
        # A connection without deflate must fail such a frame: Autobahn's to parse.
        assert not is_ping_frame(frame)


def test_another_compressed_record_is_left_to_autobahn() -> None:
    assert not is_ping_frame(client_frame(b'{"type":7}\x1e', False), deflate=True)
    assert not is_ping_frame(client_frame(b'{"type":6}\x1e', True), deflate=True)
