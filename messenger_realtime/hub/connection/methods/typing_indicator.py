"""The `Typing` hub method: the caller's user is composing in a chat; the chat's other
members' connections get a `typing` event (who, which chat, until when). Volatile and
bounded (hub/connection/composing.py says how): clients may call it on every keystroke.

Its cost: one unit of its connection's budget, and not charged to the user's rate
limit in Redis (a round trip per keystroke). Its own bound beyond that: a call for a
chat the connection does not hold is refused at once (a dict lookup), and of the others
at most one per chat per TYPING_INTERVAL publishes, per connection and then per user
across connections and processes (one Redis round trip; composing.py), each publish one
domain read and one group_send; the rest return at once.
"""

from typing import Any
from uuid import UUID

from messenger_realtime.exceptions import HubError
from messenger_realtime.hub.connection.methods import Cost, hub_method
from messenger_realtime.hub.connection.state import Connection

NOT_A_CHAT_ID = "Typing takes a chat id (a UUID string)"
NOT_A_MEMBER = "not a member of this chat"


@hub_method("Typing", cost=Cost(call=1))
async def typing(connection: Connection, chat_id: Any) -> None:
    """Tell the chat's other members this user is typing (nothing to return)."""
    if not isinstance(chat_id, str):
        raise HubError(NOT_A_CHAT_ID)
    try:
        chat = str(UUID(chat_id))  # as the connection's memberships name it
    except ValueError:
        raise HubError(NOT_A_CHAT_ID) from None
    version = connection.groups.memberships.held.get(chat)
    if version is None:
        raise HubError(NOT_A_MEMBER)
    composing = connection.composing
    if not composing.due(chat) or not await composing.claimed(chat):
        return
    current = await composing.read(chat)
    if current is None:
        raise HubError(NOT_A_MEMBER)  # the chat is gone
    # Its membership changed since this connection read it: settled as an event of that
    # version would settle it (a roster read, or its memberships read again).
    if current > version and not await connection.groups.deliverable(chat, current):
        raise HubError(NOT_A_MEMBER)
    await composing.publish(chat, max(current, version))
