"""What the channel layer brings a connection: dispatcher events and control messages.

Functions of a connection, not a part with state of its own: `event_frame` decides
whether an event goes out and `encode` encodes it (once per protocol and process), `dispatch`
acts on a control message by its Channels message type (HANDLERS), a typing indicator
among them (volatile: composing.py).
"""

from collections.abc import Awaitable, Callable
from typing import Any
from uuid import UUID

import messenger_realtime.hub.connection.ending as ending
from messenger_realtime.backplane.publisher import EVENT_TYPE
from messenger_realtime.hub.connection.composing import TYPING_TYPE, shown
from messenger_realtime.hub.connection.ending import BACKPLANE_RESTARTED, OVERRUN
from messenger_realtime.hub.connection.state import Connection
from messenger_realtime.hub.media_credentials import media_join
from messenger_realtime.hub.presence.changes import PRESENCE_EVENT, PRESENCE_MESSAGE
from messenger_realtime.hub.presence.visibility import may_still_see
from messenger_realtime.hub.protocols.base import Frame
from messenger_realtime.hub.restarts import BACKPLANE_RESTARTED_EVENT
from messenger_realtime.ops import metrics

_FRAMES = "_frames"  # a message's frames by protocol name, filled in by the first connection


async def event_frame(
    connection: Connection, message: dict[str, Any], *, hold: bool = True
) -> Frame | None:
    """The frame of a dispatcher event for this connection, or None when it must not get
    it (or not yet: `hold`, a recovery of its stream holds it; recovery.py). One message
    object reaches every local connection of its group, so the frame is encoded once per
    protocol and process and kept on the message."""
    if connection.closing:
        return None
    ended = ending.expired(connection.auth, connection.loop.time())
    if ended is not None:
        await connection.end(ended)  # none once expired
        return None
    chat = message.get("chat")
    groups = connection.groups
    if chat is not None:
        # The hot path inline (a lookup and a comparison); anything else, such as a
        # version newer than this connection's read, is for Groups.deliverable().
        version, held = message.get("membership_version"), groups.memberships.held.get(chat)
        if (held is None or (version is not None and version > held)) and not (
            await groups.deliverable(chat, version)
        ):
            return None
    elif message["event"] == "chat_updated":
        # This user's memberships may have changed: re-read them first, so a client
        # that sees the event finds its groups already rebuilt.
        await groups.sync()
    if hold:
        offset = message["payload"].get("offset")
        if offset is not None:
            marks = connection.stream_marks()
            if not marks.admits(message["payload"]["stream"], offset, message):
                return None
    return encode(connection, message)


def encode(connection: Connection, message: dict[str, Any]) -> Frame:
    """An event's frame in the connection's protocol: once per protocol and message, or
    once per recipient when its media credentials are minted at delivery."""
    protocol = connection.protocol
    assert protocol is not None
    payload = message["payload"]
    if message.get("per_recipient") and "media" in payload:
        # Minted here, per recipient, at delivery: never stored, queued or logged.
        room = payload["media"]["roomName"]
        payload = {**payload, "media": media_join(room, connection.user_id, connection.options)}
        return protocol.invocation(message["event"], [payload])
    frames = message.get(_FRAMES)
    if frames is None:
        frames = message[_FRAMES] = {}
    frame = frames.get(protocol.name)
    if frame is None:
        frame = frames[protocol.name] = protocol.invocation(message["event"], [payload])
    return frame


async def dispatch(connection: Connection, message: dict[str, Any]) -> None:
    """Act on a message of the channel layer by its type."""
    handler = HANDLERS.get(message["type"])
    if handler is None:
        raise ValueError(f"No handler for message type {message['type']}")
    await handler(connection, message)


async def _event(connection: Connection, message: dict[str, Any]) -> None:
    """A dispatcher event for one of this connection's groups, on its own."""
    frame = await event_frame(connection, message)
    if frame is not None:
        await connection.outbound.emit(frame)


