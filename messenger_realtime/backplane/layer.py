"""channels-redis' layer with batched receive for a process's own channel, and no silent
loss.

Every Daphne process receives all its messages through one Redis key (its
"specific.<process>!" channel). channels-redis 4.3 pops that key one message at a time,
with four round trips each under a lock (restore the backup, BZPOPMIN, back the message
up, clean the backup), which caps a hub process near its Redis latency (1-2k messages/s
on a busy box) and lets the key fill to capacity under load, where channels-redis drops.

The hub's one reader per process (hub/fanout.py) calls receive_batch(): one round trip
per batch (BZMPOP up to RECEIVE_BATCH messages, and SPOP of the key's overrun set, in
one pipeline), every batch.
Other consumers of a process channel still go through Channels' receive(), where this
layer's receive_single pops up to RECEIVE_BATCH with one Lua call that also backs them
up atomically (a receive cancelled mid-call leaves them in the backup key, and the next
receive puts them back in front: nothing is lost, at worst a message comes twice).

Silence is a fault (docs/reliability.md). Every Redis connection of the layer gets
NETWORK_TIMEOUT as its socket timeout (a reply, or a send, that does not come within it
fails the command and drops the connection), keepalives and TCP_USER_TIMEOUT inside it
(bounded_hosts: the kernel ends a silent flow on a real network), whatever the hosts in
CHANNEL_LAYERS say. A blocking receive waits at most half of it (brpop_timeout), so an
idle receive always answers inside its socket timeout and only a silent one fails. The
hub notices a failed receive or probe and recovers (hub/fanout.py, hub/restarts.py).

Drops are never silent. A message dropped at a full key leaves the channel names it was
for in the key's overrun set (backplane/pipeline.py; group_send here goes the same way);
the next pop takes that set and each named channel gets an OVERRUN_EVENT before anything
else. A consumer's in-process buffer that overflows gets the same instead of
channels-redis' silent drop of the oldest. The hub closes such connections with
allowReconnect.
"""

import asyncio
import collections
import contextlib
import functools
import socket
import time
from typing import Any

import redis
import redis.asyncio
from channels_redis.core import RedisChannelLayer

from messenger_realtime.backplane import pipeline, sentinel, shards
from messenger_realtime.backplane.reservations import ConnectionReservation
from messenger_realtime.conf.settings import network_timeout
from messenger_realtime.exceptions import describe_error
from messenger_realtime.ops import metrics
from messenger_realtime.ops.logging import Field, get_logger
from messenger_realtime.ops.network import REDIS, WAITS

logger = get_logger(__name__)

RECEIVE_BATCH = 100

# The most connections a process's layer opens to one Redis server, unless its host entry
# sets "max_connections". channels-redis' pool has no maximum and keeps every connection
# it opened: a reconnect storm's concurrent joins left one Daphne holding 121 (a soak's
# flapping link), a bigger storm would hold thousands of file descriptors in the process
# and in Redis. Past it a command waits for a free connection, at most NETWORK_TIMEOUT.
# 64 lets ~300 commands a second through even at 200 ms a round trip.
POOL_SIZE = 64
OVERRUN_EVENT = "realtime.overrun"  # handled by hub/connection/layer_messages.py (HANDLERS)

# KEYS[1]: the channel key, KEYS[2]: its backup key, KEYS[3]: its overrun set, ARGV[1]:
# how many to pop. A backup left by an interrupted receive goes back in front first
# (their scores keep the order). Returns the popped messages and the channels that lost
# a message since the last call.
POP_BATCH_LUA = """
local left = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
for i = 1, #left, 2 do
    redis.call('ZADD', KEYS[1], left[i + 1], left[i])
end
redis.call('DEL', KEYS[2])
local popped = redis.call('ZPOPMIN', KEYS[1], ARGV[1])
for i = 1, #popped, 2 do
    redis.call('ZADD', KEYS[2], popped[i + 1], popped[i])
end
local lost = redis.call('SMEMBERS', KEYS[3])
redis.call('DEL', KEYS[3])
return {popped, lost}
"""


# The most overrun names one batch takes (SPOP's count: the whole set when it holds
# fewer, which is every real case; any left over come with the next batch).
OVERRUN_NAMES = 10_000


