"""What every hub protocol shares: message types, the interface, the size error."""

from collections.abc import Iterator
from enum import IntEnum
from typing import Any, Protocol

Frame = str | bytes  # one transport message: JSON text, or MessagePack bytes


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


# The hub invocation messages: the only ones stateful reconnect numbers, buffers and
# replays, in both directions (ASP.NET's HubInvocationMessage).
SEQUENCED = frozenset(
    {
        MessageType.INVOCATION,
        MessageType.STREAM_ITEM,
        MessageType.COMPLETION,
        MessageType.STREAM_INVOCATION,
        MessageType.CANCEL_INVOCATION,
    }
)


class HubProtocol(Protocol):
    """A negotiated hub protocol: parses what one connection receives (keeping a partial
    message for the next frame) and encodes what the hub sends, one message per frame."""

    name: str
    binary: bool  # its frames are bytes (binary WebSocket frames, octet-stream bodies)

    def parse(self, data: Frame) -> Iterator[dict[str, Any]]:
        """The complete messages in `data` and what came before, as JSON-shaped dicts;
        raises ProtocolError (or UnicodeDecodeError) where the input breaks the protocol."""
        ...

    def reset(self) -> None:
        """Forget a partial message (its transport is gone)."""
        ...

    def invocation(self, target: str, arguments: list[Any]) -> Frame: ...

    def completion(
        self, invocation_id: str, *, result: Any = None, error: str | None = None
    ) -> Frame: ...

    def close(self, error: str | None = None, *, allow_reconnect: bool = False) -> Frame: ...

    def ping(self) -> Frame: ...

    def ack(self, sequence_id: int) -> Frame: ...

    def sequence(self, sequence_id: int) -> Frame: ...


# How deeply a client's message may nest (ASP.NET's System.Text.Json default): deeper is
# a protocol error for that connection, found without recursion, never a crash.
MAX_DEPTH = 64
TOO_DEEP = f"The maximum configured depth of {MAX_DEPTH} has been exceeded."


def nested_too_deeply(value: Any) -> bool:
    """Whether `value` nests objects and arrays deeper than MAX_DEPTH levels."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= MAX_DEPTH:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


def too_big(max_size: int) -> str:
    return (
        f"The maximum message size of {max_size}B was exceeded. The message size "
        "can be configured in AddHubOptions."
    )


def message_too_big(max_size: int) -> str:
    """The Close error for a message (or frame) over max_size bytes, as ASP.NET words it."""
    return f"Connection closed with an error. InvalidDataException: {too_big(max_size)}"


def join_frames(frames: list[Frame]) -> Frame:
    """Several records as one frame: text records end with their separator, binary ones
    start with their length, so concatenation is the framing."""
    if isinstance(frames[0], str):
        return "".join(frames)  # type: ignore[arg-type]
    return b"".join(frames)  # type: ignore[arg-type]
