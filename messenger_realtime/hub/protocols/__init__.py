"""The SignalR hub protocols behind one interface (base.HubProtocol): JSON over text;
the handshake in handshake.py."""

from messenger_realtime.hub.protocols.base import HubProtocol
from messenger_realtime.hub.protocols.json_protocol import JsonProtocol

__all__ = ["HubProtocol", "JsonProtocol", "create"]


def create(name: str, max_message_size: int) -> HubProtocol:
    """The protocol a handshake named (handshake.PROTOCOLS)."""
    return JsonProtocol(max_message_size)
