"""Pipelined group_send for channels-redis: a whole chunk of events in one or two round
trips.

channels-redis' group_send costs four round trips per event (expire the group, read its
members, expire each channel, a Lua EVAL), which caps a worker near 0.5k events/s. Here a
chunk costs two: (1) one Lua script that expires and reads each distinct group once, (2)
one Lua script that inserts every event into its member channels, in event order; and on
one Redis host, while the chunk's groups have the members the sender last read
(MemberCache), one: a script that checks those members and sends (CHECKED_SEND_LUA),
which is what a slow link to Redis multiplies (docs/reliability.md, "Latency is not a
fault"). This relies
on channels-redis' key layout and message format, copied from channels-redis 4.3.0
(`RedisChannelLayer._group_key`, `_map_channel_keys_to_connection`, its group_send script;
pinned in requirements.txt, and tests/integration/test_channels_redis_copy.py fails on a
real Redis when the installed version no longer behaves so). With several Redis
hosts each host runs its own share of both steps (the groups it holds, then the channel
keys it holds), concurrently across hosts: still two round trips per host
(backplane/shards.py says which host holds what).

No silent loss: where channels-redis drops a message for a full channel, the script adds
the message's channels (a hub process's group channels, hub/fanout.py) to that channel
key's overrun set (OVERRUN_SUFFIX); the Daphne process reading the key takes the set with
a coming batch and tells every local connection of those groups (backplane/layer.py),
which close with allowReconnect. The count returned is lost messages: one per dropped
message per channel it was for, what messenger_realtime_channel_overruns_total adds up.
"""

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from channels_redis.core import RedisChannelLayer

from messenger_realtime.backplane import shards
from messenger_realtime.backplane.backlog import QueueState
from messenger_realtime.exceptions import UnencodablePayload
from messenger_realtime.ops import metrics
from messenger_realtime.ops.logging import get_logger

logger = get_logger(__name__)


OVERRUN_SUFFIX = "$overrun"  # beside channels-redis' own "$inflight" backup key

# The same per-channel rule as channels-redis 4.3.0's group_send script, for a whole chunk:
# drop expired messages, then add the message unless the channel is at capacity. KEYS[i]
# gets ARGV[i] with capacity ARGV[n+i] and score ARGV[2n+i]; scores rise through the
# chunk, so a channel pops them in event order. A message dropped at capacity puts its
# channels (the space-separated names at ARGV[4n+2+ARGV[3n+i]]) in the key's overrun set.
# Messages that waited past their expiry (the process read nothing for `expiry` seconds)
# are swept as channels-redis does, but not silently: their channels are unknown here, so
# the set gets '*' (every connection of that process). The set outlives a long stall (a
# day). The script returns how many messages were lost.
# Written against K (the channel keys) and A (their arguments), so it serves on its own
# (CHUNK_SEND_LUA: K and A are KEYS and ARGV) and after a check (CHECKED_SEND_LUA).
_SEND_BODY = """
local n = #K
local expiry = A[4 * n + 1]
local stale_before = A[4 * n + 2]
local lost = 0
for i = 1, n do
    local overrun = K[i] .. '$overrun'
    local stale = redis.call('ZREMRANGEBYSCORE', K[i], 0, stale_before)
    if stale > 0 then
        redis.call('SADD', overrun, '*')
        redis.call('EXPIRE', overrun, 86400)
        lost = lost + stale
    end
    if redis.call('ZCOUNT', K[i], '-inf', '+inf') < tonumber(A[n + i]) then
        redis.call('ZADD', K[i], A[2 * n + i], A[i])
        redis.call('EXPIRE', K[i], expiry)
    else
        for name in string.gmatch(A[4 * n + 2 + tonumber(A[3 * n + i])], '%S+') do
            redis.call('SADD', overrun, name)
            lost = lost + 1
        end
        redis.call('EXPIRE', overrun, 86400)
    end
end
return lost
"""
CHUNK_SEND_LUA = "local K, A = KEYS, ARGV\n" + _SEND_BODY

