"""A hub connection as its parts see it: the explicit interface between them.

Each part holds its HubConnection (lifecycle.py) and reads or calls only what is
declared here: the connection's shared state, the ways it ends, and of each other part
what another one uses. HubConnection satisfies `Connection` (mypy checks it where a
part is made), and nothing here imports a part or the connection, so the package has no
import cycle, not even one of annotations.
"""

import asyncio
from collections.abc import Mapping
from typing import Any, Protocol
from uuid import UUID

from messenger_realtime.conf.settings import HubOptions
from messenger_realtime.hub.auth import Identity
from messenger_realtime.hub.clock import Clock
from messenger_realtime.hub.connection.ending import Ending
from messenger_realtime.hub.connection.marks import StreamMarks
from messenger_realtime.hub.connection.membership import ChatMemberships
from messenger_realtime.hub.fanout import Fanout
from messenger_realtime.hub.inbox import Inbox
from messenger_realtime.hub.protocols.base import Frame, HubProtocol
from messenger_realtime.hub.recovery import StreamRecovery
from messenger_realtime.hub.rosters import Rosters
from messenger_realtime.hub.transports.base import Transport


class Process(Protocol):
    """hub/process.HubProcess, as a connection uses it: the process owns its registry
    entry and its place among its user's open connections, and what its event loop runs
    for every connection (the clock, the fan-out, the rosters)."""

    def clock(self) -> Clock: ...

    def fanout(self, layer: Any) -> Fanout: ...

    def rosters(self) -> Rosters: ...

    def recovering(self, user_id: UUID) -> asyncio.Lock: ...

    async def read_missed(
        self, user_id: UUID, asked: Mapping[str, int], most: int
    ) -> list[StreamRecovery]: ...

    def forget(self, connection_id: str, connection: object) -> None: ...

    def give_back_place(self, user_id: UUID, connection_id: str, options: HubOptions) -> None: ...

    def keep(self, task: "asyncio.Future[None]") -> None: ...


class AuthPart(Protocol):
    """authentication.Authentication, as the other parts use it."""

    session: str | None
    expires_at: float
    expiry_reason: str
    issued_at: float | None

    def renew(
        self, identity: Identity, token: str | None, loop: asyncio.AbstractEventLoop
    ) -> None: ...

    async def session_holds(self, user_id: UUID) -> bool: ...


class GroupsPart(Protocol):
    """groups.Groups, as the other parts use it."""

    memberships: ChatMemberships

    @property
    def inbox(self) -> Inbox: ...

    @property
    def chats(self) -> frozenset[UUID]: ...

    async def deliverable(self, chat: str, version: int | None) -> bool: ...

    async def sync(self) -> None: ...


class OutboundPart(Protocol):
    """outbound.Outbound, as the other parts use it."""

    delivering: bool

    def take_pings(self) -> None: ...

    def write_now(self, frame: Frame) -> None: ...

    async def send(self, frame: Frame) -> None: ...

    async def emit(self, frame: Frame) -> None: ...

    async def emit_many(self, frames: list[Frame]) -> None: ...

    async def flush(self) -> None: ...


class StatefulPart(Protocol):
    """stateful.StatefulReconnect, as the other parts use it."""

    ack_at: float | None
    detached_at: float | None

    def send_ack_now(self) -> None: ...

    async def emit(self, *frames: Frame) -> None: ...


class TimeoutsPart(Protocol):
    """timeouts.Timeouts, as the other parts use it."""

    def moved(self, when: float) -> None: ...


class Connection(Protocol):
    """lifecycle.HubConnection, as its parts use it."""

    connection_id: str
    user_id: UUID
    options: HubOptions
    channel_layer: Any
    loop: asyncio.AbstractEventLoop
    protocol: HubProtocol | None
    handshaken: bool
    refused_invocations: int
    # Written by the connection alone (read-only here).

    @property
    def transport(self) -> Transport | None: ...

    @property
    def closing(self) -> bool: ...

    @property
    def ended(self) -> bool: ...

    @property
    def opened_at(self) -> float: ...

    @property
    def last_received(self) -> float: ...

    @property
    def last_sent(self) -> float: ...

    @property
    def marks(self) -> StreamMarks | None: ...  # stream_marks() makes them

    def sent(self) -> None: ...

    def heard(self) -> float: ...

    def stream_marks(self) -> StreamMarks: ...

    @property
    def hub(self) -> Process: ...

    # Its parts: read-only here (a part never replaces another).
    @property
    def auth(self) -> AuthPart: ...

    @property
    def groups(self) -> GroupsPart: ...

    @property
    def outbound(self) -> OutboundPart: ...

    @property
    def stateful(self) -> StatefulPart | None: ...

    @property
    def timeouts(self) -> TimeoutsPart: ...

    def pings(self) -> bool: ...

    def unreachable_since(self) -> float | None: ...

    def ids(self) -> dict[str, Any]: ...

    async def end(self, how: Ending) -> None: ...

    def end_soon(self, how: Ending) -> None: ...
