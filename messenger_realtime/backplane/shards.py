"""Which Redis server holds what, when the channel layer spans several (sharded Redis).

channels-redis hashes a name to one of its `hosts` (`consistent_hash`, CRC32 over a ring
of 4096): a group's member set lives on the host of the group's name, and a channel's
queue on the host of the channel's non-local part, so every connection of one Daphne
process ("specific.<process>!...") queues on the host of "specific.<process>!". A Lua
script may only touch keys of the server it runs on, so the pipelined push
(backplane/pipeline.py) splits its work by host with these helpers and runs each host's
share concurrently. The overrun set and the "$inflight" backup live beside their channel
key: the same host. With one host every helper below costs what the unsharded path did.
"""

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

Result = TypeVar("Result")


def group_host(layer: Any, group: str) -> int:
    """The host of a layer group's member set (as channels-redis' group_add picks it)."""
    return int(layer.consistent_hash(group))


def channel_key_host(layer: Any, channel_key: str) -> int:
    """The host of a channel queue's key (`prefix` + the channel's non-local part), as
    channels-redis' group_send writes it and its receive reads it."""
    return int(layer.consistent_hash(channel_key[len(layer.prefix) :]))


def by_host(
    layer: Any, items: Iterable[Result], host: Callable[[Result], int]
) -> dict[int, list[Result]]:
    """The items bucketed by host, each bucket in the items' order."""
    if layer.ring_size == 1:
        return {0: list(items)}
    buckets: dict[int, list[Result]] = {}
    for item in items:
        buckets.setdefault(host(item), []).append(item)
    return buckets


async def on_hosts(
    layer: Any, calls: dict[int, Callable[[Any], Awaitable[Result]]]
) -> dict[int, Result]:
    """Each host's call on that host's connection, concurrently; every call ends before a
    failure is raised, so nothing is left running behind a failed chunk."""
    if len(calls) == 1:  # one host: no task, exactly the unsharded cost
        ((index, call),) = calls.items()
        return {index: await call(layer.connection(index))}
    results = await asyncio.gather(
        *(call(layer.connection(index)) for index, call in calls.items()),
        return_exceptions=True,
    )
    done: dict[int, Result] = {}
    for index, result in zip(calls, results, strict=True):
        if isinstance(result, BaseException):
            raise result
        done[index] = result
    return done


def script(lua: str, keys: list[Any], args: list[Any]) -> Callable[[Any], Awaitable[Any]]:
    """One EVAL of `lua` over `keys` with `args`, for on_hosts."""

    def call(connection: Any) -> Awaitable[Any]:
        return connection.eval(lua, len(keys), *keys, *args)  # type: ignore[no-any-return]

    return call
