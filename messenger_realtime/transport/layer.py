"""channels-redis' layer with batched receive for a process's own channel.

Every Daphne process receives all its connections' messages through one Redis key (its
"specific.<process>!" channel). channels-redis 4.3 pops that key one message at a time,
with four round trips each under a lock (restore the backup, BZPOPMIN, back the message
up, clean the backup), which caps a hub process near its Redis latency (1-2k messages/s
on a busy box) and lets the key fill to capacity under load, where channels-redis drops.

Here, when messages are waiting, one Lua call pops up to RECEIVE_BATCH of them and backs
them up atomically; they are handed out one by one from memory and the backup is cleared
with one more call. When the key is empty the layer falls back to the parent's blocking
receive. A receive cancelled mid-call leaves the popped messages in the backup key, and
the next receive (this one's or the parent's) puts them back in front, so nothing is
lost; at worst a message is delivered twice, which clients dedupe anyway. Messages
already popped wait in this process's memory until handed out, as they would in
channels-redis' own receive buffers.
"""

import collections
from typing import Any

from channels_redis.core import RedisChannelLayer

RECEIVE_BATCH = 100

# KEYS[1]: the channel key, KEYS[2]: its backup key, ARGV[1]: how many to pop. A backup
# left by an interrupted receive goes back in front first (their scores keep the order).
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
return popped
"""


class BatchReceiveRedisChannelLayer(RedisChannelLayer):  # type: ignore[misc]
    """Drop-in for channels_redis.core.RedisChannelLayer (same settings, same keys)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._received: dict[str, collections.deque[tuple[Any, Any]]] = {}

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

    async def _pop_batch(self, channel: str, into: collections.deque[tuple[Any, Any]]) -> None:
        assert self.require_valid_channel_name(channel, receive=True), "Channel name invalid"
        channel_key = self.prefix + channel
        backup = self._backup_channel_name(channel_key)
        connection = self.connection(self.consistent_hash(channel))
        await self.receive_clean_locks.acquire(channel_key)  # after any pending cleaner
        try:
            popped = await connection.eval(POP_BATCH_LUA, 2, channel_key, backup, RECEIVE_BATCH)
            into.extend(self._unpack(channel, content) for content in popped[::2])
            if popped:
                await connection.delete(backup)  # in memory now: nothing left to restore
        finally:
            self.receive_clean_locks.release(channel_key)

    def _unpack(self, channel: str, content: bytes) -> tuple[Any, Any]:
        """As the parent's receive_single: decode, then address the local channel(s)."""
        message = self.deserialize(content)
        target: Any = message.pop("__asgi_channel__", channel)
        return target, message