def bounded_hosts(hosts: list[dict[str, Any]], timeout: float) -> list[dict[str, Any]]:
    """channels-redis host entries (decoded: dicts) whose connections are bounded by
    `timeout` (NETWORK_TIMEOUT): a socket timeout on every read and send, a connect
    timeout, and keepalives that end an idle silent flow (a probe after a third of it
    idle, two more a third apart) plus TCP_USER_TIMEOUT for unacknowledged data."""
    step = max(1, int(timeout // 3))
    keepalive = {
        socket.TCP_KEEPIDLE: step,
        socket.TCP_KEEPINTVL: step,
        socket.TCP_KEEPCNT: 2,
        socket.TCP_USER_TIMEOUT: int(timeout * 1000),
    }
    return [
        {
            **host,
            "socket_timeout": timeout,
            "socket_connect_timeout": min(
                float(host.get("socket_connect_timeout") or timeout), timeout
            ),
            "socket_keepalive": True,
            "socket_keepalive_options": keepalive,
        }
        for host in hosts
    ]


class OverrunQueue(asyncio.Queue[Any]):
    """A connection's in-process buffer: when full, what it holds is dropped and replaced
    by one OVERRUN_EVENT (channels-redis' BoundedQueue drops the oldest silently)."""

    def put_nowait(self, item: Any) -> None:
        if self.full():
            lost = self.qsize() + 1  # what it held, and this one
            while not self.empty():
                self.get_nowait()
            item = {"type": OVERRUN_EVENT}
            metrics.channel_overruns.inc(lost)
        super().put_nowait(item)


class BatchReceiveRedisChannelLayer(RedisChannelLayer):  # type: ignore[misc]
    """Drop-in for channels_redis.core.RedisChannelLayer (same settings, same keys)."""

    hosts: list[dict[str, Any]]  # channels-redis' decoded host entries
    brpop_timeout: int  # a blocking receive's wait (channels-redis: 5 s)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.network_timeout = network_timeout()
        self.hosts = bounded_hosts(self.hosts, self.network_timeout)
        # Every blocking receive (this one's and channels-redis' own) answers well
        # inside its socket timeout when the connection lives, however idle.
        self.brpop_timeout = max(1, min(int(self.brpop_timeout), int(self.network_timeout / 2)))
        self._received: dict[str, collections.deque[tuple[Any, Any]]] = {}
        self.receive_buffer: collections.defaultdict[str, OverrunQueue] = collections.defaultdict(
            functools.partial(OverrunQueue, self.capacity)
        )
        self._scores = pipeline.ScoreClock()

    def create_pool(self, index: int) -> redis.asyncio.ConnectionPool:
        """channels-redis' pool for the host at `index`, bounded: POOL_SIZE connections
        (or the host entry's "max_connections"), a command waiting for one at most the
        network timeout ("No connection available" then, a ConnectionError like any
        other Redis failure). An "address" may be a redis+sentinel:// URL (sentinel.py):
        the pool then asks the Sentinels for the master at each new connection.
        channels-redis' own Sentinel entries ("master_name", "sentinels") keep its pool."""
        host = dict(self.hosts[index])
        if "master_name" in host:
            pool: redis.asyncio.ConnectionPool = super().create_pool(index)
            return pool
        bound = {"max_connections": host.pop("max_connections", POOL_SIZE)}
        bound["timeout"] = self.network_timeout
        if "address" in host:
            return sentinel.async_pool(host.pop("address"), **host, **bound)
        return redis.asyncio.BlockingConnectionPool(**host, **bound)

    def consistent_hash(self, value: str) -> int:
        """A process channel's host by its non-local part, where its receive reads and
        group_send writes: channels-redis' send() hashes the whole name (its PR #220),
        which with several hosts would queue a message where nobody reads. Group names
        and general channels have no "!": unchanged."""
        if self.ring_size == 1:
            return 0
        return int(super().consistent_hash(self.non_local_name(value)))

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        """As channels-redis' (same keys, same capacity rule, any number of hosts), but a
        drop is counted and its connections are told (pipeline.py)."""
        assert self.require_valid_group_name(group), "Group name not valid"
        sent = await pipeline.group_send_many(self, [(group, message)], self._scores)
        pipeline.report_lost(sent.lost)

    async def group_send_volatile(self, group: str, message: dict[str, Any]) -> None:
        """As group_send, for a message that may be dropped (a typing indicator): never
        into a channel key half full or more, and never an overrun (pipeline.py)."""
        assert self.require_valid_group_name(group), "Group name not valid"
        await pipeline.group_send_volatile(self, group, message, self._scores)

    async def group_add_many(
        self, memberships: list[tuple[str, str]], reservation: ConnectionReservation | None = None
    ) -> bool:
        """channels-redis' group_add for several (group, channel) pairs: the same ZADD and
        EXPIRE of each group's member set, one pipelined round trip per host instead of
        two round trips per group (a connection joins its user's group, then every
        chat's: hub/fanout.py). With `reservation`, its SET NX goes in the same round trip
        (a connection reserves its token as it joins its user's group); returns whether
        the reservation was made (True without one)."""
        now = time.time()
        buckets = shards.by_host(self, memberships, lambda m: shards.group_host(self, m[0]))
        reservation_host = -1
        if reservation is not None:
            reservation_host = int(self.consistent_hash(reservation.key(self)))
            buckets.setdefault(reservation_host, [])

        def adds(host: int, pairs: list[tuple[str, str]]) -> Any:
            async def call(connection: Any) -> Any:
                pipe = connection.pipeline(transaction=False)
                if host == reservation_host:
                    assert reservation is not None
                    pipe.set(reservation.key(self), b"1", nx=True, ex=reservation.seconds)  # [0]
                for group, channel in pairs:
                    key = self._group_key(group)
                    pipe.zadd(key, {channel: now})
                    pipe.expire(key, self.group_expiry)
                return await pipe.execute()

            return call

        calls = {
            h: adds(h, pairs) for h, pairs in buckets.items() if pairs or h == reservation_host
        }
        results = await shards.on_hosts(self, calls) if calls else {}
        return reservation is None or bool(results[reservation_host][0])

    async def group_discard_many(self, memberships: list[tuple[str, str]]) -> None:
        """channels-redis' group_discard for several (group, channel) pairs: the same ZREM
        of each group's member set, one pipelined round trip per host instead of one per
        group (a connection that ends, or a watch of presence that changes, leaves
        hundreds: hub/fanout.py)."""
        buckets = shards.by_host(self, memberships, lambda m: shards.group_host(self, m[0]))

        def discards(pairs: list[tuple[str, str]]) -> Any:
            async def call(connection: Any) -> Any:
                pipe = connection.pipeline(transaction=False)
                for group, channel in pairs:
                    pipe.zrem(self._group_key(group), channel)
                return await pipe.execute()

            return call

        calls = {host: discards(pairs) for host, pairs in buckets.items() if pairs}
        if calls:
            await shards.on_hosts(self, calls)

    async def receive_single(self, channel: str) -> tuple[Any, Any]:
        if not channel.endswith("!"):  # a general (non-process) channel: unchanged
            received: tuple[Any, Any] = await super().receive_single(channel)
            return received
        waiting = self._received.setdefault(channel, collections.deque())
        if not waiting:
            await self._pop_batch(channel, waiting)
        if waiting:
            return waiting.popleft()
        received = await super().receive_single(channel)  # nothing queued: block as before
        return received

    async def receive_batch(self, channel: str) -> list[tuple[Any, Any]]:
        """What waits for this process ("specific.<client prefix>!"), at least one message
        (blocking until one comes), addressed as receive_single's, lost-message notices
        first. The hub's one reader per process (hub/fanout.py) takes its messages this
        way: one round trip per batch, a pipeline of BZMPOP (up to RECEIVE_BATCH) and
        SPOP of the key's overrun set, where channels-redis' receive costs four round
        trips per message plus its per-consumer machinery.

        Every batch reads the overrun set, in the same round trip: Redis runs the SPOP
        right after the pop (which may block while the queue is empty), so a drop
        recorded before the pop is told with that batch, ahead of its messages. SPOP
        takes and removes the names in one command: a drop recorded meanwhile is either
        in this batch's names or stays for the next.

        Unlike receive_single it keeps no backup: the only reader is the process's own,
        and a message it has popped is lost only when that reader is cancelled, which
        happens when the process ends or has no connection left."""
        assert self.require_valid_channel_name(channel, receive=True), "Channel name invalid"
        channel_key = self.prefix + channel
        overrun = channel_key + pipeline.OVERRUN_SUFFIX
        connection = self.connection(self.consistent_hash(channel))
        received: list[tuple[Any, Any]] = []
        block = self.brpop_timeout
        while not received:
            # The reply may take the block itself: past it, the wait is overdue (ops/network).
            with WAITS.waiting(REDIS, self.network_timeout, allowance=block):
                async with connection.pipeline(transaction=False) as pipe:
                    pipe.execute_command(
                        "BZMPOP", block, 1, channel_key, "MIN", "COUNT", RECEIVE_BATCH
                    )
                    pipe.execute_command("SPOP", overrun, OVERRUN_NAMES)
                    try:
                        reply, lost = await pipe.execute()
                    except redis.TimeoutError:
                        WAITS.timed_out(REDIS)  # silent for NETWORK_TIMEOUT: dropped
                        raise
            received.extend((name.decode(), {"type": OVERRUN_EVENT}) for name in lost or ())
            for content, _score in reply[1] if reply else ():
                self._append_decoded(channel, content, received)
        return received

    async def run_id(self, index: int) -> str:
        """Redis server `index`'s run id (INFO server: it changes when the server
        restarts), within NETWORK_TIMEOUT (redis.TimeoutError past it, counted)."""
        try:
            with WAITS.waiting(REDIS, self.network_timeout):
                info = await self.connection(index).info("server")
        except redis.TimeoutError:
            WAITS.timed_out(REDIS)
            raise
        return str(info.get("run_id", ""))

    async def drop_connections(self, index: int) -> None:
        """Close every connection of this event loop to server `index`, in use or idle
        (a silent one would hold the next command for NETWORK_TIMEOUT too): the next
        commands connect afresh."""
        with contextlib.suppress(Exception):  # a dead connection is dropped all the same
            await self.connection(index).connection_pool.disconnect()

    async def keep_alive(self, channel: str) -> None:
        """Give a live process's queue its full expiry again. channels-redis sets a key's
        TTL (`expiry`) at each push and nothing else refreshes it, so a queue still being
        read `expiry` seconds after its last push (a slow drain after a burst) would
        vanish with what it holds, unannounced. A dead process's queue, which nobody
        keeps alive, still expires as channels-redis intends."""
        connection = self.connection(self.consistent_hash(channel))
        await connection.expire(self.prefix + channel, self.expiry)

    async def _pop_batch(self, channel: str, into: collections.deque[tuple[Any, Any]]) -> None:
        assert self.require_valid_channel_name(channel, receive=True), "Channel name invalid"
        channel_key = self.prefix + channel
        backup = self._backup_channel_name(channel_key)
        overrun = channel_key + pipeline.OVERRUN_SUFFIX
        connection = self.connection(self.consistent_hash(channel))
        await self.receive_clean_locks.acquire(channel_key)  # after any pending cleaner
        try:
            popped, lost = await connection.eval(
                POP_BATCH_LUA, 3, channel_key, backup, overrun, RECEIVE_BATCH
            )
            # Told first: a connection that lost a message stops forwarding at once.
            into.extend((name.decode(), {"type": OVERRUN_EVENT}) for name in lost)
            for content in popped[::2]:
                self._append_decoded(channel, content, into)
            if popped:
                await connection.delete(backup)  # in memory now: nothing left to restore
        finally:
            self.receive_clean_locks.release(channel_key)

    def _append_decoded(self, channel: str, content: bytes, into: Any) -> None:
        try:
            into.append(self._unpack(channel, content))
        except Exception as exc:  # one bad message must not poison the batch
            logger.error(
                "undecodable channel-layer message dropped",
                extra={"action": "undecodable", Field.ERROR_CODE: describe_error(exc)},
            )

    def _unpack(self, channel: str, content: bytes) -> tuple[Any, Any]:
        """As the parent's receive_single: decode, then address the local channel(s)."""
        message = self.deserialize(content)
        target: Any = message.pop("__asgi_channel__", channel)
        return target, message
