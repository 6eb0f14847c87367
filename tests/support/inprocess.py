"""A hub connection in-process, past its handshake, whose transport records what it
sends: for tests of what a connection does with events and invocations."""

import json
import time
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from messenger_realtime.conf.settings import load_hub_options
from messenger_realtime.hub.connection import HubConnection
from messenger_realtime.hub.credentials.tokens import Identity
from messenger_realtime.hub.process import HubProcess
from messenger_realtime.hub.protocols import JsonProtocol
from messenger_realtime.hub.protocols.base import Frame
from tests.support.runtime import run


class Recorder:
    """A transport that keeps what it is given (as parsed JSON)."""

    name, binary_ok, inherent_keepalive = "WebSockets", True, False

    def __init__(self) -> None:
        self.sent: list[Any] = []

    async def send(self, frame: Frame) -> None:
        assert isinstance(frame, str)
        # One frame may hold several records (emit_many joins them).
        self.sent.extend(json.loads(record) for record in frame.split("\x1e") if record)

    async def close(self, *, drop: bool = False) -> None: ...

    def unsent(self) -> int:
        return 0

    def send_now(self, frame: Any) -> bool:
        return False

    def take_pings(self, heard: Any) -> None: ...

    def use_binary(self, binary: bool) -> None: ...

    def idle_since(self) -> float | None:
        return None

    def lingers(self) -> bool:
        return False


def consumer_of(
    user_id: uuid.UUID, held: dict[uuid.UUID, int], hub: HubProcess | None = None
) -> tuple[HubConnection, list[Any]]:
    """A connection past its handshake that holds `held` (chat -> membership version), its
    sent frames collected in the returned list; of `hub` (a process of its own if None)."""
    recorder = Recorder()

    async def create() -> HubConnection:
        return HubConnection(
            hub=hub or HubProcess(),
            connection_id=uuid.uuid4().hex,
            identity=Identity(user_id, None),
            token=None,
            options=load_hub_options(),
            transport=recorder,
            channel_layer=None,
        )

    connection = run(create())
    connection.handshaken, connection.protocol = True, JsonProtocol(32768)
    connection.groups.memberships.update(held)
    connection.loop = SimpleNamespace(time=time.monotonic)  # type: ignore[assignment]
    return connection, recorder.sent


@pytest.fixture
def hub_thread_db() -> Iterator[None]:
    """The consumer reads the domain in asgiref's thread: close that thread's connection
    afterwards, as Daphne's process end would (the test database is dropped later)."""
    yield
    run(sync_to_async(connections.close_all)())
