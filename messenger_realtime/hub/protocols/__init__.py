"""The SignalR hub protocols behind one interface (base.HubProtocol): JSON over text,
MessagePack over binary; the handshake (JSON for both) in handshake.py."""

from messenger_realtime.hub.protocols.base import HubProtocol
from messenger_realtime.hub.protocols.json_protocol import JsonProtocol
from messenger_realtime.hub.protocols.messagepack import MessagePackProtocol

__all__ = ["HubProtocol", "JsonProtocol", "MessagePackProtocol", "create"]


def create(name: str, max_message_size: int) -> HubProtocol:
    """The protocol a handshake named (handshake.PROTOCOLS)."""
    if name == MessagePackProtocol.name:
        return MessagePackProtocol(max_message_size)
    return JsonProtocol(max_message_size)
