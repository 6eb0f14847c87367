"""A connection's deadlines: handshake timeout, keep-alive pings, the client timeout, the
credentials' expiry, stateful reconnect's Acks and how long a connection without its
transport is kept.

A part of HubConnection with no task of its own: the process's Clock (clock.py) calls
`fire` at the nearest deadline, and whoever moves a deadline earlier (an Ack falling due,
a WebSocket dropping) calls `moved`. A ping or an Ack is written inline; the end a
deadline calls for, which waits on the socket and the channel layer, the connection runs
in a task of its own (end_soon) so one connection's close never holds up the others'
deadlines.

Timeouts owns its clock entry and the times its deadlines count from: when the
connection was opened (the handshake timeout) and when the client was last heard
(`heard`: the client timeout). When it last wrote is its Outbound's (`last_sent`: the
keep-alive), its credentials' expiry its Authentication's, an Ack's time and a detached
WebSocket's its StatefulReconnect's; what else it needs of its connection it reads
through the one reference it is handed when made, typed `Owner` (below): read-only.
"""

from typing import Protocol

import messenger_realtime.hub.connection.ending as ending
from messenger_realtime.conf.settings import HubOptions
from messenger_realtime.hub.clock import Clock, Entry, cancel
from messenger_realtime.hub.connection.authentication import Authentication
from messenger_realtime.hub.connection.ending import CLIENT_TIMEOUT, Ending
from messenger_realtime.hub.connection.outbound import Outbound
from messenger_realtime.hub.connection.stateful import StatefulReconnect
from messenger_realtime.hub.protocols.base import HubProtocol
from messenger_realtime.hub.transports.base import Transport

LONGEST_NAP = 3600.0  # every connection is looked at least this often (none is infinite)
SLACK = 0.01  # s after a deadline: its comparison with the clock must find it passed


class Owner(Protocol):
    """Its connection (lifecycle.HubConnection), as Timeouts reads and calls it when a
    deadline passes: all read-only here (a resume swaps the transport; the handshake
    chooses the protocol and may grant stateful reconnect)."""

    @property
    def closing(self) -> bool: ...

    @property
    def handshaken(self) -> bool: ...

    @property
    def transport(self) -> Transport | None: ...

    @property
    def protocol(self) -> HubProtocol | None: ...

    @property
    def stateful(self) -> StatefulReconnect | None: ...

    def end_soon(self, how: Ending) -> None: ...


class Timeouts:
    """The deadlines of one connection, kept by the process's clock."""

    __slots__ = (
        "_owner",
        "auth",
        "clock",
        "entry",
        "last_received",
        "opened_at",
        "options",
        "outbound",
    )

    def __init__(
        self,
        clock: Clock,
        options: HubOptions,
        *,
        owner: Owner,
        opened_at: float,
        auth: Authentication,
        outbound: Outbound,
    ) -> None:
        self.clock = clock  # its process's, on its loop (HubProcess.clock)
        self.options = options
        self.auth, self.outbound = auth, outbound
        self._owner = owner  # its connection, read when a deadline passes
        self.opened_at = self.last_received = opened_at  # loop times
        self.entry: Entry | None = None

    def heard(self) -> float:
        """Something came from the client now (its timeout counts from here): the time."""
        self.last_received = now = self.clock.loop.time()
        return now

    def start(self) -> None:
        self.moved(self.clock.loop.time())

    def moved(self, when: float) -> None:
        """A deadline may now be as early as `when` (loop time)."""
        self.entry = self.clock.schedule(self, when + SLACK, self.entry)

    def stop(self) -> None:
        cancel(self.entry)
        self.entry = None

    def pings(self) -> bool:
        """Keep-alive both ways: after the handshake, on transports without their own."""
        owner = self._owner
        transport = owner.transport
        return owner.handshaken and transport is not None and not transport.inherent_keepalive

    def unreachable_since(self) -> float | None:
        """Since when no transport can reach the client: a dropped stateful WebSocket,
        or a long-polling connection with no poll pending."""
        owner = self._owner
        stateful = owner.stateful
        if stateful is not None and stateful.detached_at is not None:
            return stateful.detached_at
        transport = owner.transport
        return transport.idle_since() if transport is not None else None

    def fire(self, now: float) -> None:
        """Act on whichever deadline passed, then schedule the next one."""
        self.entry = None
        owner = self._owner
        if owner.closing:
            return
        o, end_soon, handshaken = self.options, owner.end_soon, owner.handshaken
        if not handshaken and now - self.opened_at >= o.handshake_timeout:
            end_soon(ending.handshake_refused("Handshake was canceled."))
            return
        ended = ending.expired(self.auth, now)
        if ended is not None:
            end_soon(ended)
            return
        stateful = owner.stateful
        idle = self.unreachable_since()
        if idle is not None and now - idle >= o.disconnect_timeout:
            # Nothing reached the client for DISCONNECT_TIMEOUT: end without a resume.
            detached = stateful is not None and stateful.detached_at is not None
            reason = "no resume" if detached else "no poll"
            end_soon(ending.gone(f"{reason} within DISCONNECT_TIMEOUT"))
            return
        last_received, last_sent = self.last_received, self.outbound.last_sent
        keepalive = idle is None and self.pings()
        if keepalive and now - last_received >= o.client_timeout:
            end_soon(ending.error(CLIENT_TIMEOUT, allow_reconnect=True))
            return
        if keepalive and now - last_sent >= o.keepalive_interval:
            protocol = owner.protocol
            assert protocol is not None
            self.outbound.write_now(protocol.ping())
        if stateful is not None and stateful.ack_at is not None and now >= stateful.ack_at:
            stateful.send_ack_now()
        deadlines = [self.auth.expires_at, now + LONGEST_NAP]  # when it expires: next wake
        if not handshaken:
            deadlines.append(self.opened_at + o.handshake_timeout)
        if idle is not None:
            deadlines.append(idle + o.disconnect_timeout)
        if keepalive:
            deadlines.append(last_received + o.client_timeout)
            deadlines.append(self.outbound.last_sent + o.keepalive_interval)
        if stateful is not None and stateful.ack_at is not None:
            deadlines.append(stateful.ack_at)
        self.moved(min(deadlines))
