"""The handshake: JSON text ending in 0x1E for every protocol, in both directions.

Spec: dotnet/aspnetcore src/SignalR/docs/specs/HubProtocol.md. The client names its
protocol and version; JSON and MessagePack both accept versions 0 to 2 (2 is the stateful
reconnect handshake of @microsoft/signalr; signalrcore sends 0). Wording as ASP.NET Core.
"""

import json
from dataclasses import dataclass

from messenger_realtime.exceptions import HandshakeError, ProtocolError
from messenger_realtime.hub.protocols.base import too_big

RS = "\x1e"
HANDSHAKE_OK = "{}" + RS
MAX_VERSION = 2
PROTOCOLS = {"json": False, "messagepack": True}  # name -> binary
_BAD = "An unexpected error occurred during connection handshake."


@dataclass(frozen=True)
class Handshake:
    protocol: str
    version: int


def parse_handshake(record: str, *, binary_ok: bool = True) -> Handshake:
    """A valid handshake request, or HandshakeError with the text the client is sent."""
    try:
        request = json.loads(record)
    except ValueError as exc:
        raise HandshakeError(f"{_BAD} InvalidDataException: Error reading JSON.") from exc
    if not isinstance(request, dict):
        raise HandshakeError(f"{_BAD} InvalidDataException: Expected a JSON object.")
    protocol, version = request.get("protocol"), request.get("version")
    if not isinstance(protocol, str):
        raise HandshakeError(f"{_BAD} InvalidDataException: Missing required property 'protocol'.")
    if not isinstance(version, int) or isinstance(version, bool):
        raise HandshakeError(f"{_BAD} InvalidDataException: Missing required property 'version'.")
    if protocol not in PROTOCOLS:
        raise HandshakeError(f"The protocol '{protocol}' is not supported.")
    if not 0 <= version <= MAX_VERSION:
        raise HandshakeError(
            f"The server does not support version {version} of the '{protocol}' protocol."
        )
    if PROTOCOLS[protocol] and not binary_ok:
        raise HandshakeError(
            f"Cannot use the '{protocol}' protocol on the current transport. The transport "
            "does not support 'Binary' transfer format."
        )
    return Handshake(protocol, version)


def handshake_error(reason: str) -> str:
    return json.dumps({"error": reason}, separators=(",", ":"), ensure_ascii=False) + RS


class HandshakeBuffer:
    """Collects bytes up to the handshake's separator; refuses more than max_size."""

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._pending = b""

    def feed(self, data: bytes) -> tuple[str | None, bytes]:
        """(the handshake record, the bytes after it), or (None, b"") until it is complete."""
        pending = self._pending + data
        record, separator, rest = pending.partition(RS.encode())
        if not separator:
            if len(pending) > self.max_size:
                raise ProtocolError(too_big(self.max_size))
            self._pending = pending
            return None, b""
        self._pending = b""
        if len(record) > self.max_size:
            raise ProtocolError(too_big(self.max_size))
        return record.decode("utf-8"), rest
