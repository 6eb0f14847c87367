"""A connection's streams around a recovery: live events never overtake recovered ones,
and no offset goes out twice. A part of HubConnection, made at its first event that has
an offset (a connection that never gets one never has it).

- Before the connection's first recovery it notes the offsets it sent live (at most
  TRACKED of them): a client calls `Recover` right after connecting, and an event pushed
  in between must not be sent again by the recovery.
- While a recovery of stream S runs, live events of S are held; once the recovered
  ones are sent, the held ones follow in their order (those the recovery already sent
  are dropped).
- After S was recovered up to offset M, a live event of S at or below M is not sent: the
  client has it (it said so, or the recovery sent it). Above M every live event goes
  out, in whatever order the worker pushes it.

Past TRACKED offsets sent before any recovery, the notes stop: a recovery that comes that
late may send one of them again (a duplicate, never a loss; clients dedupe by offset).
"""

from typing import Any

TRACKED = 64  # offsets sent live before the first recovery that are noted


class StreamMarks:
    """What this connection sent of each stream, as far as recovery needs to know."""

    __slots__ = ("held", "noted", "recovered", "sent")

    def __init__(self) -> None:
        # Before the first recovery: stream -> offsets sent live (None once over).
        self.sent: dict[str, set[int]] | None = {}
        self.noted = 0  # offsets in `sent`
        self.held: dict[str, list[dict[str, Any]]] = {}  # streams being recovered
        self.recovered: dict[str, int] = {}  # stream -> offset it was recovered up to

    def admits(self, stream: str, offset: int, message: dict[str, Any]) -> bool:
        """Whether a live event goes out now (False: held for a recovery, or sent)."""
        held = self.held.get(stream)
        if held is not None:
            held.append(message)
            return False
        if offset <= self.recovered.get(stream, 0):
            return False
        sent = self.sent
        if sent is not None:
            sent.setdefault(stream, set()).add(offset)
            self.noted += 1
            if self.noted > TRACKED:  # past the bound: no more notes, and none kept
                self.sent = None
        return True

    def sent_live(self, stream: str) -> set[int]:
        sent = self.sent
        return sent.get(stream, set()) if sent is not None else set()