# A chunk sent to the members the worker last read, in one round trip (one host only):
# KEYS[1..g] are the chunk's groups, ARGV[1] = g, ARGV[2] the groups' stale_before and
# ARGV[2 + i] group i's members as last read (sorted, space-separated). Each group is
# swept and read as READ_GROUPS_LUA does; when any group's members differ, nothing is
# sent and -1 is returned (the caller reads the groups and sends again). Otherwise the
# rest of KEYS and ARGV are CHUNK_SEND_LUA's, and so is the reply.
CHECKED_SEND_LUA = (
    """
local g = tonumber(ARGV[1])
for i = 1, g do
    redis.call('ZREMRANGEBYSCORE', KEYS[i], 0, ARGV[2])
    local members = redis.call('ZRANGE', KEYS[i], 0, -1)
    table.sort(members)
    if table.concat(members, ' ') ~= ARGV[2 + i] then
        return -1
    end
end
local K, A = {}, {}
for i = g + 1, #KEYS do K[#K + 1] = KEYS[i] end
for i = g + 3, #ARGV do A[#A + 1] = ARGV[i] end
"""
    + _SEND_BODY
)
assert f"'{OVERRUN_SUFFIX}'" in CHUNK_SEND_LUA  # the script spells the suffix itself

# A volatile message (a typing indicator, hub/connection/composing.py) into each channel
# key KEYS[i] (ARGV[i], capacity ARGV[n+i], score ARGV[2n+i]; ARGV[3n+1] the expiry), but
# only while the key is under half its capacity, and never marked lost: it must never
# take the room a real event needs, nor make a connection overrun. What it skips is
# dropped without a word (nobody has lost anything that matters).
VOLATILE_SEND_LUA = """
local n = #KEYS
for i = 1, n do
    if redis.call('ZCOUNT', KEYS[i], '-inf', '+inf') < tonumber(ARGV[n + i]) / 2 then
        redis.call('ZADD', KEYS[i], ARGV[2 * n + i], ARGV[i])
        redis.call('EXPIRE', KEYS[i], ARGV[3 * n + 1])
    end
end
return 0
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

# The length of each given channel queue (a hub process's pending messages) and its
# oldest message's score (its push time; false when empty), as {depth, score}.
QUEUE_STATE_LUA = """
local states = {}
for i = 1, #KEYS do
    local head = redis.call('ZRANGE', KEYS[i], 0, 0, 'WITHSCORES')
    states[i] = {redis.call('ZCARD', KEYS[i]), head[2] or false}
end
return states
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

# KEYS[1]: a group; ARGV: now, group expiry, then channel names to add (as group_add
# would). The second half of copy_members when source and target groups live on
# different hosts.
ADD_MEMBERS_LUA = """
for i = 3, #ARGV do
    redis.call('ZADD', KEYS[1], ARGV[1], ARGV[i])
end
redis.call('EXPIRE', KEYS[1], ARGV[2])
return #ARGV - 2
"""


def supports(layer: Any) -> bool:
    """A channels-redis core layer, on one host or several (backplane/shards.py)."""
    return isinstance(layer, RedisChannelLayer)


@dataclass(frozen=True)
class ChunkSent:
    lost: int  # messages dropped (per channel they were for) at a full channel
    channel_keys: list[str]  # the distinct channel queues (hub processes) the chunk reached
    # message index -> why the layer could not serialize it (that message alone is not
    # sent; the rest of the chunk is)
    unencodable: dict[int, UnencodablePayload] = field(default_factory=dict)


@dataclass
class _HostSend:
    """One host's share of a chunk: CHUNK_SEND_LUA's keys and arguments."""

    keys: list[str] = field(default_factory=list)
    payloads: list[bytes] = field(default_factory=list)
    capacities: list[int] = field(default_factory=list)
    refs: list[int] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    listed: dict[tuple[str, str], int] = field(default_factory=dict)  # (group, key) -> ref

    def add(
        self,
        group: str,
        keys: list[str],
        payloads: dict[str, bytes],
        capacities: dict[str, int],
        names: dict[str, str],
    ) -> None:
        """One event's insertions into the channel keys of this host."""
        for key in keys:
            self.keys.append(key)
            self.payloads.append(payloads[key])
            self.capacities.append(capacities[key])
            ref = self.listed.get((group, key))
            if ref is None:  # a group's names for this key, listed once
                self.names.append(names[key])
                ref = self.listed[(group, key)] = len(self.names)
            self.refs.append(ref)

    def arguments(self, layer: Any, clock: ScoreClock, stale_before: int) -> list[Any]:
        # Scores rise through the chunk: each channel key (on this host) pops in event order.
        scores = clock.take(len(self.keys))
        args = [*self.payloads, *self.capacities, *scores, *self.refs, layer.expiry, stale_before]
        return [*args, *self.names]

    def script(self, layer: Any, clock: ScoreClock, stale_before: int) -> Any:
        return shards.script(CHUNK_SEND_LUA, self.keys, self.arguments(layer, clock, stale_before))

    def checked_script(
        self,
        layer: Any,
        clock: ScoreClock,
        stale_before: int,
        group_keys: list[str],
        expected: list[str],
        now: int,
    ) -> Any:
        """CHECKED_SEND_LUA: the groups' members checked against `expected`, then sent."""
        head = [len(group_keys), now - layer.group_expiry, *expected]
        args = self.arguments(layer, clock, stale_before)
        return shards.script(CHECKED_SEND_LUA, [*group_keys, *self.keys], [*head, *args])


