"""The SignalR JSON hub protocol as pure functions (no I/O).

Spec: dotnet/aspnetcore src/SignalR/docs/specs/HubProtocol.md. Every JSON message ends
with the record separator 0x1E; one WebSocket frame (or POST body) may carry several
records, and a record may span frames. Error texts follow ASP.NET Core's wording so that
clients and people see the same messages as from the .NET hub.
"""

import json
from collections.abc import Iterator
from typing import Any

from messenger_realtime.exceptions import ProtocolError
from messenger_realtime.hub.protocols.base import (
    MAX_DEPTH,
    TOO_DEEP,
    Frame,
    MessageType,
    nested_too_deeply,
    too_big,
)

RS = "\x1e"


class RecordBuffer:
    """Reassembles records from frames; refuses a record larger than max_size bytes."""

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._pending = ""

    def feed(self, data: str) -> list[str]:
        """Complete records in `data` (plus what came before), without separators."""
        *records, self._pending = (self._pending + data).split(RS)
        too_long = [r for r in records if len(r.encode()) > self.max_size]
        if too_long or len(self._pending.encode()) > self.max_size:
            raise ProtocolError(too_big(self.max_size))
        return records

    def reset(self) -> None:
        self._pending = ""


def parse_message(record: str) -> dict[str, Any]:
    """One hub message as a dict with an integer `type` (unknown types are for the caller
    to ignore, as ASP.NET does; unknown properties such as `headers` are ignored too)."""
    try:
        message = json.loads(record)
    except ValueError as exc:
        raise ProtocolError("Error reading JSON.") from exc
    except RecursionError:  # nesting past Python's limit: the message's fault alone
        raise ProtocolError(TOO_DEEP) from None
    if not isinstance(message, dict):
        raise ProtocolError("Unexpected JSON Token Type. Expected a JSON Object.")
    kind = message.get("type")
    if kind is None:
        raise ProtocolError("Missing required property 'type'.")
    if not _is_int(kind):
        raise ProtocolError("Expected 'type' to be of type Number.")
    if kind in (MessageType.INVOCATION, MessageType.STREAM_INVOCATION):
        if "target" not in message:
            raise ProtocolError("Missing required property 'target'.")
        if not isinstance(message["target"], str):
            raise ProtocolError("Expected 'target' to be of type String.")
        if not isinstance(message.get("arguments", []), list):
            raise ProtocolError("Expected 'arguments' to be of type array.")
        invocation_id = message.get("invocationId")
        if invocation_id is not None and not isinstance(invocation_id, str):
            raise ProtocolError("Expected 'invocationId' to be of type String.")
    if len(record) > MAX_DEPTH and nested_too_deeply(message):  # shorter cannot be deeper
        raise ProtocolError(TOO_DEEP)
    elif kind in (MessageType.ACK, MessageType.SEQUENCE):
        if "sequenceId" not in message:
            raise ProtocolError("Missing required property 'sequenceId'.")
        if not _is_int(message["sequenceId"]):
            raise ProtocolError("Expected 'sequenceId' to be of type Number.")
    return message


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def encode(message: dict[str, Any]) -> str:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False) + RS


PING = encode({"type": MessageType.PING})


def invocation(target: str, arguments: list[Any]) -> str:
    """A server-to-client event: an invocation without invocationId (no reply expected)."""
    return encode({"type": MessageType.INVOCATION, "target": target, "arguments": arguments})


def completion(invocation_id: str, *, result: Any = None, error: str | None = None) -> str:
    if error is not None:
        return encode(
            {"type": MessageType.COMPLETION, "invocationId": invocation_id, "error": error}
        )
    return encode({"type": MessageType.COMPLETION, "invocationId": invocation_id, "result": result})


def close(error: str | None = None, *, allow_reconnect: bool = False) -> str:
    message: dict[str, Any] = {"type": MessageType.CLOSE}
    if error is not None:
        message["error"] = error
    if allow_reconnect:
        message["allowReconnect"] = True
    return encode(message)


class JsonProtocol:
    """The JSON hub protocol for one connection (text frames)."""

    name = "json"
    binary = False

    def __init__(self, max_message_size: int) -> None:
        self.records = RecordBuffer(max_message_size)

    def parse(self, data: Frame) -> Iterator[dict[str, Any]]:
        """Raises ProtocolError, or UnicodeDecodeError for bytes that are not UTF-8 (a
        malformed record after good ones in the same frame: those come first)."""
        text = data if isinstance(data, str) else data.decode("utf-8")
        for record in self.records.feed(text):
            yield parse_message(record)

    def reset(self) -> None:
        self.records.reset()

    # The encoders are the module's functions (the hot path calls them directly).
    invocation = staticmethod(invocation)
    completion = staticmethod(completion)
    close = staticmethod(close)

    def ping(self) -> str:
        return PING

    def ack(self, sequence_id: int) -> str:
        return encode({"type": MessageType.ACK, "sequenceId": sequence_id})

    def sequence(self, sequence_id: int) -> str:
        return encode({"type": MessageType.SEQUENCE, "sequenceId": sequence_id})
