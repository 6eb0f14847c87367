"""The SignalR JSON hub protocol as pure functions (no I/O).

Spec: dotnet/aspnetcore src/SignalR/docs/specs/HubProtocol.md. Every JSON message ends
with the record separator 0x1E; one WebSocket frame may carry several records, and a
record may span frames. Error texts follow ASP.NET Core's wording so that clients and
people see the same messages as from the .NET hub.
"""

import json
from enum import IntEnum
from typing import Any

from messenger_realtime.exceptions import HandshakeError, ProtocolError

RS = "\x1e"
SUPPORTED_PROTOCOL = "json"
# ASP.NET's JSON protocol accepts versions up to 2: signalrcore sends 0 (its negotiate
# version), @microsoft/signalr 1 (2 with stateful reconnect, which is not offered here).
MAX_JSON_VERSION = 2


class MessageType(IntEnum):
    INVOCATION = 1
    STREAM_ITEM = 2
    COMPLETION = 3
    STREAM_INVOCATION = 4
    CANCEL_INVOCATION = 5
    PING = 6
    CLOSE = 7
    ACK = 8
    SEQUENCE = 9


class RecordBuffer:
    """Reassembles records from frames; refuses a record larger than max_size bytes."""

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._pending = ""

    def feed(self, data: str) -> list[str]:
        """Complete records in `data` (plus what came before), without separators."""
        *records, self._pending = (self._pending + data).split(RS)
        too_big = [r for r in records if len(r.encode()) > self.max_size]
        if too_big or len(self._pending.encode()) > self.max_size:
            raise ProtocolError(_too_big(self.max_size))
        return records


def _too_big(max_size: int) -> str:
    return (
        f"The maximum message size of {max_size}B was exceeded. The message size "
        "can be configured in AddHubOptions."
    )


def message_too_big(max_size: int) -> str:
    """The Close error for a record (or frame) over max_size bytes, as ASP.NET words it."""
    return f"Connection closed with an error. InvalidDataException: {_too_big(max_size)}"


_BAD_HANDSHAKE = "An unexpected error occurred during connection handshake."


def parse_handshake(record: str) -> int:
    """The protocol version of a valid JSON handshake request."""
    try:
        request = json.loads(record)
    except ValueError as exc:
        raise HandshakeError(f"{_BAD_HANDSHAKE} InvalidDataException: Error reading JSON.") from exc
    if not isinstance(request, dict):
        raise HandshakeError(f"{_BAD_HANDSHAKE} InvalidDataException: Expected a JSON object.")
    protocol, version = request.get("protocol"), request.get("version")
    if not isinstance(protocol, str):
        raise HandshakeError(
            f"{_BAD_HANDSHAKE} InvalidDataException: Missing required property 'protocol'."
        )
    if not isinstance(version, int) or isinstance(version, bool):
        raise HandshakeError(
            f"{_BAD_HANDSHAKE} InvalidDataException: Missing required property 'version'."
        )
    if protocol != SUPPORTED_PROTOCOL:
        raise HandshakeError(f"The protocol '{protocol}' is not supported.")
    if not 0 <= version <= MAX_JSON_VERSION:
        raise HandshakeError(
            f"The server does not support version {version} of the '{protocol}' protocol."
        )
    return version


def parse_message(record: str) -> dict[str, Any]:
    """One hub message as a dict with an integer `type` (unknown types are for the caller
    to ignore, as ASP.NET does; unknown properties such as `headers` are ignored too)."""
    try:
        message = json.loads(record)
    except ValueError as exc:
        raise ProtocolError("Error reading JSON.") from exc
    if not isinstance(message, dict):
        raise ProtocolError("Unexpected JSON Token Type. Expected a JSON Object.")
    kind = message.get("type")
    if kind is None:
        raise ProtocolError("Missing required property 'type'.")
    if not isinstance(kind, int) or isinstance(kind, bool):
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
    return message


def encode(message: dict[str, Any]) -> str:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False) + RS


HANDSHAKE_OK = encode({})
PING = encode({"type": MessageType.PING})


def handshake_error(reason: str) -> str:
    return encode({"error": reason})


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
