"""What the connection package sees of things it cannot import: its process, and the
connection as the functions of it see it.

- `Process`: hub/process.HubProcess, which imports the connection (its registry holds
  them), as a connection uses it.
- `Connection`: lifecycle.HubConnection as the functions it is passed to use it: what
  the channel layer brings it (layer_messages.py), what its client invokes (invocations.py) and
  the hub methods (methods/). HubConnection calls those functions, so they cannot import
  it; this declares only what they read and call, its parts typed by their own classes.
  The parts see it only through the read-only `Owner` Protocol of their own module
  (lifecycle.py hands it when it makes them).

Nothing here imports lifecycle.py, layer_messages.py, invocations.py or methods/: no import
cycle, not even one of annotations (mypy checks HubConnection against `Connection`
where it passes itself).
"""

import asyncio
from collections.abc import Collection, Mapping
from typing import Any, Protocol
from uuid import UUID

from messenger_realtime.conf.settings import HubOptions
from messenger_realtime.hub.clock import Clock
from messenger_realtime.hub.connection.acknowledgements import Acknowledgements
from messenger_realtime.hub.connection.authentication import Authentication
from messenger_realtime.hub.connection.budget import Budget
from messenger_realtime.hub.connection.composing import Composing
from messenger_realtime.hub.connection.ending import Ending
from messenger_realtime.hub.connection.groups import Groups
from messenger_realtime.hub.connection.marks import StreamMarks
from messenger_realtime.hub.connection.outbound import Outbound
from messenger_realtime.hub.database_clock import DatabaseClock
from messenger_realtime.hub.delivery_slo import ClientShares
from messenger_realtime.hub.fanout import Fanout
from messenger_realtime.hub.protocols.base import HubProtocol
from messenger_realtime.hub.recovery import StreamRecovery
from messenger_realtime.hub.rosters import Rosters


class Process(Protocol):
    """hub/process.HubProcess, as a connection uses it: the process owns its registry
    entry and its place among its user's open connections, and what its event loop runs
    for every connection (the clock, the fan-out, the rosters)."""

    client_shares: ClientShares  # each user's share of the client delivery histogram

    def clock(self) -> Clock: ...
    def database_clock(self) -> DatabaseClock: ...

    def fanout(self, layer: Any) -> Fanout: ...

    def rosters(self) -> Rosters: ...

    def user_budget(self, user_id: UUID, options: HubOptions, now: float) -> Budget: ...

    def recovering(self, user_id: UUID) -> asyncio.Lock: ...

    async def read_missed(
        self, user_id: UUID, asked: Mapping[str, int], most: int, most_bytes: int
    ) -> list[StreamRecovery]: ...

    async def viewers_of(self, user_id: UUID, viewers: list[UUID]) -> Collection[UUID]: ...

    def forget(self, connection_id: str, connection: object) -> None: ...

    def give_back_place(self, user_id: UUID, connection_id: str, options: HubOptions) -> None: ...

    def keep(self, task: "asyncio.Future[None]") -> None: ...


class Connection(Protocol):
    """lifecycle.HubConnection, as layer_messages.py, invocations.py and methods/ use it: all
    read-only here (the connection writes its own fields)."""

    @property
    def user_id(self) -> UUID: ...

    @property
    def options(self) -> HubOptions: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def protocol(self) -> HubProtocol | None: ...

    @property
    def closing(self) -> bool: ...

    @property
    def hub(self) -> Process: ...

    @property
    def auth(self) -> Authentication: ...

    @property
    def groups(self) -> Groups: ...

    @property
    def outbound(self) -> Outbound: ...

    @property
    def composing(self) -> Composing: ...

    def stream_marks(self) -> StreamMarks: ...
    def acknowledging(self) -> Acknowledgements: ...

    def ids(self) -> dict[str, Any]: ...

    async def end(self, how: Ending) -> None: ...

    def end_soon(self, how: Ending) -> None: ...
