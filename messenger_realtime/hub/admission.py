"""Admission control: how many connects one hub process has in progress, and what a
connect past the bound waits for.

A connect is in progress from the start of its negotiate until the handshake of the
connection it negotiated is answered, or the connection ends: the negotiate's slot is
held for its connection id (up to RESERVED_FOR seconds, for a client that never comes)
and the transport that opens with that id takes it over. After a deploy or a crash every
client reconnects at once; a process that took them all would queue their upgrades and
handshakes past the clients' timeouts (Daphne's 5 s to accept an upgrade, the clients'
15 s handshake timeout), so each retry would add to the pile and the storm might never
converge. So at most ADMISSION_LIMIT connects are in progress: a negotiate past that
waits in line (first come, first served) for one to finish, up to ADMISSION_WAIT
seconds, and only then answers 503 with Retry-After (negotiate.py). A transport that
opens without a held slot (its reservation ran out, a resume, a client that skipped
negotiate) counts from then on, for its user too: a client that skipped negotiate is
refused past ADMISSION_PER_USER (below), the others were admitted once.

Waiting, not refusing at once, is what lets a storm converge with the official
clients: the JavaScript client's default reconnect policy tries four times (after 0, 2,
10 and 30 s) and then gives up for good, so a 503 costs a client one of its four
attempts, while a negotiate held open costs the process an idle socket and the client
nothing (its negotiate times out after 100 s). A client in line is admitted as soon as
a connect ahead of it finishes, so the process admits at its full rate and the last of
10,000 clients is in after 10,000 / (that rate) seconds instead of at the attempt after
next.

One user may hold at most ADMISSION_PER_USER connects in progress: slots negotiates
reserved for their connections, and WebSockets opened without negotiate whose handshake
has not come yet. A client that negotiates again and again without opening what it was
granted, or opens WebSockets and never sends their handshake (a bug, or abuse), would
otherwise hold up to every slot of the process (for RESERVED_FOR seconds, or the
handshake timeout, each) and keep everyone else in line. Past the cap its negotiate is
answered 429 with Retry-After (negotiate.py) and its WebSocket is refused at the upgrade
(transports/opening.py); its own connections, once open, do not count here (the cap on
open connections is MAX_CONNECTIONS_PER_USER's, user_connections.py).

A user whose connects RATE_LIMIT_CONNECTS refused is refused again from this process's
memo (`Refusals`) until the limit lets a connect through, before the negotiate reads the
database or asks Redis: a user whose flooding connections were closed (each costing 10
connects) went on reconnecting, ~25 negotiates a second, each a read on the thread the
REST views share and a round trip to Redis.

Negotiates in line are a gauge (messenger_realtime_hub_connects_waiting). Waits that run
out are counted (messenger_realtime_hub_connects_shed_total) and logged
at most once per SHED_LOG_EVERY seconds with how many were shed since the last line, so
a storm does not become a flood of log lines.
"""

import asyncio
import contextlib
import dataclasses
import math
import time
from collections import deque
from collections.abc import AsyncIterator

from messenger_realtime.conf.settings import HubOptions
from messenger_realtime.hub.ratelimit import Refusal
from messenger_realtime.ops import metrics
from messenger_realtime.ops.logging import get_logger

logger = get_logger(__name__)
RETRY_AFTER = 2  # seconds (Retry-After is whole seconds), after a wait that ran out
SHED_LOG_EVERY = 1.0  # seconds between two "connects shed" log lines at most
# Seconds a negotiate's slot waits for its connection's transport: a client opens it
# right after negotiate answers, so this only bounds what a client that never comes holds.
RESERVED_FOR = 10.0
REFUSALS_KEPT = 10_000  # users a process remembers the connect refusals of, at most


