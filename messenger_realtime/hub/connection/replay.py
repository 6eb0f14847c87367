"""Stateful reconnect's bookkeeping for one connection (pure; no I/O).

The protocol's handshake version 2 with Ack (8) and Sequence (9): each side numbers the
hub invocation messages it sends (protocols.base.SEQUENCED) from 1, keeps them until the
peer acks them, and after a reconnect tells the peer with a Sequence which id comes next,
then sends again what was not acked. The receiving side drops what it already had.

Server side here: a bounded ReplayBuffer of what was sent and not acked (bytes of the
encoded messages, characters for JSON, as the official client counts its own), and an
InboundSequence that numbers what arrives, drops duplicates and says what to ack.
"""

from collections import deque
from dataclasses import dataclass, field

from messenger_realtime.exceptions import SequenceError
from messenger_realtime.hub.protocols.base import Frame

SEQUENCE_TOO_HIGH = "Sequence ID greater than amount of messages we've received."


@dataclass
class ReplayBuffer:
    """Sent hub invocation messages not yet acked, oldest first, within `limit` bytes.

    Once more than `limit` waits unacked the buffer is given up (`resumable` False): the
    connection goes on, but a later resume is refused and the client starts afresh.
    """

    limit: int
    next_id: int = 1  # the id the next sequenced message takes
    size: int = 0
    resumable: bool = True
    _frames: deque[tuple[int, Frame]] = field(default_factory=deque)

    def add(self, frame: Frame) -> bool:
        """Number and keep a sent message; False once the buffer is over its limit."""
        message_id, self.next_id = self.next_id, self.next_id + 1
        if not self.resumable:
            return False
        self._frames.append((message_id, frame))
        self.size += len(frame)
        if self.size > self.limit:
            self.give_up()
            return False
        return True

    def give_up(self) -> None:
        """Drop every kept message: this connection can no longer resume."""
        self.resumable = False
        self._frames.clear()
        self.size = 0

    def ack(self, sequence_id: int) -> None:
        """The peer has everything up to `sequence_id` (higher ids just empty the buffer)."""
        while self._frames and self._frames[0][0] <= sequence_id:
            self.size -= len(self._frames.popleft()[1])

    def first_id(self) -> int:
        """The Sequence a resume starts with: the oldest unacked id, or the next one."""
        return self._frames[0][0] if self._frames else self.next_id

    def frames_after(self, sequence_id: int) -> list[tuple[int, Frame]]:
        """The kept messages with ids above `sequence_id`, in order."""
        return [(i, f) for i, f in self._frames if i > sequence_id]


@dataclass
class InboundSequence:
    """Numbers the hub invocation messages a client sends; drops what was seen already."""

    current: int = 1  # the id the next one takes
    latest: int = 0  # the highest id processed
    acked: int = 0  # the highest id this side has acked

    def sequence(self, sequence_id: int) -> None:
        """A Sequence from the client: its next message has this id (SequenceError if it
        skips ids the server never got)."""
        if sequence_id > self.current:
            raise SequenceError(SEQUENCE_TOO_HIGH)
        self.current = sequence_id

    def accept(self) -> bool:
        """Number one received hub invocation message; False for a duplicate."""
        message_id, self.current = self.current, self.current + 1
        if message_id <= self.latest:
            return False
        self.latest = message_id
        return True

    def ack_due(self) -> int | None:
        """The id to ack now, if it moved since the last Ack; records it as acked."""
        if self.latest <= self.acked:
            return None
        self.acked = self.latest
        return self.acked
