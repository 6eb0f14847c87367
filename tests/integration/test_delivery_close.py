"""A connection closed in the middle of a delivery batch (hub/connection/outbound.py): the
frames it had built for the batch's earlier events go out before the Close, and the Close
tells the client to reconnect (and resync) for the rest. A real HubConnection with its
own clock (hub/connection/timeouts.py) over the real channel layer; only the transport is
a stand-in, and the membership read of one event is held on an Event (a slow domain
read)."""

import asyncio
import json
import uuid
from typing import Any

import pytest

from messenger_realtime.conf.settings import load_hub_options
from messenger_realtime.hub.connection import HubConnection
from messenger_realtime.hub.connection.ending import RELEASED
from messenger_realtime.hub.connection.groups import Groups
from messenger_realtime.hub.credentials.tokens import Identity
from messenger_realtime.hub.process import HubProcess
from messenger_realtime.hub.protocols import JsonProtocol
from tests.support.helpers import layer
from tests.support.runtime import PrivateRedis, run
from tests.support.transports import FakeTransport

CLOSE = {"type": 7, "allowReconnect": True}


class Recorder(FakeTransport):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[dict[str, Any]] = []

    async def send(self, frame: str) -> None:
        self.records += [json.loads(r) for r in frame.split("\x1e")[:-1]]


class SlowRead(Groups):
    """An event of a chat it does not hold yet makes its connection read its memberships:
    here that read waits for `release`, and says `entered` when it starts."""

    def __init__(self, connection: HubConnection, expire_in_read: bool) -> None:
        super().__init__(connection.user_id, owner=connection)
        self.connection = connection
        self.entered, self.release = asyncio.Event(), asyncio.Event()
        self.expire_in_read = expire_in_read

    async def deliverable(self, chat: str, version: int | None) -> bool:
        self.entered.set()
        if self.expire_in_read:  # the credentials end during the read itself
            self.connection.auth.expires_at = self.connection.loop.time()
        await self.release.wait()
        return True


def event(chat: uuid.UUID, seq: int) -> dict[str, Any]:
    message = {"type": "realtime.event", "chat": str(chat), "event": "message_received"}
    return {**message, "payload": {"seq": seq}, "membership_version": 1}


@pytest.mark.parametrize("closer", ["the connection's clock", "the next event's check"])
def test_frames_built_before_a_mid_batch_expiry_go_out_before_the_close(
    private_redis: PrivateRedis, closer: str
) -> None:
    held, other = uuid.uuid4(), uuid.uuid4()

    async def scenario() -> list[dict[str, Any]]:
        transport = Recorder()
        connection = HubConnection(
            hub=HubProcess(),
            connection_id=uuid.uuid4().hex,
            identity=Identity(uuid.uuid4(), None),
            token=None,
            options=load_hub_options(),
            transport=transport,
            channel_layer=layer(private_redis.url),
        )
        groups = connection.groups = SlowRead(connection, closer == "the next event's check")
        connection.handshaken, connection.protocol = True, JsonProtocol(32768)
        groups.memberships.update({held: 1})
        await connection.open()  # its clock runs
        # One batch: an event it may have, one that needs a (slow) read, one more.
        for message in (event(held, 1), event(other, 2), event(held, 3)):
            groups.inbox.put(message)
        connection.outbound.start()
        await groups.entered.wait()  # the first event's frame is built, not sent
        delivery = connection.outbound.task  # the task forwarding this batch
        assert delivery is not None
        if closer == "the connection's clock":
            connection.auth.expires_at = connection.loop.time()  # the token's exp passes now
            connection.wake_at(connection.loop.time())  # tell its clock
            await asyncio.wait_for(transport.closed.wait(), 10)
        groups.release.set()
        await asyncio.wait_for(asyncio.gather(delivery, return_exceptions=True), 10)
        await asyncio.wait_for(transport.closed.wait(), 10)
        await connection.end(RELEASED)
        return transport.records

    records = run(scenario())
    seqs = [r["arguments"][0]["seq"] for r in records if r.get("type") == 1]
    if closer == "the connection's clock":
        assert seqs == [1]  # built before the close; the one read through it is not sent
    else:
        assert seqs == [1, 2]  # both checked before the expiry; the third is not
    assert records[-1] == CLOSE  # told to reconnect: the client resyncs what it missed
