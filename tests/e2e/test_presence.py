"""Presence, end to end: a client watches users it may see and hears when they come
online and go offline, on any hub process, once per change whatever their devices; a
user it may not see is refused; a killed Daphne's users go offline within the bound.
Real Daphne processes, real Redis and PostgreSQL, raw WebSocket clients."""

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from websockets.sync.client import ClientConnection

from messenger_realtime.hub import user_connections
from messenger_realtime.hub.presence import sweep
from project.messenger import services
from project.messenger.models import BlacklistEntry
from tests.support.factories import UserFactory
from tests.support.hub_clients import HubClient
from tests.support.hub_helpers import token_for
from tests.support.runtime import PrivateRedis
from tests.support.wire import RS, joined, records
from tests.support.workers import DaphneProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]


@pytest.fixture(scope="module")
def daphnes(live_env: dict[str, str]) -> Iterator[list[DaphneProcess]]:
    servers = [DaphneProcess(live_env), DaphneProcess(live_env)]
    yield servers
    for server in servers:
        server.kill()


def watch(ws: ClientConnection, users: list[Any], invocation_id: str = "w") -> dict[str, Any]:
    """Invoke WatchPresence and return its Completion (presence events meanwhile kept)."""
    message = {"type": 1, "invocationId": invocation_id, "target": "WatchPresence"}
    ws.send(json.dumps({**message, "arguments": [[str(u.id) for u in users]]}) + RS)
    while True:
        for record in records(ws):
            if record.get("type") == 3 and record.get("invocationId") == invocation_id:
                return record


def changes(ws: ClientConnection, timeout: float) -> list[dict[str, Any]]:
    """The presence events that come within `timeout` seconds (pings skipped)."""
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        try:
            batch = records(ws, timeout=left)
        except TimeoutError:
            break
        seen += [r["arguments"][0] for r in batch if r.get("target") == "presence"]
    return seen


def next_change(ws: ClientConnection, timeout: float = 10) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for record in records(ws, timeout=deadline - time.monotonic()):
            if record.get("target") == "presence":
                return dict(record["arguments"][0])
    raise AssertionError(f"no presence event within {timeout}s")


def test_a_watcher_hears_a_user_come_online_once_and_go_offline_with_the_last_device(
    daphnes: list[DaphneProcess],
) -> None:
    alice, bob = UserFactory(), UserFactory()
    services.create_chat(bob.id, [alice.id])  # bob took part
    with joined(daphnes[0], alice) as watcher:
        assert watch(watcher, [bob])["result"] == {str(bob.id): {"online": False, "lastSeen": None}}
        with joined(daphnes[1], bob):  # on the other process
            assert next_change(watcher) == {"userId": str(bob.id), "online": True, "lastSeen": None}
            with joined(daphnes[0], bob):  # a second device: nothing to tell
                assert watch(watcher, [bob], "again")["result"][str(bob.id)]["online"] is True
            assert changes(watcher, timeout=1) == []  # one device left: still online
        went = time.time()
        change = next_change(watcher)
    assert (change["userId"], change["online"]) == (str(bob.id), False)
    assert int(went) - 1 <= change["lastSeen"] <= time.time()


def test_a_user_coming_back_online_carries_the_last_seen_the_call_gives(
    daphnes: list[DaphneProcess],
) -> None:
    """The `presence` event and WatchPresence say the same lastSeen: a user seen offline
    before comes online with that time, never null (null: never seen offline)."""
    alice, bob = UserFactory(), UserFactory()
    services.create_chat(bob.id, [alice.id])  # bob took part
    with joined(daphnes[0], alice) as watcher:
        assert watch(watcher, [bob])["result"][str(bob.id)]["lastSeen"] is None
        with joined(daphnes[1], bob):
            next_change(watcher)
        went = next_change(watcher)
        assert went["online"] is False and went["lastSeen"] is not None
        called = watch(watcher, [bob], "offline")["result"][str(bob.id)]
        assert called == {"online": False, "lastSeen": went["lastSeen"]}
        with joined(daphnes[1], bob):
            back = next_change(watcher)
            assert back == {"userId": str(bob.id), "online": True, "lastSeen": went["lastSeen"]}
            called = watch(watcher, [bob], "online")["result"][str(bob.id)]
            assert called == {"online": True, "lastSeen": went["lastSeen"]}


def test_only_users_one_may_see_can_be_watched(daphnes: list[DaphneProcess]) -> None:
    alice, friend, stranger, blocker = UserFactory(), UserFactory(), UserFactory(), UserFactory()
    services.create_chat(friend.id, [alice.id, blocker.id], title="f")
    BlacklistEntry.objects.create(owner=blocker, blocked_user=alice)
    with joined(daphnes[0], alice) as ws:
        assert set(watch(ws, [friend])["result"]) == {str(friend.id)}
        refused = watch(ws, [friend, stranger, blocker], "refused")
        hidden = sorted([str(stranger.id), str(blocker.id)])
        assert refused["error"].endswith(
            f"HubException: may not watch these users: {', '.join(hidden)}"
        )
        with joined(daphnes[1], friend):  # still watching what it watched before
            assert next_change(ws)["userId"] == str(friend.id)
        assert watch(ws, [], "none")["result"] == {}
        with joined(daphnes[1], friend):  # watching nobody now
            assert changes(ws, timeout=1) == []


