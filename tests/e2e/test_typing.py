"""Typing indicators end to end (hub/connection/composing.py): a real Daphne, real
WebSocket clients (JSON and MessagePack), the real domain port and Redis. Typing reaches
the chat's other members only; a removed member neither sends nor receives it; a
blocker is not shown the blocked user's; calls within the interval publish once; a
keystroke-rate burst is not charged to the invocation rate limit; and a typing flood to
a client that stopped reading is dropped, never closing it, while its real events still
reach it.

"Nothing arrived" is proven with a marker, never a sleep: a real event pushed to the
same user after the typing in question goes through the same process queue behind it,
so once the marker is read everything before it was delivered or dropped.
"""

import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
from django.conf import settings
from websockets.sync.client import ClientConnection

from messenger_realtime.contracts.port import get_domain_port
from messenger_realtime.hub.connection.composing import TYPING_TTL, TYPING_TYPE
from messenger_realtime.hub.inbox import VOLATILE
from project.messenger import services
from tests.support.factories import UserFactory
from tests.support.helpers import layer
from tests.support.hub_helpers import token_for
from tests.support.runtime import run
from tests.support.wire import RS, StuckClient, hub_socket, joined, push_to_user, records
from tests.support.workers import DaphneProcess, WorkerProcess

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("transactional_db")]
MARKER = "contact_removed"  # what push_to_user sends


@pytest.fixture(scope="module")
def daphne(live_env: dict[str, str]) -> Iterator[DaphneProcess]:
    server = DaphneProcess(live_env)
    yield server
    server.kill()


def typing(ws: ClientConnection, chat: Any, invocation_id: str | None = "t") -> None:
    message: dict[str, Any] = {"type": 1, "target": "Typing", "arguments": [str(chat)]}
    if invocation_id is not None:
        message["invocationId"] = invocation_id
    ws.send(json.dumps(message) + RS)


def completion(ws: ClientConnection, invocation_id: str = "t") -> dict[str, Any]:
    while True:
        for record in records(ws):
            if record.get("type") == 3 and record.get("invocationId") == invocation_id:
                return record


def typed_until_marker(ws: ClientConnection) -> list[dict[str, Any]]:
    """The typing events this connection gets before the next marker event."""
    seen: list[dict[str, Any]] = []
    while True:
        for record in records(ws):
            if record.get("target") == "typing":
                seen.append(record["arguments"][0])
            elif record.get("target") == MARKER:
                return seen


def nothing_typed(ws: ClientConnection, user: Any) -> list[dict[str, Any]]:
    push_to_user(user.id, 0)
    return typed_until_marker(ws)


def msgpack_messages(ws: ClientConnection) -> list[list[Any]]:
    data, found, offset = ws.recv(timeout=5), [], 0
    assert isinstance(data, bytes)
    while offset < len(data):
        length = shift = 0
        while True:
            byte = data[offset]
            offset += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        found.append(msgpack.unpackb(data[offset : offset + length], raw=False))
        offset += length
    return found


def test_typing_reaches_the_other_members_only_in_both_protocols(daphne: DaphneProcess) -> None:
    alice, bob, carol, dave = UserFactory(), UserFactory(), UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id, carol.id])
    services.create_chat(dave.id, [alice.id])  # dave shares another chat with alice
    with (
        joined(daphne, alice) as typist,
        joined(daphne, alice) as own_other_device,
        joined(daphne, bob) as member,
        joined(daphne, dave) as outsider,
        hub_socket(daphne, token_for(carol.id)) as binary,
    ):
        binary.send('{"protocol":"messagepack","version":1}' + RS)
        assert records(binary) == [{}]
        before = time.time()
        typing(typist, chat.id)
        assert completion(typist) == {"type": 3, "invocationId": "t", "result": None}
        (shown,) = typed_until_marker_after(member, bob)
        assert shown["chatId"] == str(chat.id) and shown["userId"] == str(alice.id)
        assert before + TYPING_TTL - 1 < shown["until"] < time.time() + TYPING_TTL + 1
        (packed,) = msgpack_messages(binary)
        assert packed[:4] == [1, {}, None, "typing"] and packed[4] == [shown]
        assert nothing_typed(own_other_device, alice) == []
        assert nothing_typed(outsider, dave) == []