async def _typing(connection: Connection, message: dict[str, Any]) -> None:
    """Someone typing in a chat of this connection (composing.py): volatile, so sent only
    to a connection that may see it and has nothing waiting to reach its client."""
    if connection.closing or not connection.auth.holds(connection.loop.time()):
        return  # an event, or the clock, ends it
    if connection.outbound.backlogged():
        metrics.hub_typing.labels(outcome="dropped").inc()
        return
    memberships, rosters = connection.groups.memberships, connection.hub.rosters()
    if await shown(message, str(connection.user_id), memberships, rosters):
        metrics.hub_typing.labels(outcome="shown").inc()
        await connection.outbound.emit(encode(connection, message))


async def _membership(connection: Connection, message: dict[str, Any]) -> None:
    """The user's chat memberships changed: rebuild the chat groups from the domain."""
    await connection.groups.sync()


async def _disconnect(connection: Connection, message: dict[str, Any]) -> None:
    """Ops asked this user's connections to reconnect (see control.disconnect_user)."""
    await connection.end(ending.SHUTDOWN)


async def _session_ended(connection: Connection, message: dict[str, Any]) -> None:
    """The user logged out of the Django session this connection came with."""
    session = connection.auth.session
    if session is not None and message.get("session") == session:
        await connection.end(ending.session_ended())


async def _revoked(connection: Connection, message: dict[str, Any]) -> None:
    """The user was deactivated or deleted, or their credentials revoked
    (control.credentials_revoked): Close for good, whatever the credentials."""
    await connection.end(ending.revoked())


async def _overrun(connection: Connection, message: dict[str, Any]) -> None:
    """The channel layer dropped a message meant for this connection (backplane/layer.py)."""
    await connection.end(ending.dropped(OVERRUN))


async def _presence(connection: Connection, message: dict[str, Any]) -> None:
    """A watched user came online or went offline (hub/presence/): forwarded as it is,
    encoded once per protocol for every watcher in the process, to a watcher that may
    still see the user (else it stops watching them: hub/presence/visibility.py)."""
    if connection.closing:
        return
    groups = connection.groups
    user = UUID(message["payload"]["userId"])
    watching = groups.watching
    if user not in watching.users:
        return  # a change that was on its way when the watch ended
    read = connection.hub.viewers_of
    allowed = await may_still_see(watching, connection.user_id, user, message, read)
    if connection.closing:
        return  # it ended meanwhile: nothing goes out after its Close
    if groups.watching is not watching:
        # A WatchPresence replaced the watch meanwhile, with a check of its own: that
        # decides, not this older read.
        allowed = user in groups.watching.users
    elif not allowed:
        await groups.unwatch(user)
    if not allowed:
        return
    protocol = connection.protocol
    assert protocol is not None
    frames = message.setdefault(_FRAMES, {})
    frame = frames.get(protocol.name)
    if frame is None:
        frame = frames[protocol.name] = protocol.invocation(PRESENCE_EVENT, [message["payload"]])
    await connection.outbound.emit(frame)


async def _backplane_restarted(connection: Connection, message: dict[str, Any]) -> None:
    """A Redis server forgot the process's groups and queue (hub/fanout.py): events may
    have been lost on the way here, so the client reconnects and recovers them."""
    await connection.end(ending.dropped(BACKPLANE_RESTARTED))


# Channels message type -> what it does to a connection.
HANDLERS: dict[str, Callable[[Connection, dict[str, Any]], Awaitable[None]]] = {
    EVENT_TYPE: _event,
    "realtime.membership": _membership,
    "realtime.disconnect": _disconnect,
    "realtime.session_ended": _session_ended,
    "realtime.revoked": _revoked,
    "realtime.overrun": _overrun,
    BACKPLANE_RESTARTED_EVENT: _backplane_restarted,
    PRESENCE_MESSAGE: _presence,
    TYPING_TYPE: _typing,
}
