"""What the channel layer brings a connection: dispatcher events and control messages.
A mixin of HubConnection; each handler is named after its Channels message type."""

import logging
from typing import TYPE_CHECKING, Any
from uuid import UUID

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async

from messenger_realtime.hub import protocols
from messenger_realtime.hub.auth import session_holds
from messenger_realtime.hub.media import media_join
from messenger_realtime.hub.membership import ChatMemberships
from messenger_realtime.hub.protocols.base import Frame, HubProtocol
from messenger_realtime.ops import metrics

logger = logging.getLogger(__name__)
OVERRUN = "events dropped (channel layer overrun)"
SESSION_ENDED = "session ended (logout)"
REVOKED = "credentials revoked"
EVENT_TYPE = "realtime.event"  # transport/publisher.py's dispatcher events
_FRAMES = "_frames"  # a message's frames by protocol name, filled in by the first connection


class EventHandlers:
    user_id: UUID
    closing: bool
    expires_at: float
    expiry_reason: str
    memberships: ChatMemberships
    session: str | None  # the digest of the Django session it authenticated with
    session_key: str | None  # and that session's key (never logged, never sent)
    protocol: HubProtocol | None
    options: Any

    if TYPE_CHECKING:  # provided by HubConnection and its mixins
        loop: Any

        async def _deliverable(self, chat: str, version: int | None) -> bool: ...

        async def _sync_groups(self) -> None: ...

        async def _emit(self, frame: Frame) -> None: ...

        async def _drop(self, reason: str, **fields: Any) -> None: ...

        async def shutdown(self) -> None: ...

        async def _send(self, frame: Frame) -> None: ...

        async def _send_close(self, close: Frame) -> None: ...

        async def _finish(self) -> None: ...

        def _ids(self) -> dict[str, Any]: ...

    async def dispatch(self, message: dict[str, Any]) -> None:
        """As a Channels consumer's, minus the close_old_connections() Channels runs in a
        thread before every handler: a thread hop per delivered event, the hub's hottest
        path. Every database read here goes through database_sync_to_async, which does
        that itself."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def realtime_event(self, message: dict[str, Any]) -> None:
        """A dispatcher event for one of this connection's groups."""
        frame = await self.event_frame(message)
        if frame is not None:
            await self._emit(frame)

    async def event_frame(self, message: dict[str, Any]) -> Frame | None:
        """The frame of a dispatcher event for this connection, or None when it must not
        get it. One message object reaches every local connection of its group, so the
        frame is encoded once per protocol and process and kept on the message."""
        if self.closing or self.loop.time() >= self.expires_at:
            await self._drop(self.expiry_reason)  # no event once the credentials expired
            return None
        chat = message.get("chat")
        if chat is not None:
            # The hot path inline (a lookup and a comparison); anything else, such as a
            # version newer than this connection's read, is for _deliverable().
            version, held = message.get("membership_version"), self.memberships.held.get(chat)
            if (held is None or (version is not None and version > held)) and not (
                await self._deliverable(chat, version)
            ):
                return None
        elif message["event"] == "chat_updated":
            # This user's memberships may have changed: re-read them first, so a client
            # that sees the event finds its groups already rebuilt.
            await self._sync_groups()
        protocol = self.protocol
        assert protocol is not None
        payload = message["payload"]
        if message.get("per_recipient") and "media" in payload:
            # Minted here, per recipient, at delivery: never stored, queued or logged.
            room = payload["media"]["roomName"]
            payload = {**payload, "media": media_join(room, self.user_id, self.options)}
            return protocol.invocation(message["event"], [payload])
        frames = message.get(_FRAMES)
        if frames is None:
            frames = message[_FRAMES] = {}
        frame = frames.get(protocol.name)
        if frame is None:
            frame = frames[protocol.name] = protocol.invocation(message["event"], [payload])
        return frame

    async def realtime_membership(self, message: dict[str, Any]) -> None:
        """The user's chat memberships changed: rebuild the chat groups from the domain."""
        await self._sync_groups()

    async def realtime_disconnect(self, message: dict[str, Any]) -> None:
        """Ops asked this user's connections to reconnect (see control.disconnect_user)."""
        await self.shutdown()

    async def realtime_session_ended(self, message: dict[str, Any]) -> None:
        """The user logged out of the Django session this connection came with."""
        if self.session is not None and message.get("session") == self.session:
            await self.end_session()

    async def realtime_revoked(self, message: dict[str, Any]) -> None:
        """The user was deactivated or deleted, or their credentials revoked
        (control.credentials_revoked): Close for good, whatever the credentials."""
        await self.end_session(REVOKED, metric="revoked")

    async def _session_holds(self) -> bool:
        """Whether the Django session this connection came with (if any) still exists and
        is still its user's."""
        key = self.session_key
        return key is None or await database_sync_to_async(session_holds)(key, self.user_id)

    async def end_session(self, reason: str = SESSION_ENDED, *, metric: str = "logout") -> None:
        """Its Django session ended (logout), or its credentials were revoked: Close
        saying so, without allowReconnect (a reconnect could only be refused; the
        official clients then stop for good)."""
        if self.closing:
            return
        self.closing = True
        metrics.hub_forced_closes.labels(reason=metric).inc()
        logger.info("hub connection closed", extra={**self._ids(), "reason": reason})
        close = self.protocol.close if self.protocol else protocols.JsonProtocol.close
        await self._send_close(close(f"Connection closed with an error. {reason}"))
        await self._finish()

    async def realtime_overrun(self, message: dict[str, Any]) -> None:
        """The channel layer dropped a message meant for this connection (transport/layer.py)."""
        await self._drop(OVERRUN)

    async def send_overflow(self, unsent: Any) -> None:
        """Daphne: the connection's unsent data passed SEND_BUFFER_LIMIT (wsprotocol.py,
        httpprotocol.py)."""
        await self._drop("send buffer over SEND_BUFFER_LIMIT", unsent=unsent)
