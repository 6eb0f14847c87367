"""The MessagePack hub protocol: VarInt framing, the messages as the official clients write
and read them, timestamps, and ASP.NET Core's errors for bad input."""

from datetime import UTC, datetime
from typing import Any

import msgpack
import pytest

from messenger_realtime.exceptions import ProtocolError
from messenger_realtime.hub.protocols.messagepack import MessagePackProtocol, frame


def packed(message: list[Any]) -> bytes:
    return frame(msgpack.packb(message, use_bin_type=True, datetime=True))


def unpacked(data: bytes) -> list[Any]:
    """The message of one frame (its VarInt prefix checked against the body)."""
    length, shift, index = 0, 0, 0
    while True:
        byte = data[index]
        length, shift, index = length | (byte & 0x7F) << shift, shift + 7, index + 1
        if not byte & 0x80:
            break
    assert length == len(data) - index
    return list(msgpack.unpackb(data[index:], raw=False, timestamp=3))


def test_varint_lengths_use_seven_bits_a_byte_least_significant_first() -> None:
    assert frame(b"x" * 5)[:1] == b"\x05"
    assert frame(b"x" * 300)[:2] == bytes([0xAC, 0x02])
    assert frame(b"x" * 16384)[:3] == bytes([0x80, 0x80, 0x01])


def test_server_messages_are_the_arrays_the_official_clients_read() -> None:
    hub = MessagePackProtocol(1000)
    event = hub.invocation("ev", [1])
    assert event == bytes.fromhex("0a960180c0a265769101" + "90")  # the spec's example
    assert unpacked(hub.completion("7", result=["a"])) == [3, {}, "7", 3, ["a"]]
    assert unpacked(hub.completion("7", error="no")) == [3, {}, "7", 1, "no"]
    assert unpacked(hub.close(allow_reconnect=True)) == [7, None, True]
    assert unpacked(hub.close("bad")) == [7, "bad", False]
    assert hub.ping() == bytes.fromhex("029106")
    assert unpacked(hub.ack(3)) == [8, 3] and unpacked(hub.sequence(4)) == [9, 4]


def test_time_fields_become_timestamps_and_everything_else_stays_as_in_json() -> None:
    payload = {
        "chatId": "01a2",
        "seq": 42,
        "sentAt": "2026-11-30T07:10:42.143021+00:00",
        "body": "2026-11-30T07:10:42+00:00",  # a body that looks like a time stays text
        "participant": {"joinedAt": "2026-11-30T07:10:42+00:00", "leftAt": None},
        "media": {"expiresAt": 1796025300},  # a unix time in JSON too
    }
    (message,) = [unpacked(MessagePackProtocol(1000).invocation("message_received", [payload]))]
    arrived = message[4][0]
    assert arrived["sentAt"] == datetime(2026, 11, 30, 7, 10, 42, 143021, tzinfo=UTC)
    assert arrived["participant"]["joinedAt"] == datetime(2026, 11, 30, 7, 10, 42, tzinfo=UTC)
    rest = {k: v for k, v in arrived.items() if k not in ("sentAt", "participant")}
    assert rest == {k: payload[k] for k in ("chatId", "seq", "body", "media")}
    assert arrived["participant"]["leftAt"] is None


def test_client_messages_parse_as_the_json_protocols_dicts() -> None:
    hub = MessagePackProtocol(1000)
    data = b"".join(
        [
            packed([1, {}, "1", "GetGroups", []]),  # 5 items: the JS client without streams
            packed([1, {"a": "b"}, None, "GetGroups", [], []]),
            packed([1, {}, "", "GetGroups", []]),  # an empty id is no id
            packed([6]),
            packed([7, None]),  # the JS client's Close: 2 items
            packed([8, 5]),
            packed([9, 1]),
            packed([42, "future"]),
        ]
    )
    assert list(hub.parse(data)) == [
        {"type": 1, "target": "GetGroups", "arguments": [], "invocationId": "1"},
        {"type": 1, "target": "GetGroups", "arguments": []},
        {"type": 1, "target": "GetGroups", "arguments": []},
        {"type": 6},
        {"type": 7, "error": None},
        {"type": 8, "sequenceId": 5},
        {"type": 9, "sequenceId": 1},
        {"type": 42},
    ]


