"""One reader per hub process, and the process (not each connection) in the layer groups.

channels-redis gives every consumer its own receive machinery (a lock, two tasks and an
asyncio.wait per message received) and lists every connection of a group in the group's
set and in every message sent to it, so a 1,000-member chat carried 1,000 channel names
per event. Here a process joins group G once, as the channel `<process>!<G>` (all such
channels live in the process's one Redis queue), keeps its own map of which local
connections are in G, and one task pops the queue in batches and hands each message to
the inboxes of G's local connections (hub/inbox.py). Every connection then drains its
own inbox, so a quiet connection's event never waits behind another connection's burst
once it is in the process.

Backpressure: the reader takes nothing more from Redis while the process's draining
connections hold BACKLOG_LIMIT deliveries or more in memory, each counting at most
CONNECTION_SHARE of what it holds. So the reader waits only for a process that is behind
(ten connections a frame behind, or a thousand one delivery behind), which then shows it
in its Redis queue, where the worker's backpressure watches (dispatch/push.py,
HUB_BACKLOG_LIMIT). One slow connection never holds the reader, and so never delays the
other connections of its process (nor, through the worker's backpressure, everyone's
pushes to it): it falls behind alone, in its own inbox, bounded by the layer's capacity,
and at that bound it is overrun (Close with allowReconnect, counted in channel_overruns),
never silently short (hub/inbox.py). A share rather than a per-process cap on slow
connections: it needs no judgement of which connection is "the slow one", and memory
stays bounded by the inboxes' own bounds. Every STALL_AFTER, a connection that took
nothing for that long with messages waiting is marked stalled: it stops counting, and
it overflows into its overrun at BACKLOG_LIMIT messages (not the layer's capacity).

Joining a user to a chat: the worker copies the members of the user's group into the
chat's group, so one message may name both the chat's channel and the user's; each
connection gets it once, and the copy is taken out once redundant (hub/copies.py).

The process's queue key gets its TTL (channels-redis' `expiry`, 60 s) from pushes only;
while the process reads it, a task gives it the full TTL again every third of that, so a
queue still unread a minute after the last push (its connections drain a burst slowly)
does not vanish with what it holds. A dead process's queue still expires.

A Redis server restarted without persistence (or flushed) forgets the process's group
memberships and the messages queued for it (hub/restarts.py notices): the process joins
all its groups again and tells every local connection (a Close with allowReconnect),
whose client reconnects and recovers what was lost meanwhile from the database. So does
a server whose connections went silent or failed (a receive or a probe without a reply
within NETWORK_TIMEOUT): the reader's pop may have been taken by Redis and never arrived.

Other layers (the in-memory one of single-process mode) get one receive task per group
channel instead of the batched reader.
"""

import asyncio
import contextlib
import hashlib
import time
import weakref
from typing import Any

from messenger_realtime.backplane.layer import OVERRUN_EVENT
from messenger_realtime.backplane.reservations import ConnectionReservation
from messenger_realtime.exceptions import describe_error
from messenger_realtime.hub.copies import Copies
from messenger_realtime.hub.inbox import Inbox
from messenger_realtime.hub.restarts import BACKPLANE_RESTARTED_MESSAGE, RestartWatch
from messenger_realtime.ops.logging import Field, get_logger

logger = get_logger(__name__)
BACKLOG_LIMIT = 1000  # deliveries waiting in memory before the reader stops popping
STALL_AFTER = 0.5  # s an inbox with messages may take nothing before it stops counting
# The most one connection adds to the backlog: a frame's worth (outbound.FRAME_RECORDS),
# what it takes at once. A tenth of BACKLOG_LIMIT: one connection alone never fills it.
CONNECTION_SHARE = 100
# Groups are joined again this often: channels-redis forgets members older than its
# group_expiry (86,400 s by default), which would cut a long-lived process off silently.
GROUP_REFRESH = 3600.0
EVERY_CHANNEL = "*"  # an overrun for every connection of the process (backplane/pipeline.py)
RETRY_AFTER = 1.0  # s before the reader tries again after a failed receive (Redis down)
_NAME_LIMIT = 99  # Channels' longest channel name


