"""The hub's state in one served process: its connections, its admission, and what its
event loop runs for all of them.

One HubProcess is made where the ASGI application is built (`routed`, hub/routing.py,
which `messenger_realtime.asgi.with_hub` calls) and handed to what needs it: the
transports' consumers and negotiate get it from the route, a connection gets it when
it is made (as `Process`, hub/connection/state.py), Daphne's shutdown from `with_hub`.
No other hub state is kept at module level (but two caches: docs/architecture.md, "Who
owns the hub's state"): a test that builds its own HubProcess sees no other test's
connections, counts or caches.

What it owns, and who else writes it (nobody):
- `connections`: this process's live logical connections by id (a resume, a poll, a
  POST finds its connection here; Daphne's shutdown closes them all). `open()` adds a
  connection, `forget()` removes it (its end, or a long poll's last answer).
- `accepting`: False once the process shuts down (new connections are refused).
- `admission`: connects in progress and the line of negotiates (hub/admission.py).
- the renewal of its connections' places among their users' open connections
  (hub/user_connections.py), and what presence does with them: announcing a user's
  first and last place, sweeping for users whose process died, saving last-seen times
  (hub/presence/); the tasks nobody awaits (give-backs, writes that cannot wait), kept
  until done (`keep`).
- `built`: the events its recoveries built, shared by the next ones (hub/recovery.py),
  the thread its recoveries read on, and a lock per user recovering (one recovery read
  at a time per user: hub/connection/methods/recover.py).
- per event loop: the `clock` every connection's deadlines are kept on (hub/clock.py),
  the `fanout` over the channel layer (hub/fanout.py: the process is the layer's group
  member), the chat `rosters` it has read (hub/rosters.py) and the `database_clock`
  (hub/database_clock.py: its offset from the database's, for delivery latencies).

Per event loop. Daphne serves a process from one event loop, so in production each of
these is one per process. Tests run several event loops in one process (one per test)
against one application, and the loop-bound parts hold that loop's timers, tasks and
futures: so they are kept per loop here (`_for_loop`), made at first use on a loop.
"""

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from uuid import UUID

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from messenger_realtime.conf.settings import HubOptions
from messenger_realtime.contracts.port import get_domain_port
from messenger_realtime.hub import user_connections
from messenger_realtime.hub.admission import Admission
from messenger_realtime.hub.clock import Clock
from messenger_realtime.hub.connection import HubConnection
from messenger_realtime.hub.connection.budget import Budget, Budgets
from messenger_realtime.hub.database_clock import DatabaseClock
from messenger_realtime.hub.delivery_slo import ClientShares
from messenger_realtime.hub.fanout import Fanout
from messenger_realtime.hub.presence.changes import Announcer
from messenger_realtime.hub.presence.last_seen import save_forever
from messenger_realtime.hub.presence.sweep import sweep_forever
from messenger_realtime.hub.presence.visibility import read_viewers
from messenger_realtime.hub.reads import hub_read
from messenger_realtime.hub.recovery import BuiltEvents, StreamRecovery, read_missed
from messenger_realtime.hub.rosters import Rosters, read_roster
from messenger_realtime.hub.user_connections import Taken


# Last-seen times go to the host's database on a pooled connection, given back after.
def _store_last_seen(seen: Mapping[UUID, float]) -> None:
    """Last-seen times to the host's database (a pooled connection, given back after)."""
    get_domain_port().record_last_seen(seen)


_record_last_seen: Callable[[Mapping[UUID, float]], Awaitable[None]] = database_sync_to_async(
    _store_last_seen
)


class _LoopParts:
    """What one event loop runs for the process."""

    __slots__ = ("announcer", "clock", "database_clock", "fanout", "renewing", "rosters")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.clock = Clock(loop)
        self.fanout: Fanout | None = None  # made at first use, over the layer asked for
        self.rosters = Rosters(read_roster)
        self.renewing: asyncio.Task[None] | None = None  # places' renewal, once one is taken
        self.database_clock: DatabaseClock | None = None  # measured from the first ask
        self.announcer: Announcer | None = None  # presence changes, made at the first


