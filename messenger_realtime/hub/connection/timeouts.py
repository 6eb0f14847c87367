"""A connection's deadlines: handshake timeout, keep-alive pings, the client timeout, the
credentials' expiry, stateful reconnect's Acks and how long a connection without its
transport is kept.

A part of HubConnection with no task of its own: the process's Clock (clock.py) calls
`fire` at the nearest deadline, and whoever moves a deadline earlier (an Ack falling due,
a WebSocket dropping) calls `moved`. A ping or an Ack is written inline; the end a
deadline calls for, which waits on the socket and the channel layer, the connection runs
in a task of its own (end_soon) so one connection's close never holds up the others'
deadlines.
"""

import messenger_realtime.hub.connection.ending as ending
from messenger_realtime.hub.clock import Clock, Entry, cancel
from messenger_realtime.hub.connection.ending import CLIENT_TIMEOUT
from messenger_realtime.hub.connection.state import Connection

LONGEST_NAP = 3600.0  # every connection is looked at least this often (none is infinite)
SLACK = 0.01  # s after a deadline: its comparison with the clock must find it passed


class Timeouts:
    """The deadlines of one connection, kept by the process's clock."""

    __slots__ = ("clock", "connection", "entry")

    def __init__(self, connection: Connection, clock: Clock) -> None:
        self.connection = connection
        self.clock = clock  # its process's, on its loop (HubProcess.clock)
        self.entry: Entry | None = None

    def start(self) -> None:
        self.moved(self.connection.loop.time())

    def moved(self, when: float) -> None:
        """A deadline may now be as early as `when` (loop time)."""
        self.entry = self.clock.schedule(self, when + SLACK, self.entry)

    def stop(self) -> None:
        cancel(self.entry)
        self.entry = None

    def fire(self, now: float) -> None:
        """Act on whichever deadline passed, then schedule the next one."""
        self.entry = None
        c = self.connection
        if c.closing:
            return
        o = c.options
        if not c.handshaken and now - c.opened_at >= o.handshake_timeout:
            c.end_soon(ending.handshake_refused("Handshake was canceled."))
            return
        auth = c.auth
        if now >= auth.expires_at:
            c.end_soon(ending.dropped(auth.expiry_reason))
            return
        idle = c.unreachable_since()
        if idle is not None and now - idle >= o.disconnect_timeout:
            # Nothing reached the client for DISCONNECT_TIMEOUT: end without a resume.
            detached = c.stateful is not None and c.stateful.detached_at is not None
            reason = "no resume" if detached else "no poll"
            c.end_soon(ending.gone(f"{reason} within DISCONNECT_TIMEOUT"))
            return
        keepalive = idle is None and c.pings()
        if keepalive and now - c.last_received >= o.client_timeout:
            c.end_soon(ending.error(CLIENT_TIMEOUT, allow_reconnect=True))
            return
        if keepalive and now - c.last_sent >= o.keepalive_interval:
            assert c.protocol is not None
            c.outbound.write_now(c.protocol.ping())
        stateful = c.stateful
        if stateful is not None and stateful.ack_at is not None and now >= stateful.ack_at:
            stateful.send_ack_now()
        deadlines = [auth.expires_at, now + LONGEST_NAP]
        if not c.handshaken:
            deadlines.append(c.opened_at + o.handshake_timeout)
        if idle is not None:
            deadlines.append(idle + o.disconnect_timeout)
        if keepalive:
            deadlines.append(c.last_received + o.client_timeout)
            deadlines.append(c.last_sent + o.keepalive_interval)
        if stateful is not None and stateful.ack_at is not None:
            deadlines.append(stateful.ack_at)
        self.moved(min(deadlines))
