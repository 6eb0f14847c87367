"""Last seen reaches the host's database lazily: batches, never a write per connect.

A user going offline writes their last-seen time to Redis (LAST_SEEN) and marks it
unsaved (UNSAVED; hub/user_connections.py, sweep.py). Every SAVE_EVERY a hub process
takes up to SAVE_BATCH unsaved users with their times in one script and hands them to
the host's port in one call (DomainPort.record_last_seen, which keeps the later of two
times); a batch the port fails to store is marked unsaved again. Several processes
saving at once take disjoint batches (SPOP). A port that does not record last seen
leaves it in Redis only: a restarted Redis then forgets it.
"""

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from uuid import UUID

import redis

from messenger_realtime.conf.settings import HubOptions
from messenger_realtime.exceptions import describe_error
from messenger_realtime.hub import ratelimit
from messenger_realtime.hub.user_connections import LAST_SEEN, UNSAVED
from messenger_realtime.ops.logging import Field, get_logger

logger = get_logger(__name__)
SAVE_EVERY = 30.0  # seconds between two saves of a process
SAVE_BATCH = 1000  # users a save takes at most

# KEYS[1]: UNSAVED, KEYS[2]: LAST_SEEN; ARGV[1]: the batch. A flat list of user, time.
TAKE_UNSAVED = """
local users = redis.call('SPOP', KEYS[1], tonumber(ARGV[1]))
local out = {}
for _, user in ipairs(users) do
  local seen = redis.call('HGET', KEYS[2], user)
  if seen then
    out[#out + 1] = user
    out[#out + 1] = seen
  end
end
return out
"""


async def save(
    options: HubOptions, record: Callable[[Mapping[UUID, float]], Awaitable[None]]
) -> int:
    """One save: how many users' last seen the port stored."""
    script = ratelimit.registered_script(options.rate_limit_redis_url, TAKE_UNSAVED)
    flat = await script([UNSAVED, LAST_SEEN], [SAVE_BATCH])
    taken = {
        UUID(user.decode() if isinstance(user, bytes) else user): float(seen)
        for user, seen in zip(flat[::2], flat[1::2], strict=True)
    }
    if not taken:
        return 0
    try:
        await record(taken)
    except BaseException:
        await script.registered_client.sadd(UNSAVED, *map(str, taken))  # the next save's
        raise
    return len(taken)


async def save_forever(
    options: HubOptions, record: Callable[[Mapping[UUID, float]], Awaitable[None]]
) -> None:
    """Every SAVE_EVERY seconds, a save (run by the HubProcess, hub/process.py)."""
    while True:
        await asyncio.sleep(SAVE_EVERY)  # a period, not synchronisation
        try:
            await save(options, record)
        except (redis.RedisError, OSError) as exc:
            logger.warning(
                "last seen not saved",
                extra={"action": "last_seen", Field.ERROR_CODE: describe_error(exc)},
            )
        except Exception:  # the host's port failed: the batch waits for the next save
            logger.exception("last seen not saved", extra={"action": "last_seen"})
