"""Pipelined group_send for channels-redis: a whole chunk of events in two round trips.

channels-redis' group_send costs four round trips per event (expire the group, read its
members, expire each channel, a Lua EVAL), which caps a worker near 0.5k events/s. Here a
chunk costs two: (1) one Lua script that expires and reads each distinct group once, (2)
one Lua script that inserts every event into its member channels, in event order. This relies
on channels-redis' key layout and message format (pinned: 4.3.0) and on a single Redis
host; otherwise the layer's own group_send is used, event by event.

No silent loss: where channels-redis drops a message for a full channel, the script adds
the message's channels (the connections it was for) to that channel key's overrun set
(OVERRUN_SUFFIX); the Daphne process reading the key takes the set with its next batch
and tells each of those connections (transport/layer.py), which close with
allowReconnect. The count returned is lost deliveries: one per connection per dropped
message, the number messenger_realtime_channel_overruns_total adds up.
"""

import logging
import time
from dataclasses import dataclass
from typing import Any

from channels_redis.core import RedisChannelLayer

from messenger_realtime.ops import metrics

logger = logging.getLogger(__name__)


OVERRUN_SUFFIX = "$overrun"  # beside channels-redis' own "$inflight" backup key

# The same per-channel rule as channels-redis 4.3.0's group_send script, for a whole chunk:
# drop expired messages, then add the message unless the channel is at capacity. KEYS[i]
# gets ARGV[i] with capacity ARGV[n+i] and score ARGV[2n+i]; scores rise through the
# chunk, so a channel pops them in event order. A message dropped at capacity puts its
# channels (the space-separated names at ARGV[4n+2+ARGV[3n+i]]) in the key's overrun set;
# the script returns how many deliveries were lost.
CHUNK_SEND_LUA = """
local n = #KEYS
local expiry = ARGV[4 * n + 1]
local stale_before = ARGV[4 * n + 2]
local lost = 0
for i = 1, n do
    redis.call('ZREMRANGEBYSCORE', KEYS[i], 0, stale_before)
    if redis.call('ZCOUNT', KEYS[i], '-inf', '+inf') < tonumber(ARGV[n + i]) then
        redis.call('ZADD', KEYS[i], ARGV[2 * n + i], ARGV[i])
        redis.call('EXPIRE', KEYS[i], expiry)
    else
        local overrun = KEYS[i] .. '$overrun'
        for name in string.gmatch(ARGV[4 * n + 2 + tonumber(ARGV[3 * n + i])], '%S+') do
            redis.call('SADD', overrun, name)
            lost = lost + 1
        end
        redis.call('EXPIRE', overrun, expiry)
    end
end
return lost
"""
assert f"'{OVERRUN_SUFFIX}'" in CHUNK_SEND_LUA  # the script spells the suffix itself

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

# The length of each given channel queue (a hub process's pending messages).
QUEUE_DEPTH_LUA = """
local depths = {}
for i = 1, #KEYS do
    depths[i] = redis.call('ZCARD', KEYS[i])
end
return depths
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


# KEYS[1]: a user's group, KEYS[2]: a chat's group; ARGV: now, stale_before, group expiry.
# Every live member of the user's group joins the chat's group (as group_add would).
COPY_MEMBERS_LUA = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, ARGV[2])
local members = redis.call('ZRANGE', KEYS[1], 0, -1)
for i = 1, #members do
    redis.call('ZADD', KEYS[2], ARGV[1], members[i])
end
if #members > 0 then
    redis.call('EXPIRE', KEYS[2], ARGV[3])
end
return #members
"""


def supports(layer: Any) -> bool:
    """A channels-redis core layer on exactly one host."""
    return isinstance(layer, RedisChannelLayer) and len(layer.hosts) == 1


@dataclass(frozen=True)
class ChunkSent:
    lost: int  # deliveries dropped because a channel was at capacity
    channel_keys: list[str]  # the distinct channel queues (hub processes) the chunk reached


async def copy_members(layer: Any, source: str, target: str) -> int:
    """Add every channel of layer group `source` to group `target`; how many there were."""
    now = time.time()
    keys = (layer._group_key(source), layer._group_key(target))
    args = (now, int(now) - layer.group_expiry, layer.group_expiry)
    return int(await layer.connection(0).eval(COPY_MEMBERS_LUA, 2, *keys, *args))


async def group_send_many(
    layer: Any, messages: list[tuple[str, dict[str, Any]]], clock: ScoreClock
) -> ChunkSent:
    """Send each (layer group, channels message), in order."""
    connection = layer.connection(0)
    now = int(time.time())
    event_groups = [layer._group_key(group) for group, _ in messages]
    groups = list(dict.fromkeys(event_groups))
    replies = await connection.eval(READ_GROUPS_LUA, len(groups), *groups, now - layer.group_expiry)
    found = zip(groups, replies, strict=True)
    members = {key: [member.decode("utf8") for member in names] for key, names in found}
    keys: list[str] = []
    payloads: list[bytes] = []
    capacities: list[int] = []
    refs: list[int] = []
    listed: dict[tuple[bytes, str], int] = {}  # (group, channel key) -> index of its names
    names: list[str] = []
    for (_group, message), group in zip(messages, event_groups, strict=True):
        channels = members[group]
        if not channels:
            continue  # nobody listens to this group right now: delivered to no one
        _, message_by_key, capacity_by_key = layer._map_channel_keys_to_connection(
            channels, message
        )
        for key, serialized in message_by_key.items():
            keys.append(key)
            payloads.append(serialized)
            capacities.append(capacity_by_key[key])
            if (group, key) not in listed:
                names.extend(_names_by_key(layer, group, channels, listed))
            refs.append(listed[(group, key)])
    if not keys:
        return ChunkSent(0, [])
    stale_before = now - int(layer.expiry)
    args = [*payloads, *capacities, *clock.take(len(keys)), *refs, layer.expiry, stale_before]
    lost = int(await connection.eval(CHUNK_SEND_LUA, len(keys), *keys, *args, *names))
    return ChunkSent(lost, list(dict.fromkeys(keys)))


async def queue_depths(layer: Any, channel_keys: list[str]) -> dict[str, int]:
    """Each of these channel queues' length, in one round trip."""
    connection = layer.connection(0)
    depths = await connection.eval(QUEUE_DEPTH_LUA, len(channel_keys), *channel_keys)
    return {key: int(depth) for key, depth in zip(channel_keys, depths, strict=True)}


def _names_by_key(
    layer: Any, group: bytes, channels: list[str], listed: dict[tuple[bytes, str], int]
) -> list[str]:
    """A group's channels as one space-separated string per channel key (a process's key
    holds all of that process's connections), numbered on from len(listed) + 1."""
    by_key: dict[str, list[str]] = {}
    for channel in channels:
        local = layer.non_local_name(channel) if "!" in channel else channel
        by_key.setdefault(layer.prefix + local, []).append(channel)
    for key in by_key:
        listed[(group, key)] = len(listed) + 1
    return [" ".join(names) for names in by_key.values()]


def report_lost(lost: int) -> None:
    """Count and log lost deliveries (the connections are told by their Daphne process)."""
    if lost:
        metrics.channel_overruns.inc(lost)
        logger.warning(
            "channel layer capacity overrun: deliveries dropped; their connections will be "
            "closed with allowReconnect",
            extra={"action": "overrun", "lost": lost},
        )
