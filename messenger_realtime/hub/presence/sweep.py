"""The users whose process died holding their only places: offline within LEASE plus
SWEEP_EVERY.

A process that ends cleanly gives its places back, and the last one given back says its
user went offline (hub/user_connections.py). A killed process says nothing: its places
lapse LEASE after its last renewal. Every hub process sweeps every SWEEP_EVERY: one
script takes the users whose latest place has lapsed (the LAPSES index, scored by when
each user's latest place lapses) and, for each left with no place, writes its last-seen
time (its last renewal: the lapse minus LEASE) and returns it. The script runs whole on
the server, so each such user is taken by exactly one process's sweep, which announces
the changes it found in one batch (changes.announce_many). At most SWEEP_BATCH users
per sweep: a sweep never blocks Redis for long, and what is left goes in the next.
"""

import asyncio
from typing import Any
from uuid import UUID

import redis

from messenger_realtime.backplane.pipeline import ScoreClock
from messenger_realtime.conf.settings import HubOptions
from messenger_realtime.exceptions import describe_error
from messenger_realtime.hub import ratelimit
from messenger_realtime.hub.presence.changes import announce_many
from messenger_realtime.hub.user_connections import KEY, LAPSES, LAST_SEEN, LEASE, UNSAVED
from messenger_realtime.ops.logging import Field, get_logger

logger = get_logger(__name__)
SWEEP_EVERY = 5.0  # seconds between two sweeps of a process
SWEEP_BATCH = 500  # users a sweep takes at most

# KEYS[1]: LAPSES, KEYS[2]: LAST_SEEN, KEYS[3]: UNSAVED; ARGV[1]: the batch, ARGV[2]: the
# users' set key with "{user}" for the id, ARGV[3]: the lease in µs. Returns a flat list
# of user, last seen (unix seconds) for each user gone offline.
SWEEP = """
local now = redis.call('TIME')
local t = tonumber(now[1]) * 1000000 + tonumber(now[2])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', t, 'LIMIT', 0, tonumber(ARGV[1]))
local gone = {}
for _, user in ipairs(due) do
  local key = string.gsub(ARGV[2], '{user}', user)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', t)
  local latest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if #latest == 0 then
    local lapsed = tonumber(redis.call('ZSCORE', KEYS[1], user))
    local seen = math.floor((lapsed - tonumber(ARGV[3])) / 1000000)
    redis.call('ZREM', KEYS[1], user)
    redis.call('HSET', KEYS[2], user, seen)
    redis.call('SADD', KEYS[3], user)
    gone[#gone + 1] = user
    gone[#gone + 1] = seen
  else
    redis.call('ZADD', KEYS[1], latest[2], user)
  end
end
return gone
"""


async def sweep(layer: Any, options: HubOptions, clock: ScoreClock) -> list[tuple[UUID, float]]:
    """One sweep: the users found gone offline (each announced, with message scores from
    `clock`, its process's), with their last seen."""
    script = ratelimit.registered_script(options.rate_limit_redis_url, SWEEP)
    flat = await script([LAPSES, LAST_SEEN, UNSAVED], [SWEEP_BATCH, KEY, round(LEASE * 1_000_000)])
    gone = [
        (UUID(user.decode() if isinstance(user, bytes) else user), float(seen))
        for user, seen in zip(flat[::2], flat[1::2], strict=True)
    ]
    if gone:
        await announce_many(layer, [(user, False, seen) for user, seen in gone], clock)
    return gone


async def sweep_forever(layer: Any, options: HubOptions, clock: ScoreClock) -> None:
    """Every SWEEP_EVERY seconds, a sweep (run by the HubProcess, hub/process.py)."""
    if not options.rate_limit_redis_url:
        return
    while True:
        await asyncio.sleep(SWEEP_EVERY)  # a period, not synchronisation
        try:
            await sweep(layer, options, clock)
        except (redis.RedisError, OSError) as exc:  # tried again next period
            logger.warning(
                "presence sweep failed",
                extra={"action": "presence_sweep", Field.ERROR_CODE: describe_error(exc)},
            )
        except Exception:  # never let the sweep die: a killed process's users stay online
            logger.exception("presence sweep failed", extra={"action": "presence_sweep"})
