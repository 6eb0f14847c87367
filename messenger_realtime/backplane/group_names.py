"""Channels layer names for hub targets, formatted here and nowhere else.

The spec speaks of `chat:{ChatId}` and `user:{UserId}`; Channels group names allow only
[a-zA-Z0-9._-] (and < 100 chars), so ':' becomes '.'.
"""

from uuid import UUID

from messenger_realtime.contracts.events import HubTarget


def layer_group(target: HubTarget) -> str:
    """The Channels layer group of a hub target (chat:{id} -> chat.{id})."""
    return f"{target.kind}.{target.id}"


def presence_group(user_id: UUID) -> str:
    """The group of the hub processes watching a user's presence (hub/presence/)."""
    return f"presence.{user_id}"
