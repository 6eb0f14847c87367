"""The SignalR MessagePack hub protocol (binary frames) as pure functions (no I/O).

Spec: dotnet/aspnetcore src/SignalR/docs/specs/HubProtocol.md. Each message is a VarInt
length (7 bits a byte, at most 5 bytes) and one MessagePack array: [type, ...] with the
fields in the spec's order. Input may split a message across frames or POST bodies; the
declared length is checked against MAX_MESSAGE_SIZE before anything is buffered. Output
is one whole message per frame. Payloads are the JSON ones, with the contracts' declared
time fields (contracts/base.py TIME_FIELDS, at their declared places) as the timestamp
extension, which the official clients read as dates; ids stay strings, and user content
(`fileMeta`, bodies) goes out untouched, whatever its keys are called. Errors use ASP.NET
Core's wording.
"""

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import msgpack

from messenger_realtime.contracts.base import TIME_FIELDS, TIMED_OBJECTS
from messenger_realtime.exceptions import ProtocolError
from messenger_realtime.hub.protocols.base import (
    MAX_DEPTH,
    TOO_DEEP,
    Frame,
    MessageType,
    nested_too_deeply,
    too_big,
)

MAX_LENGTH_BYTES = 5
_EMPTY_HEADERS: dict[str, str] = {}


def frame(body: bytes) -> bytes:
    """`body` with its VarInt length prefix."""
    size, prefix = len(body), bytearray()
    while True:
        part, size = size & 0x7F, size >> 7
        prefix.append(part | 0x80 if size else part)
        if not size:
            return bytes(prefix) + body


def _pack(message: list[Any]) -> bytes:
    return frame(msgpack.packb(message, use_bin_type=True, datetime=True))


def _time(value: Any) -> Any:
    """A declared time field's ISO text as an aware datetime (packed as a timestamp).
    The contracts always write aware times; anything else stays as it is rather than
    fail the frame."""
    if not isinstance(value, str):
        return value
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return value
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _dates(payload: Any) -> Any:
    """An event payload with its declared time fields converted, and nothing else."""
    if not isinstance(payload, dict):
        return payload
    converted = {}
    for key, value in payload.items():
        if key in TIME_FIELDS:
            value = _time(value)
        elif key in TIMED_OBJECTS and isinstance(value, dict):
            value = {k: _time(v) if k in TIME_FIELDS else v for k, v in value.items()}
        converted[key] = value
    return converted


def invocation(target: str, arguments: list[Any]) -> bytes:
    """A server-to-client event: [1, headers, nil, target, arguments, streamIds]."""
    return _pack(
        [MessageType.INVOCATION, _EMPTY_HEADERS, None, target, [_dates(a) for a in arguments], []]
    )


def completion(invocation_id: str, *, result: Any = None, error: str | None = None) -> bytes:
    if error is not None:
        return _pack([MessageType.COMPLETION, _EMPTY_HEADERS, invocation_id, 1, error])
    # A result is the hub's own (not an event payload): nothing in it is converted.
    return _pack([MessageType.COMPLETION, _EMPTY_HEADERS, invocation_id, 3, result])


def close(error: str | None = None, *, allow_reconnect: bool = False) -> bytes:
    return _pack([MessageType.CLOSE, error, allow_reconnect])


PING = _pack([MessageType.PING])


class MessagePackProtocol:
    """The MessagePack hub protocol for one connection (binary frames)."""

    name = "messagepack"
    binary = True

    def __init__(self, max_message_size: int) -> None:
        self.max_size = max_message_size
        self._pending = b""

    def reset(self) -> None:
        self._pending = b""

    def parse(self, data: Frame) -> Iterator[dict[str, Any]]:
        buffer = self._pending + (data.encode() if isinstance(data, str) else data)
        self._pending = b""
        offset = 0
        while offset < len(buffer):
            length, start = self._length(buffer, offset)
            if start < 0 or start + length > len(buffer):  # the rest is still to come
                break
            body = buffer[start : start + length]
            offset = start + length
            yield parse_body(body)
        self._pending = buffer[offset:]

    def _length(self, buffer: bytes, offset: int) -> tuple[int, int]:
        """(declared length, where its body starts), or (0, -1) while the prefix is short."""
        length = 0
        for index in range(MAX_LENGTH_BYTES):
            if offset + index >= len(buffer):
                return 0, -1
            byte = buffer[offset + index]
            if index == MAX_LENGTH_BYTES - 1 and byte > 0x07:
                raise ProtocolError("Messages over 2GB in size are not supported.")
            length |= (byte & 0x7F) << (7 * index)
            if not byte & 0x80:
                if length > self.max_size:
                    raise ProtocolError(too_big(self.max_size))
                if length == 0:
                    raise ProtocolError("Reading 'messageType' as Int32 failed.")
                return length, offset + index + 1
        raise ProtocolError("Messages over 2GB in size are not supported.")

    invocation = staticmethod(invocation)
    completion = staticmethod(completion)
    close = staticmethod(close)

    def ping(self) -> bytes:
        return PING

    def ack(self, sequence_id: int) -> bytes:
        return _pack([MessageType.ACK, sequence_id])

    def sequence(self, sequence_id: int) -> bytes:
        return _pack([MessageType.SEQUENCE, sequence_id])


