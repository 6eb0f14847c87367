"""The delivery SLO (p95 < 1 s from commit to the user) as a hub process measures it, in
two signals of different trust (docs/operations.md, "The delivery SLO: what it trusts").

1. **The server's measure**, the one the critical alert reads:
   messenger_realtime_hub_delivery_seconds{kind,transport}, from an event's commit (its
   row's created_at, the database's clock) to the moment this process handed its frame to
   the connection's transport (`handed_over`, from Outbound.flush). Only the server's
   clocks are in it, so no client can move it: a client that reads slowly, acknowledges
   late or lies about when it had an event changes nothing here (a transport takes a
   frame without waiting for its client; one that falls too far behind is closed).

2. **The clients' acknowledgements**, a second signal (hub/connection/acknowledgements.py):
   closer to the user, but told by the client, so bounded here. An acknowledgement is
   measured only for an event the process sent on that connection, only when it comes
   within ACK_WINDOW of the send, with the client's stated wait taken off only up to that
   window; and each user adds at most USER_SHARE observations to the process's histogram
   per SHARE_WINDOW. Per user and window the process counts, once, that the user was
   measured and, once, that they had a delivery over SLOW (`..._client_delivery_users`),
   and the warning alert needs SLOW_USERS such user-windows on one process in five
   minutes: one user makes at most one a window, so no single client fires it, and none
   can hide it either (its share of the observations is capped like anyone's).
"""

import time
from collections.abc import Iterable
from typing import Any
from uuid import UUID

from messenger_realtime.ops import metrics

SLOW = 1.0  # s: the spec's SLO, commit -> the user
ACK_WINDOW = 10.0  # s after a send within which its acknowledgement is measured
SHARE_WINDOW = 60.0  # s: a user's share of the client histogram is counted per window
USER_SHARE = 8  # observations one user adds per process and window, at most
# Slow user-windows one process must see in five minutes for the warning alert
# (ops/prometheus/alerts.yml): a user makes at most one per SHARE_WINDOW (6 in 5 min).
SLOW_USERS = 20

# Histogram children by (event, transport), made once: labels() per delivery costs a
# lock and a dict of its own.
_handed: dict[tuple[str, str], Any] = {}
_acknowledged: dict[tuple[str, str], Any] = {}


def handed_over(live: Iterable[tuple[float, str]], transport: str, now: float) -> None:
    """The frames of these live events ((committed_at, event name)) were handed to a
    connection's transport `now` (both the database's clock)."""
    for committed_at, event in live:
        child = _handed.get((event, transport))
        if child is None:
            child = _handed[event, transport] = metrics.hub_delivery.labels(
                kind=event, transport=transport
            )
        child.observe(max(0.0, now - committed_at))


class ClientShares:
    """What each user has added to this process's client histogram in the current
    SHARE_WINDOW (one per process and event loop: HubProcess.client_shares)."""

    __slots__ = ("_counts", "_slow", "_window")

    def __init__(self) -> None:
        self._window = -1  # which SHARE_WINDOW the counts are of
        self._counts: dict[UUID, int] = {}  # observations per user in it
        self._slow: set[UUID] = set()  # users counted slow in it

    def observe(self, user_id: UUID, event: str, transport: str, seconds: float) -> bool:
        """Add a client's acknowledged delivery, within the user's share (False: past it,
        not added)."""
        window = int(time.monotonic() // SHARE_WINDOW)
        if window != self._window:
            self._window, self._counts, self._slow = window, {}, set()
        count = self._counts.get(user_id, 0)
        if count >= USER_SHARE:
            metrics.client_delivery_unmeasured.labels(reason="share").inc()
            return False
        self._counts[user_id] = count + 1
        if count == 0:
            metrics.client_delivery_users.labels(outcome="measured").inc()
        if seconds > SLOW and user_id not in self._slow:
            self._slow.add(user_id)
            metrics.client_delivery_users.labels(outcome="slow").inc()
        child = _acknowledged.get((event, transport))
        if child is None:
            child = _acknowledged[event, transport] = metrics.client_delivery.labels(
                kind=event, transport=transport
            )
        child.observe(seconds)
        return True
