"""The whole product over a channel layer sharded on two private redis-servers
(CHANNEL_REDIS_URLS): real worker, real Daphne, the official SignalR client.

The chats are chosen so their layer groups live on different servers (asserted from the
servers themselves), so the worker's pipelined push reads groups on both and inserts into
the Daphne process's queue on its own server, which Daphne's batched receive reads.
"""

from collections.abc import Iterator
from typing import Any

import pytest

from project.messenger import services
from tests.support.factories import UserFactory
from tests.support.helpers import layer
from tests.support.runtime import PrivateRedis, private_redis_servers
from tests.support.shards import group_key

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]
ATTEMPTS = 40  # chats created at most to find one on a wanted server (1 in 2 each)


@pytest.fixture(scope="module")
def redis_shards() -> Iterator[list[PrivateRedis]]:
    """The module's two shards: its tests share them and, so, the hub (same settings)."""
    yield from private_redis_servers(2)


@pytest.fixture
def hub_env(worker_env: dict[str, str], redis_shards: list[PrivateRedis]) -> dict[str, str]:
    """Worker and Daphne on the two shards (the tests' own Redis is not theirs)."""
    return dict(worker_env, CHANNEL_REDIS_URLS=",".join(s.url for s in redis_shards))


def host_of_group(shards: list[PrivateRedis], group: str) -> int:
    """The server that holds this layer group's members, read from the servers."""
    key = group_key(layer(shards[0].url), group)
    holders = [index for index, server in enumerate(shards) if server.client().exists(key)]
    assert len(holders) == 1, f"{group} held by servers {holders}"
    return holders[0]


def chat_on(host: int, shards: list[PrivateRedis], creator: Any, *members: Any) -> Any:
    """A new chat whose layer group channels-redis hashes to `host`."""
    ring = layer([server.url for server in shards])
    for _ in range(ATTEMPTS):
        chat = services.create_chat(creator.id, [m.id for m in members], title="sharded")
        if ring.consistent_hash(f"chat.{chat.id}") == host:
            return chat
    raise AssertionError(f"no chat on host {host} in {ATTEMPTS} attempts")


def assert_receives(client: Any, sender: Any, chat: Any, body: str) -> None:
    message = services.post_message(sender.id, chat.id, body)
    payload = client.message()
    assert (payload["chatId"], payload["messageId"]) == (str(chat.id), str(message.id))


def test_a_client_receives_its_chats_events_from_groups_on_both_servers(
    clients: Any, redis_shards: list[PrivateRedis]
) -> None:
    alice, bob = UserFactory(name="alice"), UserFactory(name="bob")
    first = chat_on(0, redis_shards, alice, bob)
    second = chat_on(1, redis_shards, alice, bob)
    client = clients(bob)
    assert {f"chat:{first.id}", f"chat:{second.id}"} <= set(client.groups())
    # The hub joined bob's connection to groups that really live on different servers.
    assert host_of_group(redis_shards, f"chat.{first.id}") == 0
    assert host_of_group(redis_shards, f"chat.{second.id}") == 1
    for n in range(3):  # interleaved: each chat's events in order, none lost
        assert_receives(client, alice, first, f"first {n}")
        assert_receives(client, alice, second, f"second {n}")


def test_a_user_added_to_a_chat_on_the_other_server_receives_without_reconnecting(
    clients: Any, redis_shards: list[PrivateRedis]
) -> None:
    alice, bob, carol = (UserFactory(name=name) for name in ("alice", "bob", "carol"))
    client = clients(carol)
    user_host = host_of_group(redis_shards, f"user.{carol.id}")
    group = chat_on(1 - user_host, redis_shards, alice, bob)
    # The owner's fast path goes to the tests' own Redis, which this hub does not read:
    # only the worker (copying carol's connections across servers) and her consumer join
    # her to the chat.
    services.add_participant(alice.id, group.id, carol.id)
    client.next("event", "chat_updated")
    assert_receives(client, alice, group, "welcome carol")
    assert host_of_group(redis_shards, f"chat.{group.id}") == 1 - user_host
