"""Delivery latency from the client's side: a part of HubConnection, made only for a
connection whose client acknowledges what it received.

Two kinds of client acknowledge (docs/hub.md, "Delivery latency"):
- a stateful reconnect connection: every hub invocation message it is sent is numbered,
  and the client's Acks are cumulative (sequence ids);
- a client that calls `Acknowledge` with the offsets its streams have reached (the web
  client module, about once a second): cumulative per stream.

For each live event sent (an event whose channel-layer message carries `committed_at`,
its row's created_at by the database's clock: backplane/publisher.py) it keeps when it
was committed, when it was sent, its name and where it sits (its sequence id, or its
stream and offset) until acknowledged; then observes, per event and transport,
messenger_realtime_hub_client_delivery_seconds = when the client had it - committed_at, both
by the database's clock (the process's corrected by hub/database_clock.py):

- a stateful Ack: the official clients (JS, .NET, Java) send one STATEFUL_ACK_DELAY after
  the first message they received since their last, acking every one since;
- `Acknowledge(offsets, waited)`: the client says how long ago it had the first of the
  events it acknowledges (the web client module: five seconds after that first one).
Either way the first event of the acknowledged window reached the client that long
before the acknowledgement arrived, and each later one as much later as it was sent
after the first (never before it was sent, never after the acknowledgement).

At most KEPT events wait: a client that stops acknowledging costs a bounded list and its
oldest entries go unobserved. Events a Recover sends carry no `committed_at`: the
histogram is of live delivery.

What the client says is bounded (hub/delivery_slo.py): an event acknowledged over
delivery_slo.ACK_WINDOW after its send is not measured (counted `late`), the stated wait
is taken off only up to that window, and each observation goes through the process's
ClientShares, which caps what one user adds.
"""

import collections
from typing import Any, NamedTuple, Protocol
from uuid import UUID

from messenger_realtime.hub.delivery_slo import ACK_WINDOW, ClientShares
from messenger_realtime.hub.transports.base import Transport
from messenger_realtime.ops import metrics

KEPT = 256  # sent events waiting for their acknowledgement, at most
# After the first message received since its last Ack, the official clients' Ack comes
# this late (their MessageBuffer's timer; stateful.ACK_INTERVAL is the server's own).
STATEFUL_ACK_DELAY = 1.0


class Sent(NamedTuple):
    """A live event on its way to the client, until acknowledged."""

    committed_at: float  # unix seconds, the database's clock
    sent_at: float  # when it was emitted to the client, the same clock
    event: str  # the hub event's name, e.g. message_received
    stream: str | None  # its stream (None: keyed by its sequence id)
    position: int  # its offset in `stream`, or its sequence id


class DatabaseTime(Protocol):
    """hub/database_clock.DatabaseClock, as this part reads it."""

    def now(self) -> float: ...


class Owner(Protocol):
    """Its connection (lifecycle.HubConnection), as this part reads it: read-only."""

    @property
    def transport(self) -> Transport | None: ...  # the one carrying it now

    def next_sequence_id(self) -> int | None: ...  # what the next emit is numbered (stateful)


class Acknowledgements:
    """The live events sent to one connection and not acknowledged yet."""

    __slots__ = ("_built", "_clock", "_owner", "_sent", "_shares", "_user_id")

    def __init__(
        self, owner: Owner, clock: DatabaseTime, *, user_id: UUID, shares: ClientShares
    ) -> None:
        self._owner, self._clock = owner, clock
        self._user_id, self._shares = user_id, shares  # the process's, for every connection
        self._sent: collections.deque[Sent] = collections.deque(maxlen=KEPT)
        # Events whose frames wait in the batch in hand (Outbound.unsent), by their
        # index there: a frame's sequence id is known once the batch is emitted.
        self._built: list[tuple[int, dict[str, Any]]] = []

    def built(self, index: int, message: dict[str, Any]) -> None:
        """An event's frame is the batch's `index`th (Outbound): kept if live."""
        if message.get("committed_at") is not None:
            self._built.append((index, message))

    def emitting(self) -> None:
        """The batch's frames are about to be emitted, in order (Outbound.flush): with
        stateful reconnect the first takes the next sequence id and each the one after."""
        built, self._built = self._built, []
        first = self._owner.next_sequence_id()
        now = self._clock.now()
        for index, message in built:
            payload = message["payload"]
            if first is not None:
                stream, position = None, first + index
            elif "offset" in payload:
                stream, position = payload["stream"], payload["offset"]
            else:
                continue  # no stream, no sequence: nothing the client can acknowledge
            committed_at, event = message["committed_at"], message["event"]
            self._sent.append(Sent(committed_at, now, event, stream, position))

    def acked(self, sequence_id: int) -> None:
        """Stateful reconnect's Ack: the client has every message up to `sequence_id`."""
        sent = self._sent
        if not sent or sent[0].stream is not None or sent[0].position > sequence_id:
            return
        window = []
        while sent and sent[0].stream is None and sent[0].position <= sequence_id:
            window.append(sent.popleft())
        self._observe(window, STATEFUL_ACK_DELAY)

    def acknowledged(self, offsets: dict[str, int], waited: float) -> None:
        """`Acknowledge`: the client holds each of these streams up to its offset, and
        had the first of the events it acknowledges now `waited` seconds ago."""
        if not offsets or not self._sent:
            return  # nothing to compare (the first call; a call repeated): no work
        window, left = [], collections.deque[Sent](maxlen=KEPT)
        for entry in self._sent:
            reached = offsets.get(entry.stream) if entry.stream is not None else None
            if reached is not None and entry.position <= reached:
                window.append(entry)
            else:
                left.append(entry)
        if window:
            self._sent = left
            self._observe(window, waited)

    def _observe(self, window: list[Sent], waited: float) -> None:
        """The events of one acknowledgement, in the order they were sent: the client had
        the first `waited` seconds before now (at most ACK_WINDOW), each later one as
        much later as it was sent after the first, but none before it was sent nor
        after now. An event sent over ACK_WINDOW ago is not measured."""
        if not window:
            return
        now = self._clock.now()
        first_had, first_sent = now - min(waited, ACK_WINDOW), window[0].sent_at
        transport = self._owner.transport
        name = transport.name if transport is not None else "detached"
        shares, user_id = self._shares, self._user_id
        for entry in window:
            if now - entry.sent_at > ACK_WINDOW:
                metrics.client_delivery_unmeasured.labels(reason="late").inc()
                continue
            had = min(now, max(entry.sent_at, first_had + (entry.sent_at - first_sent)))
            shares.observe(user_id, entry.event, name, max(0.0, had - entry.committed_at))