class HubProcess:
    """The hub's shared state in one served process (see the module's docstring)."""

    def __init__(self) -> None:
        self.connections: dict[str, HubConnection] = {}
        self.accepting = True
        self.admission = Admission()
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopParts] = (
            weakref.WeakKeyDictionary()
        )
        self._tasks: set[asyncio.Future[None]] = set()  # nobody awaits them: kept till done
        self.built = BuiltEvents()
        self.budgets = Budgets()  # each user's share of this process (connection/budget.py)
        # Each user's share of the client delivery histogram (hub/delivery_slo.py).
        self.client_shares = ClientShares()
        # A Recover's read has a thread of its own (on a connection borrowed per read): one
        # user's heavy or stuck recovery never holds up the reads every connect makes
        # (reads.py). Its thread starts at the first recovery, not here.
        self._recovery_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hub-recovery")
        self._read_missed = hub_read(read_missed, executor=self._recovery_thread)
        # A presence change's check (hub/presence/visibility.py) on a thread of its own
        # too: never behind the connects' reads, never ahead of them.
        self._checks_thread = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="hub-presence-checks"
        )
        self._read_viewers = hub_read(read_viewers, executor=self._checks_thread)
        # One user's recoveries run one at a time in this process, so a user with many
        # connections queues one read at a time on that thread, not many ahead of others.
        self._recovering: weakref.WeakValueDictionary[UUID, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    def _for_loop(self) -> _LoopParts:
        loop = asyncio.get_running_loop()
        parts = self._loops.get(loop)
        if parts is None:
            parts = self._loops[loop] = _LoopParts(loop)
        return parts

    def clock(self) -> Clock:
        """This event loop's clock: every connection's deadlines (hub/clock.py)."""
        return self._for_loop().clock

    def database_clock(self) -> DatabaseClock:
        """The database's time as this loop sees it (hub/database_clock.py), measured
        from the first connection that acknowledges its deliveries on."""
        parts = self._for_loop()
        if parts.database_clock is None:
            parts.database_clock = DatabaseClock()
            parts.database_clock.start()
        return parts.database_clock

    def fanout(self, layer: Any) -> Fanout:
        """This event loop's fan-out over `layer` (a new one if the layer changed: tests
        give each test a layer of its own)."""
        parts = self._for_loop()
        fanout = parts.fanout
        if fanout is None or fanout.layer is not layer:
            fanout = parts.fanout = Fanout(layer)
        return fanout

    def announcer(self) -> Announcer:
        """This event loop's presence changes, sent in batches (hub/presence/changes.py)."""
        parts = self._for_loop()
        if parts.announcer is None:
            parts.announcer = Announcer(get_channel_layer())
        return parts.announcer

    def user_budget(self, user_id: UUID, options: HubOptions, now: float) -> Budget:
        """The user's share of this process, which their connections' messages all pay."""
        return self.budgets.for_user(user_id, options, now)

    def rosters(self) -> Rosters:
        """This event loop's chat rosters (hub/rosters.py)."""
        return self._for_loop().rosters

    # -- the registry ---------------------------------------------------------------

    def get(self, connection_id: str) -> HubConnection | None:
        """The live connection with this id in this process, or None."""
        return self.connections.get(connection_id)

    def live(self) -> list[HubConnection]:
        return list(self.connections.values())

    async def open(self, connection: HubConnection) -> None:
        """Register a connection whose transport has accepted, and start its clock."""
        self.connections[connection.connection_id] = connection
        await connection.open()

    def forget(self, connection_id: str, connection: object) -> None:
        """It ended (or its last poll was answered): no request finds it any more."""
        if self.connections.get(connection_id) is connection:
            del self.connections[connection_id]

    # -- recoveries (hub/connection/methods/recover.py) ------------------------------

    def recovering(self, user_id: UUID) -> asyncio.Lock:
        """The lock a user's recoveries take, one at a time, in this process."""
        lock = self._recovering.get(user_id)
        if lock is None:
            lock = self._recovering[user_id] = asyncio.Lock()
        return lock

    async def read_missed(
        self, user_id: UUID, asked: Mapping[str, int], most: int, most_bytes: int
    ) -> list[StreamRecovery]:
        """hub/recovery.read_missed on the recoveries' thread, with this process's cache."""
        return await self._read_missed(user_id, asked, most, self.built, most_bytes)

    async def viewers_of(self, user_id: UUID, viewers: list[UUID]) -> Collection[UUID]:
        """Which of `viewers` may still see `user_id` (DomainPort.viewers_of), read on
        the presence checks' thread (hub/presence/visibility.py)."""
        return await self._read_viewers(user_id, viewers)

    # -- places among a user's open connections (hub/user_connections.py) ------------

    async def take_place(
        self, user_id: UUID, connection_id: str, options: HubOptions, *, connect: bool = True
    ) -> Taken:
        """Count the connect (unless `connect` is False: a negotiated transport opening)
        and give the connection a place (user_connections.take: not granted past the
        connect rate limit or the user's cap); the process renews the places of its live
        connections from then on, sweeps for users whose places lapsed and saves
        last-seen times (hub/presence/). A user's first place announces them online."""
        self.keep_places(options)
        taken = await user_connections.take(user_id, connection_id, options, connect=connect)
        if taken.came_online:
            self.announcer().announce(user_id, True, taken.last_seen)
        return taken

    def keep_places(self, options: HubOptions) -> None:
        """Renew this process's places from now on (at its first place, or the first
        transport it opens of a connection negotiated on another process)."""
        parts = self._for_loop()
        if parts.renewing is None:
            parts.renewing = asyncio.ensure_future(self._keep_places(options))

    def give_back_place(self, user_id: UUID, connection_id: str, options: HubOptions) -> None:
        """A connection ended: its place frees (in the background, kept until done); the
        user's last place announces them offline."""
        self.keep(asyncio.ensure_future(self._give_back(user_id, connection_id, options)))

    async def _give_back(self, user_id: UUID, connection_id: str, options: HubOptions) -> None:
        offline_at = await user_connections.give_back(user_id, connection_id, options)
        if offline_at is not None:
            self.announcer().announce(user_id, False, offline_at)

    async def _keep_places(self, options: HubOptions) -> None:
        """What a process holding places runs for as long as it lives."""
        chores = [
            user_connections.renew_forever(self.live),
            sweep_forever(get_channel_layer(), options, self.announcer().clock),
        ]
        if get_domain_port().provides("record_last_seen"):
            chores.append(save_forever(options, _record_last_seen))
        await asyncio.gather(*chores)

    def keep(self, task: "asyncio.Future[None]") -> None:
        """Hold a task nobody awaits until it is done (the loop keeps only weak references)."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