def test_a_message_may_span_frames_and_waits_for_its_last_byte() -> None:
    hub = MessagePackProtocol(1000)
    data = packed([1, {}, "1", "GetGroups", []]) + packed([6])
    assert list(hub.parse(data[:1])) == []  # the length alone
    assert list(hub.parse(data[1:10])) == []
    assert [m["type"] for m in hub.parse(data[10:])] == [1, 6]
    assert list(hub.parse(b"")) == []


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (frame(b"\x05"), "Reading 'messageType' as Int32 failed."),  # not an array
        (frame(b"\x90"), "Reading 'messageType' as Int32 failed."),  # empty array
        (frame(msgpack.packb(["1"])), "Reading 'messageType' as Int32 failed."),
        (b"\x00", "Reading 'messageType' as Int32 failed."),  # a zero length
        (frame(msgpack.packb([1, None, None, "x", []])), "Reading map length for 'headers'"),
        (frame(msgpack.packb([1, {}, 7, "x", []])), "Reading 'invocationId' as String"),
        (frame(msgpack.packb([1, {}, None, 5, []])), "Reading 'target' as String failed."),
        (frame(msgpack.packb([1, {}, None, "x", {}])), "Reading array length for 'arguments'"),
        (frame(msgpack.packb([1, {}, None, "x", [], 1])), "array length for 'streamIds'"),
        (frame(msgpack.packb([3, {}, "1", 9])), "Invalid invocation result kind."),
        (frame(msgpack.packb([7, None, "yes"])), "Reading 'allowReconnect' as Boolean"),
        (frame(msgpack.packb([8])), "Reading 'sequenceId' as Int64 failed."),
        (frame(msgpack.packb([9, "1"])), "Reading 'sequenceId' as Int64 failed."),
        (frame(b"\x91\xc1"), "Invalid MessagePack data (FormatError)."),
        (frame(b"\x91\xa2\xff\xfe"), "Invalid MessagePack data"),  # a str that is not UTF-8
        (frame(b"\x91\x01\x01"), "Invalid MessagePack data (ExtraData)."),  # bytes after it
        (b"\xff\xff\xff\xff\x0f", "Messages over 2GB in size are not supported."),
        (b"\xff\xff\xff\xff\xff", "Messages over 2GB in size are not supported."),
    ],
)
def test_bad_input_is_a_protocol_error_with_aspnet_wording(data: bytes, error: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        list(MessagePackProtocol(1000).parse(data))
    assert error in str(caught.value)


def test_a_declared_length_over_the_limit_is_refused_before_its_body_arrives() -> None:
    hub = MessagePackProtocol(max_message_size=100)
    with pytest.raises(ProtocolError, match="maximum message size of 100B"):
        list(hub.parse(bytes([0xE5, 0x00])))  # 101, and no body yet


@pytest.mark.parametrize("levels", [64, 400, 5000], ids=["past-max-depth", "deep", "past-stack"])
def test_a_message_nested_too_deeply_is_a_protocol_error(levels: int) -> None:
    body = msgpack.packb([1, {}, "1", "GetGroups", []])[:-1]  # without the arguments
    body += b"\x91" * (levels + 1) + b"\x90"  # arguments: `levels` arrays down
    with pytest.raises(ProtocolError, match=r"depth|Invalid MessagePack data"):
        list(MessagePackProtocol(10**6).parse(frame(body)))


def test_user_content_goes_out_untouched_whatever_its_keys_are_called() -> None:
    payload = {
        "sentAt": "2024-05-01T10:00:00+00:00",
        "fileMeta": {"name": "a", "createdAt": "2024-05-01", "endedAt": "later"},
    }
    (sent,) = unpacked(MessagePackProtocol.invocation("message_received", [payload]))[4]
    assert sent["sentAt"] == datetime(2024, 5, 1, 10, tzinfo=UTC)
    assert sent["fileMeta"] == {"name": "a", "createdAt": "2024-05-01", "endedAt": "later"}
