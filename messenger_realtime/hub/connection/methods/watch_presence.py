"""The `WatchPresence` hub method: be told whether these users are online, now and at
each change (hub/presence/).

A call names the whole set the connection watches from then on (an empty list: none),
at most WATCH_MAX users: the open chat's members, a contact list. Every one of them must
be visible to the caller, as the host's port decides (DomainPort.visible_users: one
read per call); otherwise the call is refused naming those that are not, and the
connection keeps watching what it watched. The result is each user's presence now
(`{userId: {"online": bool, "lastSeen": unix seconds or null}}`), read after the
connection joined their presence groups, so a change made after that read comes as a
`presence` event and none is missed between them. A call costs one unit and one more
per USERS_PER_UNIT users it names, of its connection's budget and of the user's
invocation rate limit: what it does (the visibility read, the groups joined, the
presence read) grows with the users it checks.
"""

from collections.abc import Collection, Mapping
from typing import Any
from uuid import UUID

from messenger_realtime.contracts.port import get_domain_port
from messenger_realtime.exceptions import HubError
from messenger_realtime.hub.connection.methods import Cost, hub_method, length_of_first
from messenger_realtime.hub.connection.state import Connection
from messenger_realtime.hub.presence.state import read_presence
from messenger_realtime.hub.reads import hub_read

WATCH_MAX = 200  # users one connection may watch
USERS_PER_UNIT = 10  # one more unit per this many users a call names


@hub_read
def _visible(viewer: UUID, users: list[UUID]) -> Collection[UUID]:
    return get_domain_port().visible_users(viewer, users)


@hub_read
def _stored_last_seen(users: list[UUID]) -> Mapping[UUID, float]:
    return get_domain_port().last_seen(users)


def _user_ids(asked: Any) -> frozenset[UUID]:
    if not isinstance(asked, list) or not all(isinstance(u, str) for u in asked):
        raise HubError("WatchPresence takes a list of user ids")
    if len(asked) > WATCH_MAX:
        raise HubError(f"at most {WATCH_MAX} users may be watched at once")
    try:
        return frozenset(UUID(u) for u in asked)
    except ValueError as exc:
        raise HubError("WatchPresence takes a list of user ids") from exc


@hub_method(
    "WatchPresence", cost=Cost(call=1, per_items=USERS_PER_UNIT, items=length_of_first, shared=True)
)
async def watch_presence(connection: Connection, asked: Any) -> dict[str, dict[str, Any]]:
    """Each watched user's presence now; changes follow as `presence` events."""
    users = _user_ids(asked)
    if users:
        if not type(get_domain_port()).provides("visible_users"):
            raise HubError("presence is not available on this server")
        hidden = users - set(await _visible(connection.user_id, sorted(users)))
        if hidden:
            raise HubError(f"may not watch these users: {', '.join(sorted(map(str, hidden)))}")
    await connection.groups.watch(users)
    if not users:
        return {}
    found = await read_presence(users, connection.options, _stored_last_seen)
    return {
        str(user): {"online": presence.online, "lastSeen": presence.last_seen}
        for user, presence in found.items()
    }