class Admission:
    """This process's count of connects in progress, its line of negotiates waiting for
    one to finish, and its shedding log."""

    def __init__(self) -> None:
        self.in_progress = 0
        # Negotiates waiting for a slot, first come first served; a future's result is
        # True when a finishing connect handed it its slot, False when its wait ran out.
        self._line: deque[asyncio.Future[bool]] = deque()
        # Slots of negotiates answered, by connection id, until its transport opens: the
        # timer that gives the slot up, and the user it was granted to.
        self._reserved: dict[str, tuple[asyncio.TimerHandle, str]] = {}
        self._held_by: dict[str, int] = {}  # user -> reserved slots (ADMISSION_PER_USER)
        self._opening_by: dict[str, int] = {}  # user -> connects in progress without one
        self._shed_unlogged = 0
        self._logged_at = float("-inf")
        self.refusals = Refusals()  # users whose connects the rate limit refuses for now

    @property
    def waiting(self) -> int:
        return sum(1 for waiter in self._line if not waiter.done())

    @contextlib.asynccontextmanager
    async def connect(self, options: HubOptions) -> AsyncIterator["Slot | None"]:
        """Count a negotiate: at once below ADMISSION_LIMIT, else after waiting in line
        for a slot up to ADMISSION_WAIT seconds. Yields None (and counts nothing) when
        the wait ran out, else its Slot: released when the negotiate is done, unless it
        was held for the connection it granted (Slot.hold_for)."""
        if self.in_progress < options.admission_limit and not self._line:
            self.in_progress += 1
        elif not await self._wait(options):
            self._shed(options)
            yield None
            return
        slot = Slot()
        try:
            yield slot
        finally:
            if slot.connection_id is None:
                self._release()
            else:
                self._reserve(slot.connection_id, slot.user)

    def may_hold(self, user: str, options: HubOptions) -> bool:
        """Whether `user` may have one more slot held for a connection (the cap above)."""
        return self.may_open(user, options)

    def _reserve(self, connection_id: str, user: str) -> None:
        loop = asyncio.get_running_loop()
        timer = loop.call_later(RESERVED_FOR, self._expire, connection_id)
        self._reserved[connection_id] = (timer, user)
        self._held_by[user] = self._held_by.get(user, 0) + 1

    def _unreserve(self, connection_id: str) -> bool:
        """Forget a held slot (its transport opened, or it ran out); whether there was one."""
        reserved = self._reserved.pop(connection_id, None)
        if reserved is None:
            return False
        timer, user = reserved
        timer.cancel()
        left = self._held_by[user] - 1
        if left:
            self._held_by[user] = left
        else:
            del self._held_by[user]
        return True

    def _expire(self, connection_id: str) -> None:
        """Its client never opened the connection it negotiated: the slot goes on."""
        if self._unreserve(connection_id):
            self._release()

    async def _wait(self, options: HubOptions) -> bool:
        """Wait in line; True once a finishing connect handed over its slot."""
        if options.admission_wait <= 0:
            return False
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        timer = loop.call_later(options.admission_wait, _settle, waiter, False)
        self._line.append(waiter)
        metrics.hub_connects_waiting.inc()
        try:
            return await waiter
        except asyncio.CancelledError:
            # The request went away while in line; a slot handed over meanwhile
            # passes on to the next in line.
            if waiter.done() and not waiter.cancelled() and waiter.result():
                self._release()
            raise
        finally:
            timer.cancel()
            metrics.hub_connects_waiting.dec()

    def may_open(self, user: str, options: HubOptions) -> bool:
        """Whether `user` may have one more connect in progress, held for a negotiate or
        opened without one (a WebSocket that skipped negotiate): ADMISSION_PER_USER
        counts both, so upgrades that never send their handshake cannot hold every slot."""
        held = self._held_by.get(user, 0) + self._opening_by.get(user, 0)
        return held < options.admission_per_user

    def opening(self, connection_id: str, user: str) -> "Opening":
        """Count a transport's connect until its handshake is answered (or it ends): in
        the slot its negotiate held, else one more, counted for its user too (may_open
        refused the one too many before it got here)."""
        if self._unreserve(connection_id):
            return Opening(self, "")
        self.in_progress += 1
        self._opening_by[user] = self._opening_by.get(user, 0) + 1
        return Opening(self, user)

    def _opened(self, user: str) -> None:
        """A connect without a held slot finished: its user's count goes down."""
        left = self._opening_by.get(user, 0) - 1
        if left > 0:
            self._opening_by[user] = left
        else:
            self._opening_by.pop(user, None)

    def _release(self) -> None:
        """A connect finished: its slot goes to the first negotiate still in line, else
        the count goes down."""
        line = self._line
        while line:
            waiter = line.popleft()
            if not waiter.done():
                waiter.set_result(True)  # the slot passes on: in_progress unchanged
                return
        self.in_progress -= 1

    def _shed(self, options: HubOptions) -> None:
        metrics.hub_connects_shed.inc()
        self._shed_unlogged += 1
        now = time.monotonic()
        if now - self._logged_at >= SHED_LOG_EVERY:
            logger.warning(
                "hub connects shed",
                extra={
                    "action": "shed",
                    "shed": self._shed_unlogged,
                    "in_progress": self.in_progress,
                    "waiting": self.waiting,
                    "limit": options.admission_limit,
                },
            )
            self._shed_unlogged, self._logged_at = 0, now


def _settle(waiter: "asyncio.Future[bool]", result: bool) -> None:
    if not waiter.done():
        waiter.set_result(result)


class Slot:
    """An admitted negotiate's slot; hold_for() keeps it for the connection granted."""

    __slots__ = ("connection_id", "user")

    def __init__(self) -> None:
        self.connection_id: str | None = None
        self.user = ""

    def hold_for(self, connection_id: str, user: str) -> None:
        self.connection_id, self.user = connection_id, user


class Opening:
    """One transport's connect in progress; done() once, whichever way it ends."""

    __slots__ = ("_admission", "_user")

    def __init__(self, admission: Admission | None, user: str = "") -> None:
        self._admission = admission  # None: counted nowhere (not admitted, or done)
        self._user = user  # counted for this user (no held slot), or ""

    def done(self) -> None:
        if self._admission is not None:
            if self._user:
                self._admission._opened(self._user)
            self._admission._release()
            self._admission = None


class Refusals:
    """Users whose connects RATE_LIMIT_CONNECTS refused, each until the limit lets one
    through again (time.monotonic): at most REFUSALS_KEPT, the oldest dropped first."""

    __slots__ = ("_until",)

    def __init__(self) -> None:
        self._until: dict[str, tuple[float, Refusal]] = {}

    def hold(self, user: str, refusal: Refusal, now: float) -> None:
        """The limit refused `user` a connect now; it says when to try again."""
        until = self._until
        until.pop(user, None)
        while len(until) >= REFUSALS_KEPT:  # the oldest first: most likely lapsed already
            del until[next(iter(until))]
        until[user] = (now + refusal.retry_after, refusal)

    def holding(self, user: str, now: float) -> Refusal | None:
        """The refusal that still holds for `user` (its wait as of now), or None."""
        entry = self._until.get(user)
        if entry is None:
            return None
        when, refusal = entry
        if now >= when:
            del self._until[user]
            return None
        return dataclasses.replace(refusal, retry_after=max(1, math.ceil(when - now)))

    def __len__(self) -> int:
        return len(self._until)