def test_a_stranger_who_opened_a_direct_chat_sees_nothing_until_answered(
    daphnes: list[DaphneProcess],
) -> None:
    """Presence by consent: opening a direct chat with someone grants the opener nothing
    (the other side was never asked); once they reply, the opener may watch them."""
    stranger, bob = UserFactory(), UserFactory()
    chat = services.create_chat(stranger.id, [bob.id])
    with joined(daphnes[0], stranger) as ws:
        refused = watch(ws, [bob])
        assert refused["error"].endswith(f"HubException: may not watch these users: {bob.id}")
        services.post_message(bob.id, chat.id, "hello?")
        assert watch(ws, [bob], "answered")["result"] == {
            str(bob.id): {"online": False, "lastSeen": None}
        }


def test_a_bad_watch_list_is_refused_with_its_reason(daphnes: list[DaphneProcess]) -> None:
    alice = UserFactory()
    with joined(daphnes[0], alice) as ws:
        message = {"type": 1, "invocationId": "x", "target": "WatchPresence"}
        for arguments, reason in [
            (["not a list"], "WatchPresence takes a list of user ids"),
            ([["not-a-uuid"]], "WatchPresence takes a list of user ids"),
            ([[str(alice.id)] * 201], "at most 200 users may be watched at once"),
        ]:
            ws.send(json.dumps({**message, "arguments": arguments}) + RS)
            (answer,) = records(ws)
            assert answer["error"].endswith(f"HubException: {reason}"), answer


def test_a_killed_daphnes_users_go_offline_within_the_bound(live_env: dict[str, str]) -> None:
    """A Daphne killed holding a user's only connection says nothing: the user's place
    lapses LEASE after its last renewal and the next sweep of a live process tells the
    watchers, within LEASE + SWEEP_EVERY (the issue's bound: 30 s)."""
    alice, bob = UserFactory(), UserFactory()
    services.create_chat(bob.id, [alice.id])  # bob took part
    live, doomed = DaphneProcess(live_env), DaphneProcess(live_env)
    try:
        with joined(live, alice) as watcher:
            watch(watcher, [bob])
            with joined(doomed, bob):
                assert next_change(watcher)["online"] is True
                doomed.kill()
                killed = time.monotonic()
                bound = user_connections.LEASE + sweep.SWEEP_EVERY + 2
                change = next_change(watcher, timeout=bound)
                took = time.monotonic() - killed
    finally:
        live.kill()
        doomed.kill()
    assert (change["userId"], change["online"]) == (str(bob.id), False)
    assert took <= bound and user_connections.LEASE + sweep.SWEEP_EVERY <= 30


def official(server: DaphneProcess, user: Any, env: dict[str, str]) -> HubClient:
    client = HubClient(
        "@microsoft/signalr", f"{server.http}/hubs/messenger", token_for(user.id), env
    )
    client.next("state", "connected")
    return client


def test_after_redis_restarts_the_reconnected_clients_know_again_who_is_online(
    live_env: dict[str, str], private_redis: PrivateRedis
) -> None:
    """Redis restarted without persistence forgets every place and presence group. The
    hub processes notice and close every connection with allowReconnect; the official
    clients reconnect (taking their places again) and the watcher watches again: it
    knows again that its friend is online, and hears them go."""
    env = dict(live_env, REDIS_URL=private_redis.url)  # the layer's and the places' Redis
    alice, bob = UserFactory(), UserFactory()
    services.create_chat(bob.id, [alice.id])  # bob took part
    daphnes = [DaphneProcess(env), DaphneProcess(env)]
    clients: list[HubClient] = []
    try:
        watcher = official(daphnes[0], alice, env)
        friend = official(daphnes[1], bob, env)
        clients += [watcher, friend]
        assert watcher.watch([bob])[str(bob.id)]["online"] is True
        private_redis.restart()
        watcher.next("state", "reconnected", timeout=30)
        friend.next("state", "reconnected", timeout=30)
        again = watcher.next("watching")["watching"][str(bob.id)]
        if not again["online"]:  # watched again before the friend's connect: told next
            assert watcher.next("event", "presence")["payload"]["online"] is True
        friend.send_line("stop")
        gone = watcher.next("event", "presence")["payload"]
        while gone["online"]:  # (an online notice of the reconnect may come first)
            gone = watcher.next("event", "presence")["payload"]
        assert gone["userId"] == str(bob.id) and gone["lastSeen"] is not None
    finally:
        for client in clients:
            client.kill()
        for server in daphnes:
            server.kill()


def test_presence_over_messagepack_with_the_official_client(
    daphnes: list[DaphneProcess], live_env: dict[str, str]
) -> None:
    """The watch's answer and the presence event in the other hub protocol."""
    alice, bob = UserFactory(), UserFactory()
    services.create_chat(bob.id, [alice.id])  # bob took part
    url = f"{daphnes[0].http}/hubs/messenger"
    watcher = HubClient(
        "@microsoft/signalr", url, token_for(alice.id), live_env, {"messagepack": True}
    )
    try:
        watcher.next("state", "connected")
        assert watcher.watch([bob])[str(bob.id)] == {"online": False, "lastSeen": None}
        with joined(daphnes[1], bob):
            change = watcher.next("event", "presence")["payload"]
        assert change == {"userId": str(bob.id), "online": True, "lastSeen": None}
    finally:
        watcher.kill()