def parse_body(body: bytes) -> dict[str, Any]:
    """One message body as the JSON protocol's dict (unknown types: {"type": n})."""
    try:
        # strict_map_key off: an integer key inside an argument must not hide the
        # invocationId we answer; timestamp=3: client dates arrive as datetimes.
        items = msgpack.unpackb(body, raw=False, timestamp=3, strict_map_key=False)
    except (ValueError, msgpack.UnpackException) as exc:  # ExtraData, FormatError, UTF-8...
        raise ProtocolError(f"Invalid MessagePack data ({type(exc).__name__}).") from exc
    if len(body) > MAX_DEPTH and nested_too_deeply(items):  # shorter cannot be deeper
        raise ProtocolError(TOO_DEEP)
    if not isinstance(items, list) or not items or not _is_int(items[0]):
        raise ProtocolError("Reading 'messageType' as Int32 failed.")
    kind = items[0]
    reader = _READERS.get(kind)
    return reader(items) if reader is not None else {"type": kind}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _field(items: list[Any], index: int, check: Any, error: str) -> Any:
    """items[index] when present and accepted by `check`; otherwise ProtocolError(error)."""
    if index >= len(items) or not check(items[index]):
        raise ProtocolError(error)
    return items[index]


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _headers(items: list[Any]) -> None:
    _field(items, 1, lambda v: isinstance(v, dict), "Reading map length for 'headers' failed.")


def _invocation_id(items: list[Any], nullable: bool) -> str | None:
    check = (lambda v: v is None or isinstance(v, str)) if nullable else _is_str
    value: str | None = _field(items, 2, check, "Reading 'invocationId' as String failed.")
    return value or None  # ASP.NET treats "" as no id


def _read_invocation(items: list[Any]) -> dict[str, Any]:
    _headers(items)
    invocation_id = _invocation_id(items, nullable=True)
    target = _field(items, 3, _is_str, "Reading 'target' as String failed.")
    arguments = _field(
        items, 4, lambda v: isinstance(v, list), "Reading array length for 'arguments' failed."
    )
    if len(items) > 5 and not isinstance(items[5], list):
        raise ProtocolError("Reading array length for 'streamIds' failed.")
    message = {"type": items[0], "target": target, "arguments": arguments}
    return {**message, "invocationId": invocation_id} if invocation_id else message


def _read_completion(items: list[Any]) -> dict[str, Any]:
    _headers(items)
    message = {"type": MessageType.COMPLETION, "invocationId": _invocation_id(items, False)}
    kind = _field(items, 3, _is_int, "Reading 'resultKind' as Int32 failed.")
    if kind not in (1, 2, 3):
        raise ProtocolError("Invalid invocation result kind.")
    if kind == 1:
        return {**message, "error": _field(items, 4, _is_str, "Reading 'error' as String failed.")}
    if kind == 3:
        return {**message, "result": _field(items, 4, lambda v: True, "Reading 'result' failed.")}
    return message


def _read_close(items: list[Any]) -> dict[str, Any]:
    error = _field(
        items, 1, lambda v: v is None or isinstance(v, str), "Reading 'error' as String failed."
    )
    if len(items) > 2 and not isinstance(items[2], bool):
        raise ProtocolError("Reading 'allowReconnect' as Boolean failed.")
    return {"type": MessageType.CLOSE, "error": error}


def _read_sequence_id(items: list[Any]) -> dict[str, Any]:
    sequence_id = _field(items, 1, _is_int, "Reading 'sequenceId' as Int64 failed.")
    return {"type": items[0], "sequenceId": sequence_id}


def _read_with_id(items: list[Any]) -> dict[str, Any]:
    _headers(items)
    return {"type": items[0], "invocationId": _invocation_id(items, nullable=False)}


_READERS = {
    MessageType.INVOCATION: _read_invocation,
    MessageType.STREAM_INVOCATION: _read_invocation,
    MessageType.STREAM_ITEM: _read_with_id,
    MessageType.COMPLETION: _read_completion,
    MessageType.CANCEL_INVOCATION: _read_with_id,
    MessageType.PING: lambda items: {"type": MessageType.PING},
    MessageType.CLOSE: _read_close,
    MessageType.ACK: _read_sequence_id,
    MessageType.SEQUENCE: _read_sequence_id,
}