async def copy_members(layer: Any, source: str, target: str) -> int:
    """Add every channel of layer group `source` to group `target`; how many there were."""
    now = time.time()
    keys = (layer._group_key(source), layer._group_key(target))
    stale_before = int(now) - layer.group_expiry
    source_host, target_host = shards.group_host(layer, source), shards.group_host(layer, target)
    if source_host == target_host:  # one atomic script, as on a single host
        args = (now, stale_before, layer.group_expiry)
        connection = layer.connection(source_host)
        return int(await connection.eval(COPY_MEMBERS_LUA, 2, *keys, *args))
    # Two hosts: read the members where the source lives, add them where the target does.
    (members,) = await layer.connection(source_host).eval(READ_GROUPS_LUA, 1, keys[0], stale_before)
    if members:
        args = (now, layer.group_expiry, *members)
        await layer.connection(target_host).eval(ADD_MEMBERS_LUA, 1, keys[1], *args)
    return len(members)


class MemberCache:
    """The members each group had when this sender last read it, for one-round-trip sends
    (CHECKED_SEND_LUA checks them in Redis, atomically with the send). A group's members
    are hub processes, so they change when a chat's first connection opens on a process
    or its last one leaves: rarely, next to how often its events are sent. At most
    MAX_GROUPS groups, the least recently sent to forgotten first."""

    MAX_GROUPS = 10_000

    def __init__(self) -> None:
        self._groups: OrderedDict[str, list[str]] = OrderedDict()

    def get(self, groups: list[str]) -> dict[str, list[str]] | None:
        """Every group's members as last read, or None when one was never read."""
        found = {}
        for group in groups:
            members = self._groups.get(group)
            if members is None:
                return None
            self._groups.move_to_end(group)
            found[group] = members
        return found

    def keep(self, members: dict[str, list[str]]) -> None:
        for group, channels in members.items():
            self._groups[group] = channels
            self._groups.move_to_end(group)
        while len(self._groups) > self.MAX_GROUPS:
            self._groups.popitem(last=False)

    def forget(self, groups: list[str]) -> None:
        for group in groups:
            self._groups.pop(group, None)


async def group_send_many(
    layer: Any,
    messages: list[tuple[str, dict[str, Any]]],
    clock: ScoreClock,
    cache: MemberCache | None = None,
) -> ChunkSent:
    """Send each (layer group, channels message), in order. With one Redis host and every
    group's members in `cache`, one round trip that checks the members and sends; else
    (or when a group's members changed) two round trips per host: read the groups on
    their hosts, then insert on the channel keys' hosts. Sequential round trips are what
    a slow link multiplies (docs/reliability.md, "Latency is not a fault")."""
    now = int(time.time())
    groups = list(dict.fromkeys(group for group, _ in messages))
    known = cache.get(groups) if cache is not None and layer.ring_size == 1 else None
    if known is not None:
        sent = await _send(layer, messages, known, clock, now, check=groups)
        if sent is not None:
            return sent
        assert cache is not None
        cache.forget(groups)  # a member came or went: read them afresh
    members = await _read_groups(layer, groups, now)
    if cache is not None:
        cache.keep(members)
    sent = await _send(layer, messages, members, clock, now)
    assert sent is not None
    return sent


