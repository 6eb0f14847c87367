"""A connection's clock: handshake timeout, keep-alive pings, the client timeout, the
credentials' expiry, stateful reconnect's Acks and how long a connection without its
transport is kept. A mixin of HubConnection, one task per connection."""

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from messenger_realtime.conf.settings import HubOptions
from messenger_realtime.hub.protocols import handshake
from messenger_realtime.hub.protocols.base import Frame, HubProtocol
from messenger_realtime.hub.transports.base import Transport
from messenger_realtime.ops.logging import Field

logger = logging.getLogger(__name__)
CLIENT_TIMEOUT = (
    "Connection closed with an error. OperationCanceledException: Client hasn't sent a "
    "message/ping within the configured ClientTimeoutInterval."
)
LONGEST_NAP = 3600.0  # the watchdog wakes at least this often (no deadline may be infinite)


class ConnectionTimers:
    options: HubOptions
    handshaken: bool
    closing: bool
    opened_at: float
    last_received: float
    last_sent: float
    expires_at: float  # loop time; infinity when the credentials do not expire
    expiry_reason: str
    detached_at: float | None  # a stateful WebSocket's drop, awaiting its resume
    wake: asyncio.Event  # set when a deadline may have moved

    if TYPE_CHECKING:  # provided by HubConnection and its mixins
        transport: Transport | None
        protocol: HubProtocol | None
        stateful: Any
        connection_id: str
        user_id: Any

        async def _send(self, frame: Frame) -> None: ...

        async def _send_ack(self) -> None: ...

        async def _finish(self) -> None: ...

        async def end(self) -> None: ...

        async def _close_with_error(
            self, reason: str, *, allow_reconnect: bool = False
        ) -> None: ...

        async def _drop(self, reason: str, **fields: Any) -> None: ...

    async def _watch(self) -> None:
        """Wake at the nearest deadline (or when one moved); act on whichever passed."""
        o = self.options
        loop = asyncio.get_running_loop()
        while not self.closing:
            now = loop.time()
            if not self.handshaken and now - self.opened_at >= o.handshake_timeout:
                self.closing = True
                await self._send(handshake.handshake_error("Handshake was canceled."))
                await self._finish()
                return
            if now >= self.expires_at:
                await self._drop(self.expiry_reason)
                return
            idle = self._unreachable_since()
            if idle is not None and now - idle >= o.disconnect_timeout:
                await self._gone()
                return
            keepalive = idle is None and self._pings()
            if keepalive and now - self.last_received >= o.client_timeout:
                await self._close_with_error(CLIENT_TIMEOUT, allow_reconnect=True)
                return
            if keepalive and now - self.last_sent >= o.keepalive_interval:
                assert self.protocol is not None
                await self._send(self.protocol.ping())
            ack_at = self.stateful.ack_at if self.stateful is not None else None
            if ack_at is not None and now >= ack_at:
                await self._send_ack()
            deadlines = [self.expires_at, now + LONGEST_NAP]
            if not self.handshaken:
                deadlines.append(self.opened_at + o.handshake_timeout)
            if idle is not None:
                deadlines.append(idle + o.disconnect_timeout)
            if keepalive:
                deadlines += [self.last_received + o.client_timeout]
                deadlines += [self.last_sent + o.keepalive_interval]
            if self.stateful is not None and self.stateful.ack_at is not None:
                deadlines.append(self.stateful.ack_at)
            await self._nap(max(0.0, min(deadlines) - loop.time()) + 0.01)

    async def _nap(self, seconds: float) -> None:
        self.wake.clear()
        # asyncio.timeout, not wait_for: no task per nap (every connection naps between
        # its pings: part of what a hub process spends on idle connections).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self.wake.wait()

    def _pings(self) -> bool:
        """Keep-alive both ways: after the handshake, on transports without their own."""
        transport = self.transport
        return self.handshaken and transport is not None and not transport.inherent_keepalive

    def _unreachable_since(self) -> float | None:
        """Since when no transport can reach the client: a dropped stateful WebSocket,
        or a long-polling connection with no poll pending."""
        if self.detached_at is not None:
            return self.detached_at
        transport = self.transport
        return transport.idle_since() if transport is not None else None

    async def _gone(self) -> None:
        """Nothing reached the client for DISCONNECT_TIMEOUT: end without a resume."""
        reason = "no resume" if self.detached_at is not None else "no poll"
        logger.info(
            "hub connection ended",
            extra={
                "action": "close",
                "reason": f"{reason} within DISCONNECT_TIMEOUT",
                Field.CONNECTION_ID: self.connection_id,
                Field.USER_ID: self.user_id,
            },
        )
        await self._finish()