def typed_until_marker_after(ws: ClientConnection, user: Any) -> list[dict[str, Any]]:
    push_to_user(user.id, 0)
    return typed_until_marker(ws)


def test_a_non_member_is_refused(daphne: DaphneProcess) -> None:
    alice, bob, carol = UserFactory(), UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id])
    with joined(daphne, carol) as ws:
        typing(ws, chat.id)
        error = completion(ws)["error"]
        typing(ws, "not a chat", "u")
        malformed = completion(ws, "u")["error"]
    assert error.endswith(" HubException: not a member of this chat")
    assert malformed.endswith(" HubException: Typing takes a chat id (a UUID string)")


def test_repeated_calls_within_the_interval_publish_once(daphne: DaphneProcess) -> None:
    alice, bob, carol = UserFactory(), UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id, carol.id])
    with joined(daphne, alice) as typist, joined(daphne, bob) as member:
        for _ in range(49):  # a keystroke each, as clients send them: no invocation id
            typing(typist, chat.id, invocation_id=None)
        typing(typist, chat.id)  # invocations run in order: this one answers last
        assert completion(typist)["result"] is None
        shown = typed_until_marker_after(member, bob)
    assert [s["userId"] for s in shown] == [str(alice.id)]


@pytest.fixture
def worker(worker_env: dict[str, str]) -> Iterator[WorkerProcess]:
    process = WorkerProcess(worker_env, polling_interval=0.2)
    yield process
    process.kill()


def test_a_removed_member_neither_sends_nor_receives_typing(
    daphne: DaphneProcess, worker: WorkerProcess
) -> None:
    alice, bob, carol = UserFactory(), UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id, carol.id])
    with (
        joined(daphne, alice) as owner,
        joined(daphne, bob) as member,
        joined(daphne, carol) as removed,
    ):
        services.remove_participant(alice.id, chat.id, carol.id)
        # At once, whether or not carol's connection heard of it yet: the publish reads
        # the chat's membership version, newer than what the connection holds.
        refused = completion_of(removed, chat.id, "r")
        assert refused["error"].endswith(" HubException: not a member of this chat")
        chat_updated(owner)  # the removal's own event: alice's connection catches up
        typing(member, chat.id)
        assert completion(member)["result"] is None
        carol_saw = nothing_typed(removed, carol)
        alice_saw = nothing_typed(owner, alice)
    assert carol_saw == []
    assert [s["userId"] for s in alice_saw] == [str(bob.id)]  # carol's tries: none shown


def chat_updated(ws: ClientConnection) -> None:
    while not any(r.get("target") == "chat_updated" for r in records(ws, timeout=20)):
        pass


def completion_of(ws: ClientConnection, chat: Any, invocation_id: str) -> dict[str, Any]:
    typing(ws, chat, invocation_id)
    return completion(ws, invocation_id)


def test_a_blocker_is_not_shown_the_blocked_users_typing(daphne: DaphneProcess) -> None:
    alice, bob, carol = UserFactory(), UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id, carol.id])
    services.set_blocked(bob.id, alice.id, True)
    with (
        joined(daphne, alice) as typist,
        joined(daphne, bob) as blocker,
        joined(daphne, carol) as other,
    ):
        typing(typist, chat.id)
        assert completion(typist)["result"] is None
        assert [s["userId"] for s in typed_until_marker_after(other, carol)] == [str(alice.id)]
        assert nothing_typed(blocker, bob) == []


# -- cost and backpressure -----------------------------------------------------------


@pytest.fixture
def strict_daphne(live_env: dict[str, str]) -> Iterator[DaphneProcess]:
    server = DaphneProcess(live_env, rate_limit_invocations=5, rate_limit_flood=3)
    yield server
    server.kill()


def test_a_keystroke_rate_burst_is_not_charged_to_the_invocation_limit(
    strict_daphne: DaphneProcess,
) -> None:
    alice, bob, carol = UserFactory(), UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id, carol.id])
    with joined(strict_daphne, alice) as typist:
        for _ in range(60):  # twelve times the limit, at once (within the connection's budget)
            typing(typist, chat.id, invocation_id=None)
        typing(typist, chat.id)
        assert completion(typist)["result"] is None
        # The limit is real: charged invocations past it are refused.
        answers = [completion_of_method(typist, "WatchPresence", f"w{n}") for n in range(6)]
    assert all("result" in answer for answer in answers[:5])
    assert "HubException: rate limit exceeded" in answers[5]["error"]


