"""The seam between the dispatcher and the hub: push one event to one hub group."""

from typing import Any, Protocol

from .groups import layer_group
from .payloads import OutgoingEvent

# Channels message type; the hub consumer handles it in realtime_event().
EVENT_TYPE = "realtime.event"


class Publisher(Protocol):
    async def publish(self, event: OutgoingEvent) -> None:
        """Hand the event to the hub; raise on failure (the row is then retried)."""


class ChannelLayerPublisher:
    """Publishes through a Channels layer (channels-redis across processes).

    Accepted by the layer counts as delivered; any layer or Redis error is transient.
    """

    def __init__(self, layer: Any) -> None:
        if layer is None:
            raise ValueError("no channel layer configured (settings.CHANNEL_LAYERS)")
        self.layer = layer

    async def publish(self, event: OutgoingEvent) -> None:
        await self.layer.group_send(
            layer_group(event.group),
            {
                "type": EVENT_TYPE,
                "group": event.group,
                "event": event.name,
                "payload": event.payload,
            },
        )


def describe_error(exc: BaseException) -> str:
    """`last_error` text: exception class and code only, never a message that may hold PII."""
    name = f"{type(exc).__module__}.{type(exc).__qualname__}"
    code: object = None
    cause: BaseException | None = exc
    while code is None and cause is not None:  # e.g. redis wraps the socket's errno
        code = getattr(cause, "errno", None) or getattr(cause, "code", None)
        cause = cause.__cause__ or cause.__context__
    return (f"{name} (code {code})" if code else name)[:512]
