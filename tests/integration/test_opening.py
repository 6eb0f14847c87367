"""Opening a logical connection (hub/transports/opening.py) against the real database and
a real Redis: what it writes to Redis, in how many round trips, and what a refused
opening leaves behind."""

from typing import Any

import pytest
from redis.asyncio.connection import AbstractConnection

from messenger_realtime.backplane.group_names import layer_group
from messenger_realtime.backplane.reservations import USED, ConnectionReservation
from messenger_realtime.conf.settings import load_hub_options
from messenger_realtime.contracts.events import HubTarget
from messenger_realtime.exceptions import InvalidToken
from messenger_realtime.hub.connection.ending import RELEASED
from messenger_realtime.hub.credentials import tokens
from messenger_realtime.hub.process import HubProcess
from messenger_realtime.hub.transports import opening
from project.messenger import services
from tests.support.factories import UserFactory
from tests.support.helpers import layer
from tests.support.inprocess import Recorder
from tests.support.runtime import PrivateRedis, run

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("hub_thread_db"),
]


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every round trip to Redis that writes a claim or a group membership (a pipeline
    is one), as the bytes sent: the process's reader and its watches are left out."""
    sent: list[bytes] = []
    send_packed = AbstractConnection.send_packed_command

    async def counted(self: Any, command: Any, check_health: bool = True) -> None:
        chunks = command if isinstance(command, list | tuple) else [command]
        packed = b"".join(bytes(c) for c in chunks)
        if b"ZADD" in packed or b"hub-connection" in packed:
            sent.append(packed)
        await send_packed(self, command, check_health)

    monkeypatch.setattr(AbstractConnection, "send_packed_command", counted)
    return sent


def open_with(
    channel_layer: Any, user: Any, connection_token: str, hub: HubProcess | None = None
) -> Any:
    """A new_connection() with `connection_token`, on `channel_layer`."""
    return opening.new_connection(
        hub or HubProcess(),
        connection_token=connection_token,
        identity=tokens.Identity(user.id, None),
        token=None,
        options=load_hub_options(),
        transport=Recorder(),
    )


def test_a_connection_opens_in_two_redis_round_trips(
    private_redis: PrivateRedis, trips: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The token's claim goes with the user's group (they are written at the same moment),
    the chats' groups after the reads: two round trips, where the claim alone took one."""
    user, other = UserFactory(), UserFactory()
    chats = [services.create_chat(other.id, [user.id]).id for _ in range(3)]
    channel_layer = layer(private_redis.url)
    monkeypatch.setattr(opening, "get_channel_layer", lambda: channel_layer)
    connection_id, connection_token = tokens.new_connection_token(user.id)

    async def scenario() -> list[str]:
        hub = HubProcess()
        connection = await open_with(channel_layer, user, connection_token, hub)
        try:
            return sorted(hub.fanout(channel_layer).members)
        finally:
            await connection.end(RELEASED)

    joined = run(scenario())
    assert joined == sorted(
        layer_group(t) for t in [HubTarget.user(user.id), *map(HubTarget.chat, chats)]
    )
    assert len(trips) == 2
    first = trips[0]  # the claim and the user's group, in one pipeline
    assert f"hub-connection:{connection_id}".encode() in first and b"NX" in first
    assert layer_group(HubTarget.user(user.id)).encode() in first
    assert all(layer_group(HubTarget.chat(c)).encode() in trips[1] for c in chats)
    assert private_redis.client().exists(f"asgi:hub-connection:{connection_id}")


def test_a_token_claimed_before_is_refused_and_leaves_nothing_joined(
    private_redis: PrivateRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token whose connection lives elsewhere (another process claimed it): refused with
    the reason, and the opening leaves no group, registry entry or connect in progress."""
    user, other = UserFactory(), UserFactory()
    services.create_chat(other.id, [user.id])
    channel_layer = layer(private_redis.url)
    monkeypatch.setattr(opening, "get_channel_layer", lambda: channel_layer)
    connection_id, connection_token = tokens.new_connection_token(user.id)
    private_redis.client().set(f"asgi:hub-connection:{connection_id}", b"1", ex=60)
    hub = HubProcess()
    in_progress = hub.admission.in_progress

    async def scenario() -> tuple[str, dict[str, Any], set[str]]:
        with pytest.raises(InvalidToken) as refused:
            await open_with(channel_layer, user, connection_token, hub)
        fanout = hub.fanout(channel_layer)
        return str(refused.value), dict(fanout.members), set(fanout.joined)

    reason, members, joined = run(scenario())
    assert reason == USED
    assert members == {} and joined == set()
    assert hub.get(connection_id) is None
    assert hub.admission.in_progress == in_progress
    groups = private_redis.client().keys("asgi:group:*")
    assert all(not private_redis.client().zcard(g) for g in groups)


def test_over_sharded_redis_the_claim_is_made_on_its_own_key_s_server(
    redis_shards: list[PrivateRedis], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pipelined with the user's group or not, a claim is made where a claim on its own
    (ConnectionReservation.make) looks, so two processes agree whichever way each made it."""
    channel_layer = layer([s.url for s in redis_shards])
    monkeypatch.setattr(opening, "get_channel_layer", lambda: channel_layer)
    users, issued = [UserFactory() for _ in range(4)], []
    for n, user in enumerate(users):  # two claims on each server
        cid, connection_token = tokens.new_connection_token(user.id)
        while channel_layer.consistent_hash(f"asgi:hub-connection:{cid}") != n % 2:
            cid, connection_token = tokens.new_connection_token(user.id)
        issued.append((cid, connection_token))

    async def scenario() -> list[bool]:
        for user, (_, connection_token) in zip(users, issued, strict=True):
            connection = await open_with(channel_layer, user, connection_token)
            await connection.end(RELEASED)
        ttl = load_hub_options().connection_token_ttl
        return [await ConnectionReservation(cid, ttl).make(channel_layer) for cid, _ in issued]

    assert run(scenario()) == [False] * 4  # each was claimed already, on either server