def completion_of_method(ws: ClientConnection, target: str, invocation_id: str) -> dict[str, Any]:
    """A shared method's call (charged to the user's rate limit): WatchPresence of nobody."""
    call = {"type": 1, "invocationId": invocation_id, "target": target, "arguments": [[]]}
    ws.send(json.dumps(call) + RS)
    return completion(ws, invocation_id)


@pytest.fixture
def bounded_daphne(live_env: dict[str, str]) -> Iterator[DaphneProcess]:
    server = DaphneProcess(live_env, send_buffer_limit=256 * 1024)
    yield server
    server.kill()


def server_records(sock: socket.socket, stop: str, timeout: float = 30) -> list[dict[str, Any]]:
    """The JSON records a raw client reads from its socket (server frames are unmasked),
    until one whose target is `stop`."""
    sock.settimeout(timeout)
    buffer, found = b"", []

    def take(count: int) -> bytes:
        nonlocal buffer
        while len(buffer) < count:
            chunk = sock.recv(65536)
            assert chunk, f"closed after {found[-3:]}"
            buffer += chunk
        taken, buffer = buffer[:count], buffer[count:]
        return taken

    while True:
        head = take(2)
        length = head[1] & 0x7F
        if length == 126:
            length = int.from_bytes(take(2), "big")
        elif length == 127:
            length = int.from_bytes(take(8), "big")
        payload = take(length)
        if head[0] & 0x0F == 0x8:  # a WebSocket close
            raise AssertionError(f"closed after {found[-3:]}")
        for part in payload.decode().split(RS)[:-1]:
            record = json.loads(part)
            found.append(record)
            if record.get("target") == stop:
                return found


def test_a_typing_flood_to_a_client_that_stopped_reading_is_dropped_and_never_closes_it(
    bounded_daphne: DaphneProcess,
) -> None:
    alice, bob, carol = UserFactory(), UserFactory(), UserFactory()
    chat = services.create_chat(alice.id, [bob.id, carol.id])
    version = get_domain_port().active_chats(bob.id)[chat.id]
    stuck = StuckClient(bounded_daphne, token_for(bob.id))
    bounded_daphne.wait_for(f"hub connected.* UserId={bob.id}")
    typings, events = 3000, 30  # ~200 B each: 600 kB of typing, far past the 256 kB bound

    async def flood() -> None:
        channel_layer = layer(str(settings.REDIS_URL))
        group = f"chat.{chat.id}"
        for n in range(typings):
            payload = {"chatId": str(chat.id), "userId": str(alice.id), "until": n}
            message = {"type": TYPING_TYPE, VOLATILE: True, "chat": str(chat.id)}
            message.update(membership_version=version, user=str(alice.id), blockers=[])
            message.update(event="typing", payload={**payload, "pad": "x" * 80})
            await channel_layer.group_send(group, message)  # as a flood of typists would
            if n % (typings // events) == 0:
                event = {"type": "realtime.event", "chat": str(chat.id)}
                event.update(event="message_received", payload={"seq": n // (typings // events)})
                await channel_layer.group_send(group, event)
            if n % 200 == 0:
                stuck.ping()  # alive and pinging, just not reading
        await channel_layer.group_send(
            f"user.{bob.id}", {"type": "realtime.event", "event": MARKER, "payload": {}}
        )

    flooding = threading.Thread(target=run, args=(flood(),))
    flooding.start()
    flooding.join()
    try:
        got = server_records(stuck.sock, stop=MARKER)  # only now does it read
    finally:
        stuck.sock.close()
    seqs = [r["arguments"][0]["seq"] for r in got if r.get("target") == "message_received"]
    shown = [r for r in got if r.get("target") == "typing"]
    assert seqs == list(range(events))  # every real event, in order
    assert not [r for r in got if r.get("type") == 7]  # never closed
    assert len(shown) < typings // 4  # the rest dropped: typing went first
    assert f"UserId={bob.id}" not in "".join(
        line for line in bounded_daphne.log().splitlines() if "hub connection closed" in line
    )
