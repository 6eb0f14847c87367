"""A connection's clock: handshake timeout, keep-alive pings, the client timeout and the
credentials' expiry. A mixin of HubConsumer, one task per connection."""

import asyncio
from typing import TYPE_CHECKING

from messenger_realtime.conf.settings import HubOptions
from messenger_realtime.hub import protocol

CLIENT_TIMEOUT = (
    "Connection closed with an error. OperationCanceledException: Client hasn't sent a "
    "message/ping within the configured ClientTimeoutInterval."
)


class ConnectionTimers:
    options: HubOptions
    handshaken: bool
    opened_at: float
    last_received: float
    last_sent: float
    expires_at: float  # loop time; infinity when the credentials do not expire
    expiry_reason: str

    if TYPE_CHECKING:  # provided by HubConsumer and its WebSocket consumer base

        async def send(self, text_data: str) -> None: ...

        async def close(self) -> None: ...

        async def _send(self, text: str) -> None: ...

        async def _close_with_error(
            self, reason: str, *, allow_reconnect: bool = False
        ) -> None: ...

        async def _drop(self, reason: str) -> None: ...

    async def _watch(self) -> None:
        """Wake at the nearest deadline; act on whichever has passed."""
        o = self.options
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            if not self.handshaken and now - self.opened_at >= o.handshake_timeout:
                await self.send(protocol.handshake_error("Handshake was canceled."))
                await self.close()
                return
            if now >= self.expires_at:
                await self._drop(self.expiry_reason)
                return
            if self.handshaken and now - self.last_received >= o.client_timeout:
                await self._close_with_error(CLIENT_TIMEOUT, allow_reconnect=True)
                return
            if self.handshaken and now - self.last_sent >= o.keepalive_interval:
                await self._send(protocol.PING)
            deadlines = [
                self.last_received + o.client_timeout,
                self.last_sent + o.keepalive_interval,
                self.expires_at,
            ]
            if not self.handshaken:
                deadlines.append(self.opened_at + o.handshake_timeout)
            await asyncio.sleep(max(0.0, min(deadlines) - loop.time()) + 0.01)
