"""Pipelined group_send for channels-redis: a whole chunk of events in two round trips.

channels-redis' group_send costs four round trips per event (expire the group, read its
members, expire each channel, a Lua EVAL), which caps a worker near 0.5k events/s. Here a
chunk costs two: (1) one Lua script that expires and reads each distinct group once, (2)
one Lua script that inserts every event into its member channels, in event order. This relies
on channels-redis' key layout and message format (pinned: 4.3.0) and on a single Redis
host; otherwise the layer's own group_send is used, event by event.
"""

import time
from dataclasses import dataclass
from typing import Any

from channels_redis.core import RedisChannelLayer

from messenger_realtime.contracts.events import OutgoingEvent
from messenger_realtime.transport.groups import layer_group

# The same per-channel rule as channels-redis 4.3.0's group_send script, for a whole chunk:
# drop expired messages, then add the message unless the channel is at capacity (counted,
# returned as the number of overruns). KEYS[i] gets ARGV[i] with capacity ARGV[n+i] and
# score ARGV[2n+i]; scores rise through the chunk, so a channel pops them in event order.
CHUNK_SEND_LUA = """
local n = #KEYS
local expiry = ARGV[3 * n + 1]
local stale_before = ARGV[3 * n + 2]
local over_capacity = 0
for i = 1, n do
    redis.call('ZREMRANGEBYSCORE', KEYS[i], 0, stale_before)
    if redis.call('ZCOUNT', KEYS[i], '-inf', '+inf') < tonumber(ARGV[n + i]) then
        redis.call('ZADD', KEYS[i], ARGV[2 * n + i], ARGV[i])
        redis.call('EXPIRE', KEYS[i], expiry)
    else
        over_capacity = over_capacity + 1
    end
end
return over_capacity
"""

# Every distinct group of a chunk in one call: drop members past group expiry (as
# channels-redis' group_send does), then return each group's members, in KEYS order.
READ_GROUPS_LUA = """
local members = {}
for i = 1, #KEYS do
    redis.call('ZREMRANGEBYSCORE', KEYS[i], 0, ARGV[1])
    members[i] = redis.call('ZRANGE', KEYS[i], 0, -1)
end
return members
"""

# The longest of the given channel queues (a hub process's pending messages).
QUEUE_DEPTH_LUA = """
local longest = 0
for i = 1, #KEYS do
    longest = math.max(longest, redis.call('ZCARD', KEYS[i]))
end
return longest
"""

SCORE_STEP = 1e-6  # seconds between consecutive messages' scores (representable at 1.7e9)


class ScoreClock:
    """Strictly rising sorted-set scores near time.time(), as channels-redis uses them:
    equal scores would pop in the random order of their members' random prefixes."""

    def __init__(self) -> None:
        self.last = 0.0

    def take(self, count: int) -> list[float]:
        start = max(time.time(), self.last + SCORE_STEP)
        scores = [start + i * SCORE_STEP for i in range(count)]
        self.last = scores[-1] if scores else self.last
        return scores


def supports(layer: Any) -> bool:
    """A channels-redis core layer on exactly one host."""
    return isinstance(layer, RedisChannelLayer) and len(layer.hosts) == 1


@dataclass(frozen=True)
class ChunkSent:
    overruns: int  # messages dropped because a channel was at capacity
    channel_keys: list[str]  # the distinct channel queues the chunk reached


async def group_send_many(
    layer: Any, events: list[tuple[OutgoingEvent, dict[str, Any]]], clock: ScoreClock
) -> ChunkSent:
    """Send each (event, channels message) to its group."""
    connection = layer.connection(0)
    now = int(time.time())
    event_groups = [layer._group_key(layer_group(event.target)) for event, _ in events]
    groups = list(dict.fromkeys(event_groups))
    replies = await connection.eval(READ_GROUPS_LUA, len(groups), *groups, now - layer.group_expiry)
    found = zip(groups, replies, strict=True)
    members = {key: [member.decode("utf8") for member in names] for key, names in found}
    keys: list[str] = []
    messages: list[bytes] = []
    capacities: list[int] = []
    for (_event, message), group in zip(events, event_groups, strict=True):
        channels = members[group]
        if not channels:
            continue  # nobody listens to this group right now: delivered to no one
        _, message_by_key, capacity_by_key = layer._map_channel_keys_to_connection(
            channels, message
        )
        for key, serialized in message_by_key.items():
            keys.append(key)
            messages.append(serialized)
            capacities.append(capacity_by_key[key])
    if not keys:
        return ChunkSent(0, [])
    stale_before = now - int(layer.expiry)
    args = [*messages, *capacities, *clock.take(len(keys)), layer.expiry, stale_before]
    overruns = int(await connection.eval(CHUNK_SEND_LUA, len(keys), *keys, *args))
    return ChunkSent(overruns, list(dict.fromkeys(keys)))


async def queue_depth(layer: Any, channel_keys: list[str]) -> int:
    """The longest of these channel queues, in one round trip."""
    connection = layer.connection(0)
    return int(await connection.eval(QUEUE_DEPTH_LUA, len(channel_keys), *channel_keys))
