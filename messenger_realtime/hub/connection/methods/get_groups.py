"""The `GetGroups` hub method: the hub groups a connection is in (decided by the server;
clients cannot join or leave groups)."""

from messenger_realtime.contracts.events import HubTarget
from messenger_realtime.hub.connection.methods import Cost, hub_method
from messenger_realtime.hub.connection.state import Connection


@hub_method("GetGroups", cost=Cost(call=1))  # local: it reads nothing
async def get_groups(connection: Connection) -> list[str]:
    """The hub groups this connection is in: its user's, then its chats' in order."""
    chats = sorted(str(HubTarget.chat(c)) for c in connection.groups.chats)
    return [str(HubTarget.user(connection.user_id)), *chats]