class Fanout:
    """One event loop's fan-out over a layer: its HubProcess keeps one per loop
    (HubProcess.fanout, hub/process.py)."""

    def __init__(self, layer: Any) -> None:
        self.layer = layer
        self.members: dict[str, set[Inbox]] = {}  # group -> local inboxes in it
        self.channels: dict[str, str] = {}  # channel name -> group, for the joined groups
        self.joined: set[str] = set()  # groups this process is a member of in the layer
        self.backlog = 0  # deliveries waiting in draining inboxes
        self.room = asyncio.Event()
        self.room.set()
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}  # reader(s) and the refresher
        self.copies = Copies(layer, self.channel_of)
        self._inboxes: weakref.WeakSet[Inbox] = weakref.WeakSet()  # every one made here
        self._batched = hasattr(layer, "receive_batch")
        self.restarts = RestartWatch(layer, self._backplane_restarted)
        # Channels' specific-channel prefix: "specific.<client prefix>!" (channels-redis
        # keeps all of them in that one key), or the in-memory layer's own.
        prefix = getattr(layer, "client_prefix", "inmemory")
        self.process_channel = f"specific.{prefix}!"

    # -- membership ---------------------------------------------------------------

    def inbox(self) -> Inbox:
        capacity = getattr(self.layer, "capacity", 100)
        stalled, share = min(capacity, BACKLOG_LIMIT), min(CONNECTION_SHARE, BACKLOG_LIMIT)
        made = Inbox(capacity, self._count, stalled_capacity=stalled, share=share)
        self._inboxes.add(made)
        return made

    async def join(self, group: str, inbox: Inbox) -> None:
        await self.join_many([group], inbox)

    async def join_many(
        self, groups: list[str], inbox: Inbox, claim: ConnectionReservation | None = None
    ) -> bool:
        """Join `inbox` to `groups`: the layer memberships this process lacks are added
        in one round trip per Redis host (a connection joins its user's group, then all
        its chats', when it opens; channels-redis' group_add takes two round trips per
        group). With `claim` (a connection's token, as it joins its user's group), the
        claim is made in the same round trip; returns whether it was (True without one:
        the caller refuses the connection and leaves the groups otherwise). Each group's
        reconcile lock is held while its membership is added, taken in name order (no
        two batches wait on each other), as _reconcile holds it."""
        add_many = getattr(self.layer, "group_add_many", None)
        if add_many is None and claim is not None and not await claim.make(self.layer):
            return False  # a layer without pipelines (in-memory): the claim on its own
        for group in groups:
            self.members.setdefault(group, set()).add(inbox)
        needed = sorted({g for g in groups if g not in self.joined})
        if add_many is None or (not needed and claim is None):
            for group in needed:
                await self._reconcile(group)
            return True
        async with contextlib.AsyncExitStack() as held:
            for group in needed:
                await held.enter_async_context(self._locks.setdefault(group, asyncio.Lock()))
            adds = [g for g in needed if g in self.members and g not in self.joined]
            for group in adds:
                self.channels[self.channel_of(group)] = group  # before a message can come
            try:
                claimed = await add_many([(g, self.channel_of(g)) for g in adds], claim)
            except BaseException:
                for group in adds:
                    self.channels.pop(self.channel_of(group), None)
                raise
            for group in adds:
                self.joined.add(group)
                self._start(group)
        for group in needed:  # left again while the batch waited: undo as leave() would
            if (group in self.members) != (group in self.joined):
                await self._reconcile(group)
        return bool(claimed)

    async def leave(self, group: str, inbox: Inbox) -> None:
        members = self.members.get(group)
        if members is not None:
            members.discard(inbox)
            if not members:
                del self.members[group]
        await self._reconcile(group)

    async def leave_many(self, groups: list[str], inbox: Inbox) -> None:
        """`inbox` leaves `groups`: the layer memberships nobody here wants any more are
        discarded in one round trip per Redis host (a layer without the batch: one by
        one, as leave()). Each such group's reconcile lock is held while it is, taken in
        name order, as join_many takes them."""
        for group in groups:
            members = self.members.get(group)
            if members is not None:
                members.discard(inbox)
                if not members:
                    del self.members[group]
        unwanted = sorted({g for g in groups if g in self.joined and g not in self.members})
        discard_many = getattr(self.layer, "group_discard_many", None)
        if discard_many is None or len(unwanted) < 2:
            for group in unwanted:
                await self._reconcile(group)
            return
        async with contextlib.AsyncExitStack() as held:
            for group in unwanted:
                await held.enter_async_context(self._locks.setdefault(group, asyncio.Lock()))
            drops = [g for g in unwanted if g in self.joined and g not in self.members]
            for group in drops:
                self.joined.discard(group)
                self.channels.pop(self.channel_of(group), None)  # what comes now has nobody
                self._stop(group)
            with contextlib.suppress(Exception):  # unreachable Redis: groups expire
                await discard_many([(g, self.channel_of(g)) for g in drops])
        for group in unwanted:  # wanted again while the batch waited: undo as join() would
            if (group in self.members) != (group in self.joined):
                await self._reconcile(group)

    def channel_of(self, group: str) -> str:
        name = self.process_channel + group
        if len(name) > _NAME_LIMIT:  # a long group name: a stable digest of it instead
            name = self.process_channel + hashlib.sha1(group.encode()).hexdigest()
        return name

    async def forget_copy(self, chat_group: str, user_group: str) -> None:
        """The user is not in the chat: stop receiving its events through the user's
        channel (a copy made when the user joined, since undone)."""
        await self.copies.forget(chat_group, user_group)

    async def _reconcile(self, group: str) -> None:
        """Make the layer's membership of this process in `group` match whether any local
        connection wants it. Serialized per group, so a join racing a leave cannot leave
        the layer saying the opposite of the map."""
        lock = self._locks.setdefault(group, asyncio.Lock())
        async with lock:
            wanted, joined = group in self.members, group in self.joined
            if wanted and not joined:
                channel = self.channel_of(group)
                self.channels[channel] = group  # before a message for it can come
                try:
                    await self.layer.group_add(group, channel)
                except BaseException:
                    del self.channels[channel]
                    raise
                self.joined.add(group)
                self._start(group)
            elif joined and not wanted:
                self.joined.discard(group)
                self.channels.pop(self.channel_of(group), None)  # what comes now has nobody
                self._stop(group)
                with contextlib.suppress(Exception):  # unreachable Redis: groups expire
                    await self.layer.group_discard(group, self.channel_of(group))

    # -- reading ------------------------------------------------------------------

    def _start(self, group: str) -> None:
        if "refresh" not in self._tasks:
            self._tasks["refresh"] = asyncio.create_task(self._keep_joined())
        if "stalls" not in self._tasks:
            self._tasks["stalls"] = asyncio.create_task(self._watch_stalls())
        if self._batched and "queue" not in self._tasks:
            self._tasks["queue"] = asyncio.create_task(self._keep_queue())
        if self._batched and "epochs" not in self._tasks:
            self._tasks["epochs"] = asyncio.create_task(self.restarts.watch())
        key = "process" if self._batched else group
        if key not in self._tasks:
            channel = self.process_channel if self._batched else self.channel_of(group)
            self._tasks[key] = asyncio.create_task(self._read(channel))

    def _stop(self, group: str) -> None:
        """Stop the readers nobody needs: a group's own (unbatched), or all when no
        group is left (a receive cancelled mid-call loses nothing: layer.py)."""
        names = [group] if not self._batched else []
        if not self.joined and not self.channels:  # (a join still in flight is in channels)
            names = list(self._tasks)
            self.copies.cancel()
        for name in names:
            task = self._tasks.pop(name, None)
            if task is not None:
                task.cancel()

    async def _read(self, channel: str) -> None:
        layer = self.layer
        while True:
            await self._wait_for_room()
            try:
                if self._batched:
                    received = await layer.receive_batch(channel)
                else:
                    received = [(channel, await layer.receive(channel))]
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    # A cancellation that reached redis-py mid-read can come out as a
                    # ConnectionError: the reader was stopped (its loop is closing), so it
                    # stops instead of logging a failure and retrying a second later.
                    raise asyncio.CancelledError from exc
                logger.error(
                    "hub receive failed; retrying",
                    extra={"action": "receive", Field.ERROR_CODE: describe_error(exc)},
                )
                if self._batched:  # what the failed receive carried may be lost (restarts.py)
                    await self.restarts.lost(layer.consistent_hash(channel), exc)
                await asyncio.sleep(RETRY_AFTER)  # a retry pause, not synchronisation
                continue
            for target, message in received:
                try:
                    self.route(target, message)
                except Exception as exc:  # one bad message must not end the reader
                    logger.error(
                        "hub message not routed",
                        extra={"action": "route", Field.ERROR_CODE: describe_error(exc)},
                    )

    async def _wait_for_room(self) -> None:
        """Until the backlog is under the limit (stalled inboxes leave it: _watch_stalls)."""
        while not self.room.is_set():
            await self.room.wait()

    async def _watch_stalls(self) -> None:
        """Mark stalled the inboxes that took nothing for STALL_AFTER with messages waiting
        (hub/inbox.py): out of the backlog, and bounded by BACKLOG_LIMIT. Not only while
        the reader waits for room: a stuck connection's share rarely fills the backlog,
        and its client should hear of its overrun without `capacity` messages held."""
        while True:
            await asyncio.sleep(STALL_AFTER)  # a period, not synchronisation
            if self.backlog:  # nothing counted: nothing to stall
                since = time.monotonic() - STALL_AFTER
                for inbox in list(self._inboxes):
                    inbox.stall_if_idle(since)

    def route(self, target: str | list[str], message: dict[str, Any]) -> None:
        """Hand a message to every local connection of the groups it names, once each."""
        names = target if isinstance(target, list) else [target]
        if message.get("type") == OVERRUN_EVENT and EVERY_CHANNEL in names:
            for inbox in set().union(*self.members.values()):  # expired: whose is unknown
                inbox.put(message)
            return
        groups = [g for name in names if (g := self.channels.get(name)) is not None]
        if len(groups) == 1:
            recipients: set[Inbox] | list[Inbox] = list(self.members.get(groups[0], ()))
        else:
            recipients = set().union(*(self.members.get(g, ()) for g in groups))
        for inbox in recipients:
            inbox.put(message)
        # Only once the message is in every inbox: bookkeeping must never cost a delivery
        # (a failure here used to end route() before anyone got the message).
        if len(groups) > 1 and message.get("type") != OVERRUN_EVENT:
            try:
                self.copies.drop_redundant(groups, message, self.members)
            except Exception as exc:  # the copy stays: a duplicate name, delivered once
                logger.error(
                    "hub copy bookkeeping failed",
                    extra={"action": "drop_copy", Field.ERROR_CODE: describe_error(exc)},
                )

    def _count(self, delta: int) -> None:
        self.backlog += delta
        if self.backlog >= BACKLOG_LIMIT:
            self.room.clear()
        else:
            self.room.set()

    async def _keep_queue(self) -> None:
        """Keep the process's Redis queue from expiring while this process reads it: a
        push alone sets its TTL, so without this a queue still unread `expiry` (60 s)
        after the last push would vanish, its messages lost without a word
        (layer.keep_alive)."""
        while True:
            await asyncio.sleep(self.layer.expiry / 3)  # a period, not synchronisation
            try:
                await self.layer.keep_alive(self.process_channel)
            except Exception as exc:  # tried again next period (Redis down: nothing to keep)
                logger.warning(
                    "hub queue keep-alive failed",
                    extra={"action": "keep_queue", Field.ERROR_CODE: describe_error(exc)},
                )

    async def _backplane_restarted(self, index: int) -> None:
        """The server forgot this process's groups and queued messages: join the groups
        again (first, so no connection that stays or opens now is left out of one), then
        close every connection with allowReconnect so its client recovers the gap."""
        told = set().union(*self.members.values()) if self.members else set()
        logger.warning(
            "channel layer server restarted; rejoining groups and reconnecting clients",
            extra={"action": "backplane_restarted", "server": index, "connections": len(told)},
        )
        await self.refresh_groups()
        for inbox in told:
            inbox.put(BACKPLANE_RESTARTED_MESSAGE)

    async def _keep_joined(self) -> None:
        while True:
            await asyncio.sleep(GROUP_REFRESH)  # a period, not synchronisation
            await self.refresh_groups()

    async def refresh_groups(self) -> None:
        """Join every joined group again (channels-redis forgets old members). Each
        under the group's reconcile lock, and only if still joined then: a refresh in
        flight while a leave discarded the group would otherwise land after it and put
        the process back in a group it left (the layer saying joined, the map not)."""
        # Forget the locks of groups nobody wants (only here: dropping one while a
        # waiter is about to take it would let two reconciles of a group overlap).
        self._locks = {
            g: lock
            for g, lock in self._locks.items()
            if lock.locked() or g in self.members or g in self.joined
        }
        for group in list(self.joined):
            async with self._locks.setdefault(group, asyncio.Lock()):
                if group not in self.joined:  # left while the refresh went on
                    continue
                with contextlib.suppress(Exception):  # tried again next period
                    await self.layer.group_add(group, self.channel_of(group))