async def _send(
    layer: Any,
    messages: list[tuple[str, dict[str, Any]]],
    members: dict[str, list[str]],
    clock: ScoreClock,
    now: int,
    check: list[str] | None = None,
) -> ChunkSent | None:
    """Insert the messages into their groups' `members`' channel keys; with `check` (one
    host), only if those groups still have exactly these members (None when not)."""
    sends: dict[int, _HostSend] = {}
    names_by_group: dict[str, dict[str, str]] = {}
    unencodable: dict[int, UnencodablePayload] = {}
    for index, (group, message) in enumerate(messages):
        channels = members[group]
        if not channels:
            continue  # nobody listens to this group right now: delivered to no one
        try:
            # Pure CPU (capacity, hashing, msgpack, encryption if configured): whatever
            # it raises is this message's own fault, never its neighbours'.
            hosts, payloads, capacities = layer._map_channel_keys_to_connection(channels, message)
        except Exception as exc:
            error = f"the channel layer could not serialize it ({type(exc).__name__})"
            unencodable[index] = UnencodablePayload(error)
            continue
        names = names_by_group.get(group)
        if names is None:
            names = names_by_group[group] = _names_by_key(layer, channels)
        for host, keys in hosts.items():
            send = sends.get(host) or sends.setdefault(host, _HostSend())
            send.add(group, keys, payloads, capacities, names)
    if not sends and check is None:
        return ChunkSent(0, [], unencodable)
    stale_before = now - int(layer.expiry)
    if check is not None:  # one host: the members checked and the chunk sent, atomically
        send = sends.get(0) or _HostSend()
        group_keys = [layer._group_key(group) for group in check]
        expected = [" ".join(sorted(members[group])) for group in check]
        checked = send.checked_script(layer, clock, stale_before, group_keys, expected, now)
        lost = await shards.on_hosts(layer, {0: checked})
        if int(lost[0]) < 0:
            return None
    else:
        calls = {host: send.script(layer, clock, stale_before) for host, send in sends.items()}
        lost = await shards.on_hosts(layer, calls)
    reached = [key for send in sends.values() for key in send.keys]
    total = sum(int(count) for count in lost.values())
    return ChunkSent(total, list(dict.fromkeys(reached)), unencodable)


async def group_send_volatile(
    layer: Any, group: str, message: dict[str, Any], clock: ScoreClock
) -> None:
    """Send a volatile message to a group's members (VOLATILE_SEND_LUA): two round trips
    per host, as an uncached group_send; a key half full or more skips it."""
    members = (await _read_groups(layer, [group], int(time.time())))[group]
    if not members:
        return
    hosts, payloads, capacities = layer._map_channel_keys_to_connection(members, message)
    calls = {}
    for host, keys in hosts.items():
        scores = clock.take(len(keys))
        args = [*(payloads[k] for k in keys), *(capacities[k] for k in keys), *scores]
        calls[host] = shards.script(VOLATILE_SEND_LUA, keys, [*args, layer.expiry])
    await shards.on_hosts(layer, calls)


async def queue_states(layer: Any, channel_keys: list[str]) -> dict[str, QueueState]:
    """Each of these channel queues' length and oldest message's time, read on its own
    host: one round trip per host, concurrently."""
    buckets = shards.by_host(layer, channel_keys, lambda key: shards.channel_key_host(layer, key))
    calls = {host: shards.script(QUEUE_STATE_LUA, keys, []) for host, keys in buckets.items()}
    replies = await shards.on_hosts(layer, calls)
    return {
        key: QueueState(int(depth), float(oldest) if oldest else None)
        for host, keys in buckets.items()
        for key, (depth, oldest) in zip(keys, replies[host], strict=True)
    }


async def _read_groups(layer: Any, groups: list[str], now: int) -> dict[str, list[str]]:
    """Every distinct group's live members, each group read (and swept) on its host."""
    buckets = shards.by_host(
        layer, dict.fromkeys(groups), lambda group: shards.group_host(layer, group)
    )
    stale_before = now - layer.group_expiry
    calls = {
        host: shards.script(READ_GROUPS_LUA, [layer._group_key(g) for g in names], [stale_before])
        for host, names in buckets.items()
    }
    replies = await shards.on_hosts(layer, calls)
    return {
        group: [member.decode("utf8") for member in found]
        for host, names in buckets.items()
        for group, found in zip(names, replies[host], strict=True)
    }


def _names_by_key(layer: Any, channels: list[str]) -> dict[str, str]:
    """A group's channels as one space-separated string per channel key (a process's key
    holds all of that process's connections)."""
    by_key: dict[str, list[str]] = {}
    for channel in channels:
        local = layer.non_local_name(channel) if "!" in channel else channel
        by_key.setdefault(layer.prefix + local, []).append(channel)
    return {key: " ".join(names) for key, names in by_key.items()}


def report_lost(lost: int) -> None:
    """Count and log lost messages (the connections are told by their Daphne process)."""
    if lost:
        metrics.channel_overruns.inc(lost)
        logger.warning(
            "channel layer capacity overrun: messages dropped; their connections will be "
            "closed with allowReconnect",
            extra={"action": "overrun", "lost": lost},
        )
