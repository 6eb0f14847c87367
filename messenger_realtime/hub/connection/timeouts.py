"""A connection's deadlines: handshake timeout, keep-alive pings, the client timeout, the
credentials' expiry, stateful reconnect's Acks and how long a connection without its
transport is kept.

A value the connection keeps, with no task and no reference to anything: the connection
is what the process's Clock (clock.py) calls at the nearest deadline
(HubConnection.fire), and it asks `due` what has fallen due, handing over what it
knows (whether it is handshaken, its transport, its stateful reconnect, its credentials,
when it last wrote); `due` answers with a `Due`, a decision: how to end, or a ping and an
Ack to write, and when to be called next. The connection acts on it (an end in a task of
its own, end_soon, so one connection's close never holds up the others' deadlines).

Timeouts owns the times its deadlines count from: when the connection was opened (the
handshake timeout) and when the client was last heard (`heard`: the client timeout).
"""

from typing import NamedTuple

import messenger_realtime.hub.connection.ending as ending
from messenger_realtime.conf.settings import HubOptions
from messenger_realtime.hub.connection.authentication import Authentication
from messenger_realtime.hub.connection.ending import CLIENT_TIMEOUT, Ending
from messenger_realtime.hub.connection.stateful import StatefulReconnect
from messenger_realtime.hub.transports.base import Transport

LONGEST_NAP = 3600.0  # every connection is looked at least this often (none is infinite)
SLACK = 0.01  # s after a deadline: its comparison with the clock must find it passed


class Due(NamedTuple):
    """What fell due at a deadline, for the connection to do."""

    end: Ending | None = None  # end so (nothing else then)
    ping: bool = False  # write a keep-alive Ping now
    ack: bool = False  # send stateful reconnect's Ack now
    next_at: float = 0.0  # loop time to be called again (with SLACK added by the caller)


class Timeouts:
    """The times one connection's deadlines count from, and the rule that reads them."""

    __slots__ = ("last_received", "opened_at", "options")

    def __init__(self, options: HubOptions, *, opened_at: float) -> None:
        self.options = options
        self.opened_at = self.last_received = opened_at  # loop times

    def heard(self, now: float) -> float:
        """Something came from the client at `now` (its timeout counts from here)."""
        self.last_received = now
        return now

    def due(
        self,
        now: float,
        *,
        handshaken: bool,
        transport: Transport | None,
        stateful: StatefulReconnect | None,
        auth: Authentication,
        last_sent: float,
    ) -> Due:
        """What has fallen due at `now` for a connection in this state, and when to look
        again."""
        o = self.options
        if not handshaken and now - self.opened_at >= o.handshake_timeout:
            return Due(end=ending.handshake_refused("Handshake was canceled."))
        ended = ending.expired(auth, now)
        if ended is not None:
            return Due(end=ended)
        idle = unreachable_since(transport, stateful)
        if idle is not None and now - idle >= o.disconnect_timeout:
            # Nothing reached the client for DISCONNECT_TIMEOUT: end without a resume.
            detached = stateful is not None and stateful.detached_at is not None
            reason = "no resume" if detached else "no poll"
            return Due(end=ending.gone(f"{reason} within DISCONNECT_TIMEOUT"))
        last_received = self.last_received
        keepalive = idle is None and pings(handshaken, transport)
        if keepalive and now - last_received >= o.client_timeout:
            return Due(end=ending.error(CLIENT_TIMEOUT, allow_reconnect=True))
        ping = keepalive and now - last_sent >= o.keepalive_interval
        ack_at = stateful.ack_at if stateful is not None else None
        ack = ack_at is not None and now >= ack_at
        deadlines = [auth.expires_at, now + LONGEST_NAP]  # when it expires: next wake
        if not handshaken:
            deadlines.append(self.opened_at + o.handshake_timeout)
        if idle is not None:
            deadlines.append(idle + o.disconnect_timeout)
        if keepalive:
            deadlines.append(last_received + o.client_timeout)
            # A ping written now moves the keep-alive: it counts from `now`.
            deadlines.append((now if ping else last_sent) + o.keepalive_interval)
        if ack_at is not None and not ack:
            deadlines.append(ack_at)
        return Due(ping=ping, ack=ack, next_at=min(deadlines))


def pings(handshaken: bool, transport: Transport | None) -> bool:
    """Keep-alive both ways: after the handshake, on transports without their own."""
    return handshaken and transport is not None and not transport.inherent_keepalive


def unreachable_since(
    transport: Transport | None, stateful: StatefulReconnect | None
) -> float | None:
    """Since when no transport can reach the client: a dropped stateful WebSocket, or a
    long-polling connection with no poll pending."""
    if stateful is not None and stateful.detached_at is not None:
        return stateful.detached_at
    return transport.idle_since() if transport is not None else None
