"""The seam between the dispatcher and the hub: push events to hub groups.

A publisher has publish(event); it may also have publish_many(events), one result per
event, which the dispatcher then uses for whole chunks (messenger_realtime/push.py).
"""

import logging
from typing import Any, Protocol

from messenger_realtime.contracts.events import OutgoingEvent
from messenger_realtime.ops import metrics
from messenger_realtime.transport import pipeline
from messenger_realtime.transport.groups import layer_group

logger = logging.getLogger(__name__)

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
        self.scores = pipeline.ScoreClock()

    async def publish(self, event: OutgoingEvent) -> None:
        await self.layer.group_send(layer_group(event.group), _message(event))

    async def publish_many(self, events: list[OutgoingEvent]) -> list[BaseException | None]:
        """The whole chunk in two pipelined round trips when the layer allows it; a
        failure there fails the chunk (its rows are retried)."""
        if not pipeline.supports(self.layer):
            results: list[BaseException | None] = []
            for event in events:
                try:
                    await self.publish(event)
                    results.append(None)
                except Exception as exc:
                    results.append(exc)
            return results
        overruns = await pipeline.group_send_many(
            self.layer, [(e, _message(e)) for e in events], self.scores
        )
        if overruns:
            # channels-redis drops a message for a full channel: count it, never silently.
            metrics.channel_overruns.inc(overruns)
            logger.warning(
                "channel layer capacity overrun: messages dropped for full connections",
                extra={"action": "overrun", "channels": overruns},
            )
        return [None] * len(events)


def _message(event: OutgoingEvent) -> dict[str, Any]:
    return {"type": EVENT_TYPE, "group": event.group, "event": event.name, "payload": event.payload}


def describe_error(exc: BaseException) -> str:
    """`last_error` text: exception class and code only, never a message that may hold PII."""
    name = f"{type(exc).__module__}.{type(exc).__qualname__}"
    code: object = None
    cause: BaseException | None = exc
    while code is None and cause is not None:  # e.g. redis wraps the socket's errno
        code = getattr(cause, "errno", None) or getattr(cause, "code", None)
        cause = cause.__cause__ or cause.__context__
    return (f"{name} (code {code})" if code else name)[:512]
