"""What a watcher is told first: each watched user's presence now.

One script reads every watched user's places and last-seen time in one round trip. A user
never seen offline since Redis last started has no last-seen time there: the host's
port is asked for those (DomainPort.last_seen, what last_seen.py stored), in one read.
"""

from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import NamedTuple
from uuid import UUID

from messenger_realtime.conf.settings import HubOptions
from messenger_realtime.hub import ratelimit
from messenger_realtime.hub.user_connections import KEY, LAST_SEEN

# KEYS[1]: LAST_SEEN; ARGV[1]: the users' set key with "{user}", then the users. Returns
# for each user 1 or 0 (online: a place that has not lapsed), and its last seen or false.
STATE = """
local now = redis.call('TIME')
local t = tonumber(now[1]) * 1000000 + tonumber(now[2])
local out = {}
for i = 2, #ARGV do
  local key = string.gsub(ARGV[1], '{user}', ARGV[i])
  out[#out + 1] = redis.call('ZCOUNT', key, '(' .. t, '+inf') > 0 and 1 or 0
  out[#out + 1] = redis.call('HGET', KEYS[1], ARGV[i])
end
return out
"""


class Presence(NamedTuple):
    online: bool
    last_seen: float | None  # unix seconds; None: never seen offline, as far as is known

    def payload(self, user_id: UUID) -> dict[str, object]:
        return {"userId": str(user_id), "online": self.online, "lastSeen": self.last_seen}


async def read_presence(
    user_ids: Collection[UUID],
    options: HubOptions,
    stored: Callable[[list[UUID]], Awaitable[Mapping[UUID, float]]],
) -> dict[UUID, Presence]:
    """Each user's presence: Redis first, the host's stored last seen for the rest."""
    if not user_ids:
        return {}
    ordered = list(user_ids)
    script = ratelimit.registered_script(options.rate_limit_redis_url, STATE)
    flat = await script([LAST_SEEN], [KEY, *map(str, ordered)])
    found: dict[UUID, Presence] = {}
    for user_id, online, seen in zip(ordered, flat[::2], flat[1::2], strict=True):
        found[user_id] = Presence(bool(online), float(seen) if seen else None)
    unknown = [u for u, p in found.items() if p.last_seen is None and not p.online]
    if unknown:
        for user_id, seen in (await stored(unknown)).items():
            found[user_id] = Presence(False, seen)
    return found
