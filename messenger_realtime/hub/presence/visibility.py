"""Whether a watcher may still see a user whose presence changed.

WatchPresence checks every user it is asked to watch against the host's port
(DomainPort.visible_users); what the port allowed then can change: the watched user
blocks the watcher, the two leave the last chat they shared, a contact is removed. The
port decides what matters and the hub cannot tell which domain change does, so a change
is checked again as it is delivered: a watcher whose check of that user is older than
RECHECK_AFTER asks the port again (DomainPort.viewers_of), and a watcher who may no
longer see the user stops watching them, silently, as the blocked user of a block is
never told: that change and every later one miss it. So a block or a leave ends a watch
at the first change after it, or within RECHECK_AFTER of it (typing's bound for blocks:
connection/composing.py).

The checks' reads run on a thread of their own (HubProcess.viewers_of, as a Recover's
do), never queued behind the reads every connect makes on the hub's read thread: a
storm of connects does not hold up a watcher's deliveries behind its check, and a flurry
of changes does not hold up anyone's connect.

The checks of one change are shared by the process's watchers: the change's message is
one object handed to each watching connection (hub/fanout.py), and the first of them
that needs a check makes it a batch, which reads on the loop's next turn for every
watcher that joined it by then: one read. A watcher that comes to the change after the
batch's read began starts another. So a change costs at most one read per process and
RECHECK_AFTER, and one in a connect storm, where the watches were just made, costs none.
A read that fails (the database unreachable) lets the change through, logged; those
watchers are checked again at the next change.
"""

import asyncio
from collections.abc import Awaitable, Callable, Collection
from typing import Any
from uuid import UUID

from messenger_realtime.contracts.port import get_domain_port
from messenger_realtime.exceptions import describe_error
from messenger_realtime.ops.logging import Field, get_logger

logger = get_logger(__name__)
RECHECK_AFTER = 60.0  # s a watcher's check of a watched user holds for
_BATCH = "_viewers"  # the message's key for its batch (the payload is what is sent)


Read = Callable[[UUID, list[UUID]], Awaitable[Collection[UUID]]]


def read_viewers(user_id: UUID, viewers: list[UUID]) -> Collection[UUID]:
    """The port's read (run off the event loop: HubProcess.viewers_of)."""
    return get_domain_port().viewers_of(user_id, viewers)


class Batch:
    """The watchers of one change that need a check, read together."""

    __slots__ = ("_port", "answer", "read", "user_id", "viewers")

    def __init__(self, user_id: UUID, port: Read) -> None:
        self.user_id = user_id
        self._port = port  # the process's read of DomainPort.viewers_of
        self.viewers: set[UUID] = set()
        # Its read, once begun: a viewer not in it starts another batch.
        self.read: asyncio.Task[None] | None = None
        # Those of `viewers` who may see the user; None when the port could not say.
        self.answer: asyncio.Future[frozenset[UUID] | None] | None = None

    def takes(self, viewer: UUID) -> bool:
        return self.read is None or viewer in self.viewers

    async def may_see(self, viewer: UUID) -> bool | None:
        """Whether `viewer` may see the user (None: the port could not say)."""
        loop = asyncio.get_running_loop()
        if self.answer is None:
            self.answer = loop.create_future()
            loop.call_soon(self._begin)  # after the other watchers woken with it joined
        self.viewers.add(viewer)
        allowed = await asyncio.shield(self.answer)
        return None if allowed is None else viewer in allowed

    def _begin(self) -> None:
        self.read = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        """The port's answer for every viewer that joined; whatever happens, every one
        of them is answered (a watcher left waiting would deliver nothing again)."""
        assert self.answer is not None
        allowed: frozenset[UUID] | None = None
        try:
            allowed = frozenset(await self._port(self.user_id, sorted(self.viewers)))
        except BaseException as exc:
            logger.warning(
                "presence change sent unchecked (the port could not say who may see it)",
                extra={
                    "action": "presence",
                    Field.USER_ID: self.user_id,
                    Field.ERROR_CODE: describe_error(exc),
                },
            )
            if not isinstance(exc, Exception):
                raise  # cancelled (the loop is closing): answered below all the same
        finally:
            if not self.answer.done():
                self.answer.set_result(allowed)


class Watch:
    """What a connection watches: the users, and when it last checked each may be seen
    (loop time). Whole lists are checked when made; a user re-checked since has a time
    of its own."""

    __slots__ = ("checked_at", "rechecked", "users")

    def __init__(self, users: frozenset[UUID], checked_at: float) -> None:
        self.users = users
        self.checked_at = checked_at
        self.rechecked: dict[UUID, float] | None = None

    def due(self, user: UUID, now: float) -> bool:
        """Whether the check of `user` is older than RECHECK_AFTER."""
        rechecked = self.rechecked
        at = rechecked.get(user, self.checked_at) if rechecked else self.checked_at
        return now - at >= RECHECK_AFTER

    def checked(self, user: UUID, now: float) -> None:
        if self.rechecked is None:
            self.rechecked = {}
        self.rechecked[user] = now

    def without(self, user: UUID) -> "Watch":
        left = Watch(self.users - {user}, self.checked_at)
        if self.rechecked:
            left.rechecked = {u: at for u, at in self.rechecked.items() if u != user}
        return left


NOTHING = Watch(frozenset(), 0.0)  # what a connection watches before WatchPresence


async def may_still_see(
    watch: Watch, viewer: UUID, user: UUID, message: dict[str, Any], read: Read
) -> bool:
    """Whether a change of `user` (its message, shared by the process's watchers) may go
    to `viewer`, who watches them through `watch`: without a read while the check holds;
    else with the batch's (`read`: the process's HubProcess.viewers_of). False: the
    viewer may no longer see the user (the caller stops watching them)."""
    loop = asyncio.get_running_loop()
    now = loop.time()
    if not watch.due(user, now):
        return True
    batch = message.get(_BATCH)
    if batch is None or not batch.takes(viewer):
        batch = message[_BATCH] = Batch(user, read)
    allowed = await batch.may_see(viewer)
    if allowed is None:
        return True  # sent unchecked (logged); checked again at the next change
    if allowed:
        watch.checked(user, now)
    return allowed
