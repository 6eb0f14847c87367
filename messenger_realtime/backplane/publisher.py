"""The seam between the dispatcher and the hub: push events to hub targets.

A Publisher pushes one event; a BatchPublisher also pushes a whole chunk in one go (the
channel layer's pipelined path), and the dispatcher then hands it chunks
(dispatch/push.py). Accepted by the layer counts as delivered; a layer or Redis error
is transient and the row is retried (transient()); an event the layer cannot serialize is
UnencodablePayload, for its row alone (quarantined).
"""

from typing import Any, Protocol, TypeGuard, runtime_checkable

from redis.exceptions import RedisError

from messenger_realtime.backplane import pipeline
from messenger_realtime.backplane.backlog import QueueWatch
from messenger_realtime.backplane.group_names import layer_group
from messenger_realtime.contracts.events import HubTarget, OutgoingEvent

# Channels message type; a hub connection handles it (hub/connection/layer_messages.py).
EVENT_TYPE = "realtime.event"
BOUND_FOR = 0.1  # s a measured hub backlog (plus what was pushed since) stands for it


def transient(exc: BaseException) -> bool:
    """Layer or Redis trouble (the connection, a timeout, a refused command): a failure
    of the whole push, retried. Anything else a push raises may be the data's doing."""
    return isinstance(exc, OSError | TimeoutError | RedisError)


class Publisher(Protocol):
    async def publish(self, event: OutgoingEvent) -> None:
        """Hand the event to the hub; raise on failure (the row is then retried)."""


@runtime_checkable
class BatchPublisher(Publisher, Protocol):
    async def publish_many(self, events: list[OutgoingEvent]) -> list[BaseException | None]:
        """Hand a chunk to the hub: per event None (accepted) or the error (retried)."""


@runtime_checkable
class HubBacklog(Protocol):
    async def hub_backlog(self, within: int | None = None) -> int:
        """Messages still queued for the hub processes the last push reached; `within`:
        the caller only asks whether that exceeds `within`, so a bound may answer."""


def is_batch_publisher(publisher: Publisher) -> TypeGuard[BatchPublisher]:
    """isinstance(publisher, BatchPublisher), cheaply: a runtime Protocol check walks the
    protocol's members on every call, and the worker asks once or twice per chunk."""
    return callable(getattr(publisher, "publish_many", None))


def reports_hub_backlog(publisher: Publisher) -> TypeGuard[HubBacklog]:
    """isinstance(publisher, HubBacklog), cheaply (as is_batch_publisher)."""
    return callable(getattr(publisher, "hub_backlog", None))


class ChannelLayerPublisher:
    """Publishes through a Channels layer (channels-redis across processes)."""

    def __init__(self, layer: Any) -> None:
        if layer is None:
            raise ValueError("no channel layer configured (settings.CHANNEL_LAYERS)")
        self.layer = layer
        self.scores = pipeline.ScoreClock()
        self.members = pipeline.MemberCache()  # one round trip per chunk while unchanged
        self.last_channels: list[str] = []  # hub process queues the last chunk reached
        # A head older than half the layer's expiry is swept, not read (backlog.py).
        self.queues = QueueWatch(head_age_limit=getattr(layer, "expiry", 60) / 2)
        # An upper bound of the longest of the measured queues: the longest measured, plus
        # every message pushed since (each adds at most one entry to any queue).
        self._measured: set[str] = set()
        self._bound = 0
        self._measured_at = float("-inf")

    async def publish(self, event: OutgoingEvent) -> None:
        if event.joins is not None and pipeline.supports(self.layer):
            await self._join(event)
        await self.layer.group_send(layer_group(event.target), layer_message(event))

    async def publish_many(self, events: list[OutgoingEvent]) -> list[BaseException | None]:
        """The whole chunk in one round trip when its groups' members are as last read on
        a single Redis (else two pipelined ones), when the layer allows it (one more per
        chat a user joins); a Redis failure there fails the chunk (its rows are
        retried), an event the layer cannot serialize fails alone (UnencodablePayload)."""
        if not pipeline.supports(self.layer):
            results: list[BaseException | None] = []
            for event in events:
                try:
                    await self.publish(event)
                    results.append(None)
                except Exception as exc:
                    results.append(exc)
            return results
        start = 0
        self.last_channels = []
        outcome: list[BaseException | None] = [None] * len(events)
        for index, event in enumerate(events):
            if event.joins is not None:  # rare: a membership change, in stream order
                await self._send_many(events, start, index, outcome)
                await self._join(event)
                start = index
        await self._send_many(events, start, len(events), outcome)
        return outcome

    async def _send_many(
        self,
        events: list[OutgoingEvent],
        start: int,
        end: int,
        outcome: list[BaseException | None],
    ) -> None:
        """Send events[start:end]; an event the layer could not serialize gets its error
        in `outcome` (the others are sent all the same)."""
        if start < end:
            messages = [(layer_group(e.target), layer_message(e)) for e in events[start:end]]
            # A message dropped for a full channel is counted and its connections told.
            sent = await pipeline.group_send_many(self.layer, messages, self.scores, self.members)
            self._bound += len(messages)
            pipeline.report_lost(sent.lost)
            self.last_channels = list(dict.fromkeys([*self.last_channels, *sent.channel_keys]))
            for index, error in sent.unencodable.items():
                outcome[start + index] = error

    async def _join(self, event: OutgoingEvent) -> None:
        """The user's connections join the chat's group now, ahead of the chat's later
        events (their consumers confirm it against the domain, hub/connection/membership.py)."""
        assert event.joins is not None
        user, chat = layer_group(event.target), layer_group(HubTarget.chat(event.joins))
        await pipeline.copy_members(self.layer, user, chat)

    async def hub_backlog(self, within: int | None = None) -> int:
        """The longest queue among the hub processes the last chunk reached that are still
        being drained (backplane/backlog.py; 0 when the layer is not the pipelined
        channels-redis one).

        With `within`, the bound answers without a Redis round trip (one per pass saved)
        while it stays within `within`, covers every queue the chunk reached and was
        measured less than BOUND_FOR ago (other pushers, e.g. other partitions' leaders,
        are not in the bound: it is measured again that often)."""
        if not self.last_channels or not pipeline.supports(self.layer):
            return 0
        now = self.queues.clock()
        if (
            within is not None
            and self._bound <= within
            and now - self._measured_at < BOUND_FOR
            and self._measured.issuperset(self.last_channels)
        ):
            return self._bound
        states = await pipeline.queue_states(self.layer, self.last_channels)
        self._measured, self._measured_at = set(states), now
        self._bound = self.queues.longest_draining(states)
        return self._bound


def layer_message(event: OutgoingEvent) -> dict[str, Any]:
    """The Channels message the hub consumer receives (hub/connection/layer_messages.py).

    `chat` names the chat of a chat-group event and `membership_version` the version of
    its memberships the worker read (the consumer re-checks membership with both); both
    are absent for a user event; `per_recipient` asks for media credentials;
    `committed_at` is when the row was committed (the hub's delivery latency).
    """
    message: dict[str, Any] = {"type": EVENT_TYPE, "event": event.name, "payload": event.payload}
    if event.target.kind == "chat":
        message["chat"] = str(event.target.id)
        if event.membership_version is not None:
            message["membership_version"] = event.membership_version
    if event.per_recipient:
        message["per_recipient"] = True
    if event.committed_at is not None:
        message["committed_at"] = event.committed_at
    return message
